"""The spec's testing kit ("Testing an adapter") on the engine.

The spec's kit starts a private Dex engine and a Worker child process, so a test
can SIGKILL the Worker at an exact moment and start a replacement. Here the
engine *is* Ray: :class:`AgentTestStack` starts a :class:`FlowEngine` on a
private namespace and store under ``tmp_path``. Given a worker module, as in the
spec (``AgentTestStack(tmp_path, [flow], "tests.my_worker")``), the stack's own
engine only calls hosts, and ``await stack.start_worker()`` runs that module in
a child process whose :func:`run_agent_worker` owns the namespace's hosts,
executors and scheduler: ``worker.kill()`` ends them all, and the next
``start_worker()`` resumes the runs. Without a worker module the hosts are Ray
actors that Ray restarts after a kill, and ``stack.kill_session_host(id)`` (or
``kill_tool_executors()``) crashes one process at a time.
"""

from __future__ import annotations

import asyncio
import inspect
import subprocess
import sys
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
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
from dex_agents_ray.testing._worker import AgentWorker, WorkerConfig, worker_environment

__all__ = ["AgentTestStack", "read_step_history", "wait_for_agent_snapshot", "wait_until"]

T = TypeVar("T")

_POLL_SECONDS = 0.05
_WORKER_START_SECONDS = 120.0
"""How long ``start_worker`` waits for a child to join Ray and start its hosts."""


