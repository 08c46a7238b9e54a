"""The Ray actor that hosts flow runs.

A host is a named, detached async actor (``num_cpus=0``). Its constructor
opens the store and, when it is dedicated to one run, resumes that run at once,
so a host that Ray restarts after a crash picks its run up without waiting for
a client. A host may hold any number of runs; each run it activates takes a new
ownership epoch, which fences every commit of older incarnations.

``FlowHost`` is the calls Ray dispatches by name; the work is its collaborators':
``ResidentRuns`` (the runs in memory, their activation and reload),
``Passivator`` (idle runs leave memory), ``ClientCalls`` (a client's operations
on a run) and ``AttemptReports`` (what executors report about attempts).
"""

from __future__ import annotations

import asyncio
import inspect
import os
import uuid
from typing import Any

from dex_agents_ray.engine import _clock as clock
from dex_agents_ray.engine._errors import Envelope, envelope
from dex_agents_ray.engine._exit_hooks import run_exit_hooks
from dex_agents_ray.engine.actors._attempt_reports import AttemptReports
from dex_agents_ray.engine.actors._channel import ChannelServer
from dex_agents_ray.engine.actors._client_calls import ClientCalls
from dex_agents_ray.engine.actors._config import HostConfig
from dex_agents_ray.engine.actors._passivator import Passivator
from dex_agents_ray.engine.actors._pool import ExecutorPool
from dex_agents_ray.engine.actors._residents import ResidentRuns
from dex_agents_ray.engine.run._operations import StartRequest
from dex_agents_ray.engine.run._remote import tune_collector
from dex_agents_ray.engine.store._open import open_store
from dex_agents_ray.engine.store._store import FlowStore


