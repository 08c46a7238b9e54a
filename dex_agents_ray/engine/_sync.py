"""``SyncEngineClient``: the blocking twin of ``EngineClient``."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from dex import (
    Attribute,
    AttributeMapLoad,
    Flow,
    FlowConfig,
    FlowInfo,
    FlowResult,
    RPCInvokeOptions,
    SearchFlowsPage,
    StartFlowOptions,
    StopFlowOptions,
    Stream,
    StreamMessage,
    StreamMessagesPage,
)

if TYPE_CHECKING:
    from dex_agents_ray.engine._client import EngineClient, StepHistoryEntry

T = TypeVar("T")


class SyncEngineClient:
    """Every ``EngineClient`` method, blocking; safe to call from any thread.

    Calls run on a private event loop in a daemon thread, so this works inside
    a notebook cell or a WSGI handler that has no loop of its own.
    """

    def __init__(self, client: EngineClient) -> None:
        self._client = client
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="dex-agents-ray-sync-client", daemon=True
        )
        self._thread.start()

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    @property
    def async_client(self) -> EngineClient:
        """The ``EngineClient`` these calls go to."""
        return self._client

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine that uses :attr:`async_client` on this client's loop and
        wait for it (a blocking twin of any async helper over the engine client)."""
        return self._run(coro)

    def close(self) -> None:
        """Stop and close the private event loop."""
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
        if not self._loop.is_running() and not self._loop.is_closed():
            self._loop.close()

    def start_flow(
        self, flow: Flow[Any], flow_id: str, input: object, options: StartFlowOptions | None = None
    ) -> str:
        return self._run(self._client.start_flow(flow, flow_id, input, options))

    def invoke_rpc(
        self,
        rpc_method: Callable[..., Any],
        flow_id: str,
        input: object = None,
        *,
        run_id: str = "",
        options: RPCInvokeOptions | None = None,
        request_id: str | None = None,
    ) -> Any:
        return self._run(
            self._client.invoke_rpc(
                rpc_method, flow_id, input, run_id=run_id, options=options, request_id=request_id
            )
        )

    def stop_flow(self, flow_id: str, options: StopFlowOptions | None = None) -> None:
        self._run(self._client.stop_flow(flow_id, options))

    def update_flow_config(self, flow_id: str, config: FlowConfig) -> None:
        """See :meth:`EngineClient.update_flow_config`."""
        self._run(self._client.update_flow_config(flow_id, config))

    def get_attributes(
        self, flow_id: str, reads: Sequence[Attribute[Any] | AttributeMapLoad]
    ) -> tuple[Any, ...]:
        """See :meth:`EngineClient.get_attributes`."""
        return self._run(self._client.get_attributes(flow_id, reads))

    def describe_flow(self, flow_id: str) -> FlowInfo:
        return self._run(self._client.describe_flow(flow_id))

    def wait_for_flow(self, flow_id: str, timeout: timedelta | float | None = None) -> FlowResult:
        return self._run(self._client.wait_for_flow(flow_id, timeout))

    def search_flows(
        self,
        query: str,
        page_size: int,
        next_page_token: str = "",
        *,
        include_continued_as_new: bool = False,
    ) -> SearchFlowsPage:
        return self._run(
            self._client.search_flows(
                query,
                page_size,
                next_page_token,
                include_continued_as_new=include_continued_as_new,
            )
        )

    def read_stream(
        self,
        flow_id: str,
        stream: Stream[Any],
        resume_token: str = "",
        timeout: timedelta | float | None = None,
    ) -> StreamMessage[Any]:
        return self._run(self._client.read_stream(flow_id, stream, resume_token, timeout))

    def list_stream_messages(
        self, flow_id: str, stream: Stream[Any], page_size: int, before_page_token: str = ""
    ) -> StreamMessagesPage[Any]:
        return self._run(
            self._client.list_stream_messages(flow_id, stream, page_size, before_page_token)
        )

    def read_step_history(self, flow_id: str) -> list[StepHistoryEntry]:
        return self._run(self._client.read_step_history(flow_id))