class AgentTestStack:
    """An engine on a private Ray namespace and store, for one test.

    ``async with AgentTestStack(tmp_path, [flow]) as stack:`` starts the engine
    (joining the running Ray, or starting a local one), ``stack.sessions(flow)``
    gives the session client, and leaving the block stops every host. The store
    is the SQLite file ``tmp_path / "engine.db"`` unless ``store`` names another
    (a path, a ``postgresql://`` URI or a store config).

    With ``worker_module``, the spec's set-up: no host runs until
    ``await stack.start_worker()`` starts that module in a child process (its
    ``__main__`` block calls :func:`run_agent_worker`), and the stack's calls
    wait for a worker while none runs.

    Args:
        tmp_path: The test's directory (pytest's ``tmp_path``).
        flows: The Flows to register.
        worker_module: The module ``start_worker()`` runs with ``python -m``;
            ``None``: hosts start on demand in this process's engine.
        worker_cwd: The child's working directory; default this process's.
        worker_env: Variables set in the child and in every actor it starts.
        store: The store; default a SQLite file under ``tmp_path``.
        namespace: The Ray namespace; default a fresh ``test-<hex>`` one.
        **engine_options: Passed to :meth:`FlowEngine.start` (``placement``,
            ``passivate_after``, ``executor_pool``...), the worker's included.
    """

    def __init__(
        self,
        tmp_path: str | Path,
        flows: Sequence[AgentSessionFlow | Any],
        worker_module: str | None = None,
        *,
        worker_cwd: str | Path | None = None,
        worker_env: Mapping[str, str] | None = None,
        store: str | Path | StoreConfig | None = None,
        namespace: str | None = None,
        **engine_options: Any,
    ) -> None:
        if not flows:
            raise ValueError("AgentTestStack needs at least one flow")
        if worker_module is not None and (
            not isinstance(worker_module, str)
            or not all(part.isidentifier() for part in worker_module.split("."))
        ):
            raise ValueError(
                f"AgentTestStack: worker_module must be a module path such as "
                f"'tests.my_worker', got {worker_module!r}"
            )
        if worker_module is None and (worker_cwd is not None or worker_env):
            raise ValueError("AgentTestStack: worker_cwd and worker_env need a worker_module")
        env = dict(worker_env or {})
        bad = [key for key, value in env.items() if not isinstance(value, str) or not key]
        if bad:
            raise ValueError(f"AgentTestStack: worker_env values must be strings; see {bad}")
        self.tmp_path = Path(tmp_path)
        self.flows = list(flows)
        self.worker_module = worker_module
        self.worker_cwd = Path(worker_cwd) if worker_cwd is not None else None
        self.worker_env = env
        self.store = store if store is not None else self.tmp_path / "engine.db"
        self.namespace = namespace or f"test-{uuid.uuid4().hex[:12]}"
        self._engine_options = engine_options
        self._engine: FlowEngine | None = None
        self._workers: list[AgentWorker] = []

    def __repr__(self) -> str:
        return f"AgentTestStack(namespace={self.namespace!r}, store={str(self.store)!r})"

    async def __aenter__(self) -> AgentTestStack:
        self.tmp_path.mkdir(parents=True, exist_ok=True)
        options = dict(self._engine_options)
        if self.worker_module is not None:
            options["worker_hosts"] = "use"
        self._engine = await FlowEngine.start(
            self.flows, store=self.store, namespace=self.namespace, **options
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        engine, self._engine = self._engine, None
        try:
            for worker in self._workers:
                worker.kill()
                await worker.wait()
        finally:
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

    async def start_worker(self) -> AgentWorker:
        """Start the Worker child (``python -m <worker_module>``); returns it once its
        hosts answer, and the runs a killed worker left are running again.

        The child runs in a process group of its own, with ``worker_cwd`` and
        ``worker_env``; its output goes to ``tmp_path / "worker-<n>.log"``.

        Raises:
            RuntimeError: The stack has no worker module, a worker it started
                still runs (kill it first), or the child exited or did not start
                its hosts within two minutes (its output's end is in the message).
        """
        engine = self.engine
        if self.worker_module is None:
            raise RuntimeError(
                "start_worker: this AgentTestStack has no worker module; pass one, as in "
                "AgentTestStack(tmp_path, [flow], 'tests.my_worker')"
            )
        for previous in self._workers:
            if previous.killed:
                await previous.wait()  # reap it: its hosts end with it
        running = [worker for worker in self._workers if worker.is_running()]
        if running:
            raise RuntimeError(
                f"start_worker: worker {running[0].pid} still runs; kill it first "
                "(one worker owns the namespace's hosts at a time)"
            )
        worker = self._spawn(engine, len(self._workers) + 1)
        self._workers.append(worker)
        ready = self.tmp_path / f"worker-{len(self._workers)}.ready"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _WORKER_START_SECONDS
        while not ready.exists():
            if not worker.is_running() or loop.time() > deadline:
                worker.kill()
                await worker.wait()
                raise RuntimeError(
                    f"start_worker: {self.worker_module} did not start its hosts "
                    f"(exit status {worker.process.returncode}); its output ends:\n"
                    f"{worker.log_tail()}"
                )
            await asyncio.sleep(_POLL_SECONDS)
        engine.forget_hosts()  # handles to a killed worker's hosts answer no more
        return worker

    def _spawn(self, engine: FlowEngine, number: int) -> AgentWorker:
        """Write the child's configuration, then start it."""
        import ray
        from ray import cloudpickle

        options = {
            key: value
            for key, value in self._engine_options.items()
            if key not in ("placement", "shared_hosts", "ray_address")
        }
        config = WorkerConfig(
            ray_address=str(ray.get_runtime_context().gcs_address),
            namespace=self.namespace,
            store=self.store,
            ready_path=str(self.tmp_path / f"worker-{number}.ready"),
            flow_types=tuple(flow.get_flow_type() for flow in self.flows),
            env_vars=dict(self.worker_env),
            engine_options={**options, "placement": engine.placement},
        )
        config_path = self.tmp_path / f"worker-{number}.config"
        config_path.write_bytes(cloudpickle.dumps(config))  # type: ignore[no-untyped-call]
        log_path = self.tmp_path / f"worker-{number}.log"
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", str(self.worker_module)],
                cwd=self.worker_cwd,
                env=worker_environment(config_path, self.worker_env),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: kill() ends it whole
            )
        return AgentWorker(process, log_path)

    async def kill_session_host(self, session_id: str) -> int:
        """SIGKILL the process hosting ``session_id`` now; returns its PID.

        One host only, where ``worker.kill()`` ends all of a worker's: Ray
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