class FlowHost:
    """Hosts runs; see the module docstring. Client calls return envelopes."""

    async def __init__(  # type: ignore[misc]
        self, config: HostConfig, flow_id: str | None = None, slot: int | None = None
    ) -> None:
        import ray

        self._config = config
        self._store: FlowStore = open_store(config.store)
        await self._store.open()
        clock.set_offset(await self._store.clock.offset())
        self._pool = ExecutorPool(
            config.namespace, config.executor_pool, detached=not config.worker_owned
        )
        actor_id = ray.get_runtime_context().get_actor_id()
        # Ray restarts a dead host under the same actor ID, so an executor's handle
        # to the old incarnation reaches this one: the name this incarnation gives
        # its dispatches ends with a suffix of its own (see ``AttemptReports``).
        suffix = f"#{actor_id}#{uuid.uuid4().hex[:12]}"
        self._runs = ResidentRuns(self._store, config, self._pool, actor_id=actor_id, suffix=suffix)
        self._calls = ClientCalls(self._runs)
        self._reports = AttemptReports(self._runs, self._pool, suffix)
        self._passivator = Passivator(self._runs, self._store, config)
        self._socket = _SocketCalls(self)
        self._channel = ChannelServer(self._socket.answer, "dex-host")
        """Clients of this node send their calls here after the first (see ``_channel``)."""
        tune_collector()
        loop = asyncio.get_running_loop()
        self._resume: asyncio.Task[Any] | None = None
        if flow_id is not None:
            self._resume = loop.create_task(self._runs.driver(flow_id))
        elif slot is not None:
            self._resume = loop.create_task(self._runs.resume_slot(slot))
        self._watcher: asyncio.Task[None] | None = None
        if config.passivate_after is not None:
            self._watcher = loop.create_task(self._passivator.watch(config.passivate_after))

    async def wake(self, flow_id: str) -> Envelope:
        """Activate ``flow_id`` here (the scheduler calls this for a due timer)."""

        async def activate() -> bool:
            await self._runs.driver(flow_id)
            return True

        return await envelope(activate())

    # -- client operations -------------------------------------------------------------

    async def start_flow(self, flow_id: str, request: StartRequest) -> Envelope:
        return await envelope(self._calls.start(flow_id, request))

    async def invoke_rpc(
        self,
        flow_id: str,
        rpc_name: str,
        input_value: bytes | None,
        request_id: str,
        extra: tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]],
        fresh: bool = False,
    ) -> Envelope:
        """Run an RPC; ``fresh``: the client made ``request_id`` for this very try,
        so no earlier try can have recorded it."""
        return await envelope(
            self._calls.rpc(flow_id, rpc_name, input_value, request_id, extra, fresh)
        )

    async def stop_flow(self, flow_id: str, stop_type: str, reason: str | None) -> Envelope:
        return await envelope(self._calls.stop(flow_id, stop_type, reason))

    async def update_flow_config(self, flow_id: str, search_mode: str | None) -> Envelope:
        return await envelope(self._calls.update_config(flow_id, search_mode))

    async def get_attributes(self, flow_id: str, keys: list[str]) -> Envelope:
        """The stored values (serialized ``dex.Value``, ``None`` when unset) of
        ``keys``, as committed: what is read here is durable before it answers."""
        return await envelope(self._calls.attributes(flow_id, keys))

    async def wait_closed(self, flow_id: str, timeout: float | None) -> Envelope:
        """Wait until the run is no longer running (or ``timeout`` passes)."""
        return await envelope(self._calls.wait_closed(flow_id, timeout))

    # -- streams -----------------------------------------------------------------------

    async def wait_stream(
        self, flow_id: str, stream: str, after_offset: int, limit: int, timeout: float | None
    ) -> Envelope:
        """Up to ``limit`` Stream records past ``after_offset``, waiting up to
        ``timeout`` for the first (long poll); ``[]`` when none came."""
        return await envelope(
            self._runs.streams.wait(flow_id, stream, after_offset, limit, timeout)
        )

    async def wait_streams(
        self,
        flow_id: str,
        positions: list[tuple[str, str, int]],
        limit: int,
        timeout: float | None,
    ) -> Envelope:
        """One long poll for many readers of runs on this host (a client's shared
        poll; ``flow_id``, the first position's, routes it): ``(index, records)``
        for each ``(flow ID, stream, after offset)`` with records past it, waiting
        up to ``timeout`` for the first; ``[]`` when none came."""
        return await envelope(self._runs.streams.wait_many(positions, limit, timeout))

    # -- remote Step tasks -------------------------------------------------------------

    async def ack_remote_start(self, flow_id: str, exec_id: str, attempt: int) -> bool:
        return await self._reports.ack_start(flow_id, exec_id, attempt)

    async def remote_frame(
        self, flow_id: str, exec_id: str, attempt: int, kind: str, payload: bytes
    ) -> None:
        self._reports.frame(flow_id, exec_id, attempt, kind, payload)

    async def remote_frames(
        self, frames: list[tuple[str, str, int, str, bytes]], host_name: str | None = None
    ) -> None:
        """Heartbeats and Stream writes from an executor, in the order they happened
        (each names its call by (run, execution, dispatch number))."""
        self._reports.frames(frames, host_name)

    def executor_results(
        self, results: list[tuple[tuple[str, str, int], Any]], host_name: str | None = None
    ) -> None:
        """Outcomes of attempts an executor finished ahead of its batch."""
        self._reports.results(results, host_name)

    async def ack_remote_starts(
        self, attempts: list[tuple[str, str, int]], host_name: str | None = None
    ) -> list[bool]:
        """Start acknowledgements from an executor, each naming its call by (run,
        execution, dispatch number): one commit per run."""
        return await self._reports.ack_starts(attempts, host_name)

    def live_attempts(
        self, attempts: list[tuple[str, str, int]], host_name: str | None = None
    ) -> list[bool]:
        """Whether each (flow ID, execution ID, dispatch number) is still running for
        this host; executors cancel the calls that are not (their host died or moved
        on)."""
        return self._reports.live(attempts, host_name)

    def definition_box(self, key: str) -> list[Any]:
        """The boxed object ref of the Flow definition ``key`` this host sent an
        executor (``[]`` if none): a call that came by the socket carries none."""
        return self._pool.definition_box(key)

    # -- the same-node socket ----------------------------------------------------------

    async def client_channel(self) -> tuple[str, str | None]:
        """This host's node ID and the path of its socket for clients of the same
        node (``None``: none here); see ``_channel``."""
        import ray

        return ray.get_runtime_context().get_node_id(), await self._channel.address()

    def client_sockets(self) -> dict[str, int]:
        """Clients that connected to this host's socket and the calls that came by
        it, since start (for tooling and tests)."""
        return {"connections": self._channel.connections, "calls": self._socket.calls}

    # -- operations for tooling and tests ----------------------------------------------

    async def ready(self) -> bool:
        """Resolves once the constructor (and a dedicated run's resume) finished."""
        if self._resume is not None:
            await self._resume
        return True

    def set_clock_offset(self, seconds: float) -> None:
        """A test engine moved the clock: look at every run's waits and timers again."""
        clock.set_offset(seconds)
        self._pool.set_clock_offset(seconds)
        for _, driver in self._runs.items():
            driver.schedule_evaluation()

    def pid(self) -> int:
        return os.getpid()

    def shared_hosts(self) -> int:
        """The number of shared hosts of the pool this host was started in."""
        return self._config.placement.shared_hosts

    def node_id(self) -> str:
        """The Ray node this host runs on."""
        import ray

        return str(ray.get_runtime_context().get_node_id())

    async def take_over(self, flow_id: str) -> int:
        """Start a second incarnation of ``flow_id`` with a new epoch; returns it.

        The current driver is left running, as a zombie after a partition would
        be: its next commit is refused. Crash tests use this.
        """
        return await self._runs.take_over(flow_id)

    def reloading(self) -> list[str]:
        """Runs this host dropped after a store outage and waits to activate again."""
        return self._runs.reloading()

    def refused_commits(self, flow_id: str) -> int:
        """How many commits of superseded incarnations of ``flow_id`` the store refused."""
        return self._runs.refused_commits(flow_id)

    async def epoch_of(self, flow_id: str) -> int | None:
        driver = self._runs.held(flow_id)
        return None if driver is None else driver.epoch

    async def shutdown(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
        await self._runs.stop_all()
        await self._store.close()
        run_exit_hooks()


_METHODS = frozenset(
    name for name, member in vars(FlowHost).items() if callable(member) and name[:1] != "_"
)
"""The methods a client may call through Ray, and so by the socket."""


class _SocketCalls:
    """A client's calls that come by the host's socket: each does what the same
    call through Ray does (any public method of the host, as Ray would take)."""

    def __init__(self, host: FlowHost) -> None:
        self._host = host
        self.calls = 0
        """Calls that came by the socket since the host started."""

    async def answer(self, request: tuple[str, str, tuple[Any, ...]]) -> Any:
        method, flow_id, args = request
        if not isinstance(method, str) or method.startswith("_") or method not in _METHODS:
            raise ValueError(f"{method!r} is not a host method")
        self.calls += 1
        answer = getattr(self._host, method)(flow_id, *args)
        return await answer if inspect.isawaitable(answer) else answer
