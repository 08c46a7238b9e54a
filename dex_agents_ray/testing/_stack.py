"""The spec's testing kit ("Testing an adapter"), adapted to the engine.

The spec's kit starts a private Dex engine and a Worker child process, so a test
can SIGKILL the Worker at an exact moment and start a replacement. Here the
engine *is* Ray: :class:`AgentTestStack` starts a :class:`FlowEngine` on a
private namespace and store under ``tmp_path``; the processes that host
sessions and run tools are Ray actors that Ray replaces after a kill, so
``worker.kill()`` followed by ``await stack.start_worker()`` becomes one
``stack.kill_session_host(session_id)`` (or ``kill_tool_executors()``).
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar, cast, overload

from dex_agents_ray.engine import (
    EngineClient,
    FlowEngine,
    StepHistoryEntry,
    StoreConfig,
)
from dex_agents_ray.session import AgentSessionClient, AgentSessionFlow, AgentSnapshot
from dex_agents_ray.testing._actors import (
    kill_named_actor,
    kill_scheduler,
    kill_tool_executors,
)
from dex_agents_ray.testing._crash import kill_flow_actor

__all__ = ["AgentTestStack", "read_step_history", "wait_for_agent_snapshot", "wait_until"]

T = TypeVar("T")

_POLL_SECONDS = 0.05


class AgentTestStack:
    """An engine on a private Ray namespace and store, for one test.

    ``async with AgentTestStack(tmp_path, [flow]) as stack:`` starts the engine
    (joining the running Ray, or starting a local one), ``stack.sessions(flow)``
    gives the session client, and leaving the block stops every host. The store
    is the SQLite file ``tmp_path / "engine.db"`` unless ``store`` names another
    (a path, a ``postgresql://`` URI or a store config).

    Args:
        tmp_path: The test's directory (pytest's ``tmp_path``).
        flows: The Flows to register.
        store: The store; default a SQLite file under ``tmp_path``.
        namespace: The Ray namespace; default a fresh ``test-<hex>`` one.
        **engine_options: Passed to :meth:`FlowEngine.start` (``placement``,
            ``passivate_after``, ``executor_pool``...).
    """

    def __init__(
        self,
        tmp_path: str | Path,
        flows: Sequence[AgentSessionFlow | Any],
        *,
        store: str | Path | StoreConfig | None = None,
        namespace: str | None = None,
        **engine_options: Any,
    ) -> None:
        if not flows:
            raise ValueError("AgentTestStack needs at least one flow")
        self.tmp_path = Path(tmp_path)
        self.flows = list(flows)
        self.store = store if store is not None else self.tmp_path / "engine.db"
        self.namespace = namespace or f"test-{uuid.uuid4().hex[:12]}"
        self._engine_options = engine_options
        self._engine: FlowEngine | None = None

    def __repr__(self) -> str:
        return f"AgentTestStack(namespace={self.namespace!r}, store={str(self.store)!r})"

    async def __aenter__(self) -> AgentTestStack:
        self.tmp_path.mkdir(parents=True, exist_ok=True)
        self._engine = await FlowEngine.start(
            self.flows, store=self.store, namespace=self.namespace, **self._engine_options
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        engine, self._engine = self._engine, None
        if engine is not None:
            await engine.shutdown(stop_hosts=True)

    @property
    def engine(self) -> FlowEngine:
        """The running engine; raises ``RuntimeError`` outside ``async with``."""
        if self._engine is None:
            raise RuntimeError(
                "AgentTestStack is not started: use `async with AgentTestStack(...)`"
            )
        return self._engine

    @property
    def client(self) -> EngineClient:
        """The engine client (``start_flow``, ``search_flows``, ``read_stream``...)."""
        return self.engine.client

    def sessions(self, flow: AgentSessionFlow) -> AgentSessionClient:
        """The session client of ``flow`` (one of the stack's flows)."""
        if flow not in self.flows:
            raise ValueError(f"{flow!r} is not one of this stack's flows")
        return AgentSessionClient(self.engine.client, flow)

    async def read_step_history(self, session_id: str) -> list[StepHistoryEntry]:
        """The session's Step history, oldest first (see :func:`read_step_history`)."""
        return await self.engine.client.read_step_history(session_id)

    async def kill_session_host(self, session_id: str) -> int:
        """SIGKILL the process hosting ``session_id`` now; returns its PID.

        The spec's ``worker.kill()`` then ``await stack.start_worker()``: Ray
        restarts the host, which resumes the session from the store.
        """
        return int(await asyncio.to_thread(kill_flow_actor, self.engine, session_id))

    async def kill_tool_executors(self) -> list[int]:
        """SIGKILL every executor actor (the processes running remote tool Steps)."""
        return await kill_tool_executors(self.namespace)

    async def kill_scheduler(self) -> int | None:
        """SIGKILL the namespace's scheduler actor; ``None`` when none runs."""
        return await kill_scheduler(self.namespace)

    async def kill_actor(self, name: str) -> int | None:
        """SIGKILL the named actor ``name`` of the stack's namespace; ``None`` when absent."""
        return await kill_named_actor(self.namespace, name)


async def read_step_history(
    source: AgentTestStack | FlowEngine | EngineClient, flow_id: str
) -> list[StepHistoryEntry]:
    """Completed Steps and their attempts for ``flow_id``, oldest first.

    The spec's ``read_step_history(server_address, flow_id)`` read a Dex
    server through ``dexcli``; here ``source`` is the stack, engine or client.
    Each ``StepHistoryEntry`` has ``event_type`` (``EXECUTE_COMPLETED_EVENT``
    for a completed ``execute``), ``step_type``, ``step_execution_id`` and
    ``final_attempt``.
    """
    if isinstance(source, AgentTestStack):
        client = source.client
    elif isinstance(source, FlowEngine):
        client = source.client
    elif isinstance(source, EngineClient):
        client = source
    else:
        raise TypeError(
            "read_step_history: source must be an AgentTestStack, FlowEngine or "
            f"EngineClient, got {type(source).__name__}"
        )
    return await client.read_step_history(flow_id)


@overload
async def wait_until(
    description: str,
    probe: Callable[[], Awaitable[T]],
    *,
    timeout: float = 60.0,
    interval: float = _POLL_SECONDS,
) -> T: ...


@overload
async def wait_until(
    description: str,
    probe: Callable[[], T],
    *,
    timeout: float = 60.0,
    interval: float = _POLL_SECONDS,
) -> T: ...


async def wait_until(
    description: str,
    probe: Callable[[], Any],
    *,
    timeout: float = 60.0,
    interval: float = _POLL_SECONDS,
) -> Any:
    """Call ``probe`` (sync or async) until it returns a truthy value; return it.

    Polls with a deadline instead of sleeping for a fixed time; raises
    ``TimeoutError`` naming ``description`` and the last value after ``timeout``
    seconds.
    """
    if timeout <= 0:
        raise ValueError(f"wait_until: timeout must be positive, got {timeout}")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = probe()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if loop.time() > deadline:
            raise TimeoutError(f"{description}: not reached within {timeout} s; last: {value!r}")
        await asyncio.sleep(interval)


async def wait_for_agent_snapshot(
    sessions: AgentSessionClient,
    session_id: str,
    probe: Callable[[AgentSnapshot], T | None],
    *,
    description: str = "the snapshot",
    timeout: float = 60.0,
) -> T:
    """Poll ``session_id``'s snapshot until ``probe(snapshot)`` is truthy; return that.

    ``probe`` may pick something out of the snapshot (``lambda s:
    next(iter(s.pending_interrupts), None)``) or be a plain predicate.
    """

    async def check() -> T | None:
        return probe(await sessions.get_agent_snapshot(session_id))

    result = await wait_until(description, check, timeout=timeout)
    return cast(T, result)
