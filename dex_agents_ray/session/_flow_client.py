"""The seam between the session and the engine: the few client methods the
session, ``ui_stream``, the CLI and the testing kit call.

``AgentSessionClient`` wraps any :class:`FlowClient`: the engine's
``EngineClient`` (``engine.client``) and the dex SDK's ``AsyncClient`` both
satisfy it, as ``SyncEngineClient`` and the SDK's ``Client`` satisfy
:class:`SyncFlowClient` (the bottom of this module has mypy prove all four).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, overload

from dex import (
    Flow,
    FlowInfo,
    SearchFlowsPage,
    StartFlowOptions,
    Stream,
    StreamMessage,
    StreamMessagesPage,
)

__all__ = ["FlowClient", "SyncFlowClient"]

V = TypeVar("V")


class FlowClient(Protocol):
    """The asynchronous client methods the session's callers use, as
    ``dex.AsyncClient`` declares them.

    Example::

        async def snapshot(client: FlowClient, flow: AgentSessionFlow) -> AgentSnapshot:
            return await client.invoke_rpc(flow.get_agent_snapshot, "s-1")

    A client belongs to the event loop it was made on; call it from that loop only.
    """

    async def start_flow(
        self, flow: Flow[Any], flow_id: str, input: Any, options: StartFlowOptions = ...
    ) -> str:
        """Start a run of ``flow`` with ID ``flow_id``; returns the run ID."""
        ...

    # Invoke an ``@rpc`` of a running flow (the bound method of the registered Flow),
    # with its input or without one. (The SDK's overloads come in this order.)
    @overload
    async def invoke_rpc(self, rpc_method: Callable[..., Any], flow_id: str, input: Any) -> Any: ...

    @overload
    async def invoke_rpc(self, rpc_method: Callable[..., Any], flow_id: str) -> Any: ...

    async def describe_flow(self, flow_id: str) -> FlowInfo:
        """The run's ID, type, status and start time."""
        ...

    async def search_flows(
        self, query: str, page_size: int, next_page_token: str = ...
    ) -> SearchFlowsPage:
        """One page of runs matching a visibility query."""
        ...

    async def read_stream(
        self,
        flow_id: str,
        stream: Stream[V],
        resume_token: str = ...,
        timeout: timedelta | None = ...,
    ) -> StreamMessage[V]:
        """The next message after ``resume_token`` (a long poll up to ``timeout``)."""
        ...

    async def list_stream_messages(
        self, flow_id: str, stream: Stream[V], page_size: int, before_page_token: str = ...
    ) -> StreamMessagesPage[V]:
        """Retained messages, newest first, ``page_size`` at a time."""
        ...


class SyncFlowClient(Protocol):
    """The blocking client methods ``ui_stream``'s ``_sync`` functions use, as
    ``dex.Client`` declares them (``SyncEngineClient`` is the engine's).

    Example::

        snapshot = read_agent_event_stream_snapshot_sync(engine.sync_client(), flow, "s-1")

    A blocking client may be called from any thread that runs no event loop.
    """

    # Invoke an ``@rpc`` of a running flow (the bound method of the registered Flow),
    # with its input or without one. (The SDK's overloads come in this order.)
    @overload
    def invoke_rpc(self, rpc_method: Callable[..., Any], flow_id: str, input: Any) -> Any: ...

    @overload
    def invoke_rpc(self, rpc_method: Callable[..., Any], flow_id: str) -> Any: ...

    def read_stream(
        self,
        flow_id: str,
        stream: Stream[V],
        resume_token: str = ...,
        timeout: timedelta | None = ...,
    ) -> StreamMessage[V]:
        """The next message after ``resume_token`` (a long poll up to ``timeout``)."""
        ...

    def list_stream_messages(
        self, flow_id: str, stream: Stream[V], page_size: int, before_page_token: str = ...
    ) -> StreamMessagesPage[V]:
        """Retained messages, newest first, ``page_size`` at a time."""
        ...


if TYPE_CHECKING:
    # mypy proves the engine's clients and the SDK's satisfy the seam.
    import dex

    from dex_agents_ray.engine import EngineClient, SyncEngineClient

    def _engine_clients(a: EngineClient, s: SyncEngineClient) -> tuple[FlowClient, SyncFlowClient]:
        return a, s

    def _sdk_clients(a: dex.AsyncClient, s: dex.Client) -> tuple[FlowClient, SyncFlowClient]:
        return a, s
