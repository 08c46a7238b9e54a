"""The Ray actor that hosts flow runs.

A host is a named, detached async actor (``num_cpus=0``). Its constructor
opens the store and, when it is dedicated to one run, resumes that run at once,
so a host that Ray restarts after a crash picks its run up without waiting for
a client. A host may hold any number of runs; each run it activates takes a new
ownership epoch, which fences every commit of older incarnations.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

from dex_agents_ray.engine import _clock as clock
from dex_agents_ray.engine._errors import (
    Envelope,
    HostPassivatedError,
    StoreUnavailableError,
    envelope,
)
from dex_agents_ray.engine._exit_hooks import run_exit_hooks
from dex_agents_ray.engine._metrics import (
    record_run_activated,
    record_run_passivated,
    set_resident_runs,
)
from dex_agents_ray.engine.actors._channel import ChannelServer
from dex_agents_ray.engine.actors._config import HostConfig
from dex_agents_ray.engine.actors._handles import scheduler_handle
from dex_agents_ray.engine.actors._placement import PlacementMode
from dex_agents_ray.engine.actors._pool import ExecutorPool
from dex_agents_ray.engine.run._attempts import FlowDefinition
from dex_agents_ray.engine.run._driver import RunDriver
from dex_agents_ray.engine.run._operations import (
    StartRequest,
    run_rpc,
    start_run,
    stop_run,
    update_run_config,
)
from dex_agents_ray.engine.run._remote import decode_frame, load_definition, tune_collector
from dex_agents_ray.engine.run._streams import StreamBuffer
from dex_agents_ray.engine.store._open import open_store
from dex_agents_ray.engine.store._store import FlowStore

logger = logging.getLogger("dex_agents_ray.engine")


@contextlib.contextmanager
def _client_call(driver: RunDriver) -> Iterator[RunDriver]:
    """Keep the run in memory while a client call on it is in progress.

    Without this, a call that outlasts ``passivate_after`` (a slow RPC handler,
    a busy host) could see its run passivated under it and then commit into a
    run that no process holds any more: the change would be stored, but nothing
    would act on it until the next activation.
    """
    driver.waiters += 1
    try:
        yield driver
    finally:
        driver.waiters -= 1
        driver.touch()


class FlowHost:
    """Hosts runs; see the module docstring. Methods return envelopes."""

    async def __init__(  # type: ignore[misc]
        self, config: HostConfig, flow_id: str | None = None, slot: int | None = None
    ) -> None:
        self._config = config
        self._store: FlowStore = open_store(config.store)
        await self._store.open()
        clock.set_offset(await self._store.clock_offset())
        self._exiting = False
        self._passivated = 0
        self._drivers: dict[str, RunDriver] = {}
        self._activations: dict[str, asyncio.Task[RunDriver]] = {}
        self._definitions: dict[tuple[str, str], FlowDefinition] = {}
        self._streams = StreamBuffer(
            self._store, busy=self._busy, batch_window=config.stream_batch_window
        )
        self._refused: dict[str, int] = {}
        self._pool = ExecutorPool(
            config.namespace, config.executor_pool, detached=not config.worker_owned
        )
        self._channel = ChannelServer(self._client_request, "dex-host")
        """Clients of this node send their calls here after the first (see ``_channel``)."""
        self._socket_calls = 0
        import ray

        self._actor_id = ray.get_runtime_context().get_actor_id()
        # Ray restarts a dead host under the same actor ID, so an executor's handle
        # to the old incarnation reaches this one: the name this incarnation gives
        # its dispatches ends with a suffix of its own (see ``_from_here``).
        self._suffix = f"#{self._actor_id}#{uuid.uuid4().hex[:12]}"
        self._reloading: dict[str, asyncio.Task[None]] = {}
        self._resume: asyncio.Task[Any] | None = None
        tune_collector()
        loop = asyncio.get_running_loop()
        if flow_id is not None:
            self._resume = loop.create_task(self._driver(flow_id))
        elif slot is not None:
            self._resume = loop.create_task(self._resume_slot(slot))
        self._watcher: asyncio.Task[None] | None = None
        if config.passivate_after is not None:
            self._watcher = loop.create_task(self._watch_idle(config.passivate_after))

    def _busy(self, flow_id: str) -> bool:
        """Whether ``flow_id`` runs here and is about to do more on its own."""
        driver = self._drivers.get(flow_id)
        return driver is not None and driver.busy

    async def _resume_slot(self, slot: int) -> None:
        """A shared host (re)starting: resume every run of its slot with work in flight."""
        for flow_id in await self._store.runs_with_work():
            if self._config.placement.slot(flow_id) == slot:
                await self._driver(flow_id)

    # -- passivation -------------------------------------------------------------------

    async def _watch_idle(self, idle: float) -> None:
        """Let runs that only wait leave memory after ``idle`` seconds without activity."""
        while not self._exiting:
            await asyncio.sleep(max(0.05, idle / 4))
            now = time.monotonic()
            for flow_id, driver in list(self._drivers.items()):
                if now - driver.last_activity >= idle:
                    try:
                        await self._passivate(flow_id, driver, idle)
                    except Exception:
                        logger.exception("run %s: passivation failed; it stays", flow_id)
            if self._config.placement.mode is PlacementMode.DEDICATED and self._empty():
                await self._exit()
                return

    def _empty(self) -> bool:
        return not self._drivers and not self._activations and self._passivated > 0

    async def _passivate(self, flow_id: str, driver: RunDriver, idle: float) -> None:
        async with driver.commit_lock:
            ok, wake_at = driver.passivation(clock.now(), idle)
            if not ok or self._drivers.get(flow_id) is not driver:
                return
            dedicated = self._config.placement.mode is PlacementMode.DEDICATED
            if dedicated:
                self._exiting = True  # refuse calls from now on: the client retries
            try:
                await self._store.passivate(flow_id, driver.epoch, wake_at)
            except Exception:
                self._exiting = False
                raise
            del self._drivers[flow_id]
            self._streams.forget(flow_id)
            self._passivated += 1
            record_run_passivated()
            set_resident_runs(self._actor_id, len(self._drivers))
        await driver.stop()
        if wake_at is not None:
            scheduler_handle(self._config).notify.remote()
        logger.info("run %s passivated (wake at %s)", flow_id, wake_at)

    async def _exit(self) -> None:
        """A dedicated host whose run left: end this process (the name is freed)."""
        import ray

        self._exiting = True
        await self._store.close()
        run_exit_hooks()
        ray.kill(ray.get_runtime_context().current_actor, no_restart=True)

    async def wake(self, flow_id: str) -> Envelope:
        """Activate ``flow_id`` here (the scheduler calls this for a due timer)."""

        async def activate() -> bool:
            await self._driver(flow_id)
            return True

        return await envelope(activate())

    # -- activation --------------------------------------------------------------------

    async def _driver(self, flow_id: str) -> RunDriver:
        if self._exiting:
            raise HostPassivatedError(f"the host of {flow_id!r} is passivating it")
        driver = self._drivers.get(flow_id)
        if driver is not None and not driver.stale:
            driver.touch()
            return driver
        task = self._activations.get(flow_id)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._activate(flow_id))
            self._activations[flow_id] = task
            task.add_done_callback(lambda _: self._activations.pop(flow_id, None))
        return await task

    async def _activate(self, flow_id: str) -> RunDriver:
        previous = self._drivers.pop(flow_id, None)
        if previous is not None:
            await previous.stop()
        self._streams.forget(flow_id)
        epoch, loaded = await self._store.activate(flow_id)
        definition = None
        if loaded is not None:
            definition = await self._definition(loaded.run.flow_type, loaded.run.flow_hash)
        import ray

        driver = RunDriver(
            store=self._store,
            flow_id=flow_id,
            epoch=epoch,
            definition=definition,
            host_handle=ray.get_runtime_context().current_actor,
            streams=self._streams,
            on_stale=lambda: self._count_refusal(flow_id),
            pool=self._pool,
            # The suffix tells an executor a re-created or restarted host from the old one.
            host_name=f"{self._config.placement.host_name(flow_id)}{self._suffix}",
            on_store_down=lambda: self._reload_later(flow_id),
            retention=self._config.retention,
        )
        if loaded is not None:
            driver.load(loaded)
            driver.start()
        self._drivers[flow_id] = driver
        record_run_activated()
        set_resident_runs(self._actor_id, len(self._drivers))
        return driver

    def _reload_later(self, flow_id: str) -> None:
        """A commit of ``flow_id`` failed past the store's retry deadline: drop the
        run from memory and activate it again from the store once it answers."""
        if flow_id not in self._reloading:
            task = asyncio.get_running_loop().create_task(self._reload(flow_id))
            self._reloading[flow_id] = task
            task.add_done_callback(lambda _: self._reloading.pop(flow_id, None))

    async def _reload(self, flow_id: str) -> None:
        driver = self._drivers.get(flow_id)
        if driver is not None and driver.stale:  # not one a client call already reloaded
            del self._drivers[flow_id]
            await driver.stop()
        delay = 0.5
        while not self._exiting:
            try:
                await self._driver(flow_id)
                logger.info("run %s: reloaded from the store", flow_id)
                return
            except StoreUnavailableError as error:
                logger.warning("run %s: still waiting for the store: %s", flow_id, error)
            except Exception:
                logger.exception("run %s: reloading failed", flow_id)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)

    async def _definition(self, flow_type: str, flow_hash: str) -> FlowDefinition:
        key = (flow_type, flow_hash)
        cached = self._definitions.get(key)
        if cached is None:
            blob = await self._store.get_flow_definition(flow_type, flow_hash)
            if blob is None:
                raise KeyError(f"flow type {flow_type!r} version {flow_hash} is not registered")
            flow, mapper = load_definition(blob)
            cached = FlowDefinition(flow_type, flow_hash, blob, flow, mapper)
            self._definitions[key] = cached
        return cached

    # -- client operations -------------------------------------------------------------

    async def start_flow(self, flow_id: str, request: StartRequest) -> Envelope:
        async def start() -> str:
            with _client_call(await self._driver(flow_id)) as driver:
                if driver.definition is None or driver.definition.flow_hash != request.flow_hash:
                    running = driver.state.is_running
                    if not running or request.id_reuse_policy == "allow_terminate_if_running":
                        driver.definition = await self._definition(
                            request.flow_type, request.flow_hash
                        )
                return await start_run(driver, request)

        return await envelope(start())

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

        async def call() -> bytes:
            with _client_call(await self._running_or_closed(flow_id, "InvokeRPC")) as driver:
                return await run_rpc(driver, rpc_name, input_value, request_id, extra, fresh=fresh)

        return await envelope(call())

    async def stop_flow(self, flow_id: str, stop_type: str, reason: str | None) -> Envelope:
        async def stop() -> None:
            with _client_call(await self._running_or_closed(flow_id, "StopFlow")) as driver:
                await stop_run(driver, stop_type, reason)

        return await envelope(stop())

    async def update_flow_config(self, flow_id: str, search_mode: str | None) -> Envelope:
        async def update() -> None:
            with _client_call(await self._running_or_closed(flow_id, "UpdateFlowConfig")) as driver:
                await update_run_config(driver, search_mode)

        return await envelope(update())

    async def get_attributes(self, flow_id: str, keys: list[str]) -> Envelope:
        """The stored values (serialized ``dex.Value``, ``None`` when unset) of
        ``keys``, as committed: what is read here is durable before it answers."""

        async def read() -> list[bytes | None]:
            with _client_call(await self._running_or_closed(flow_id, "GetAttributes")) as driver:
                attributes = driver.state.attributes
                values = [attributes.get(key) for key in keys]
                await driver.durable()
                return values

        return await envelope(read())

    async def _running_or_closed(self, flow_id: str, operation: str) -> RunDriver:
        from dex_agents_ray.engine.run._operations import not_active

        driver = await self._driver(flow_id)
        if driver.state.run is None:
            raise not_active(flow_id, operation)
        return driver

    async def wait_closed(self, flow_id: str, timeout: float | None) -> Envelope:
        """Wait until the run is no longer running (or ``timeout`` passes)."""

        async def wait() -> bool:
            with _client_call(await self._driver(flow_id)) as driver:
                loop = asyncio.get_running_loop()
                deadline = None if timeout is None else loop.time() + timeout
                while driver.state.run is not None and driver.state.is_running:
                    remaining = None if deadline is None else deadline - loop.time()
                    if remaining is not None and remaining <= 0:
                        return False
                    try:
                        await asyncio.wait_for(asyncio.shield(driver.closed()), remaining)
                    except TimeoutError:
                        return False
                    if driver.state.is_running:  # stopped here, not closed: ask again
                        raise HostPassivatedError(f"the host of {flow_id!r} let it go")
                return driver.state.run is not None

        return await envelope(wait())

    # -- streams -----------------------------------------------------------------------

    async def wait_stream(
        self, flow_id: str, stream: str, after_offset: int, limit: int, timeout: float | None
    ) -> Envelope:
        """Up to ``limit`` Stream records past ``after_offset``, waiting up to
        ``timeout`` for the first (long poll); ``[]`` when none came."""
        return await envelope(self._streams.wait(flow_id, stream, after_offset, limit, timeout))

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
        return await envelope(self._streams.wait_many(positions, limit, timeout))

    # -- remote Step tasks -------------------------------------------------------------

    async def ack_remote_start(self, flow_id: str, exec_id: str, attempt: int) -> bool:
        driver = self._drivers.get(flow_id)
        if driver is None or driver.stale:
            return False
        return await driver.attempts.ack_remote_start(exec_id, attempt)

    async def remote_frame(
        self, flow_id: str, exec_id: str, attempt: int, kind: str, payload: bytes
    ) -> None:
        driver = self._drivers.get(flow_id)
        if driver is not None:
            driver.attempts.on_frame(exec_id, attempt, decode_frame(kind, payload))

    async def remote_frames(
        self, frames: list[tuple[str, str, int, str, bytes]], host_name: str | None = None
    ) -> None:
        """Heartbeats and Stream writes from an executor, in the order they happened
        (each names its call by (run, execution, dispatch number))."""
        if not self._from_here(host_name):
            return
        for flow_id, exec_id, dispatch, kind, payload in frames:
            driver = self._drivers.get(flow_id)
            if driver is not None:
                driver.attempts.on_dispatch_frame(exec_id, dispatch, decode_frame(kind, payload))

    async def client_channel(self) -> tuple[str, str | None]:
        """This host's node ID and the path of its socket for clients of the same
        node (``None``: none here); see ``_channel``."""
        import ray

        return ray.get_runtime_context().get_node_id(), await self._channel.address()

    async def _client_request(self, request: tuple[str, str, tuple[Any, ...]]) -> Any:
        """A client's call that came by the socket: what the same call through Ray
        does (any public method, as Ray would take)."""
        method, flow_id, args = request
        if not isinstance(method, str) or method.startswith("_") or method not in _METHODS:
            raise ValueError(f"{method!r} is not a host method")
        self._socket_calls += 1
        answer = getattr(self, method)(flow_id, *args)
        return await answer if inspect.isawaitable(answer) else answer

    def client_sockets(self) -> dict[str, int]:
        """Clients that connected to this host's socket and the calls that came by
        it, since start (for tooling and tests)."""
        return {"connections": self._channel.connections, "calls": self._socket_calls}

    def definition_box(self, key: str) -> list[Any]:
        """The boxed object ref of the Flow definition ``key`` this host sent an
        executor (``[]`` if none): a call that came by the socket carries none."""
        return self._pool.definition_box(key)

    def _from_here(self, host_name: str | None) -> bool:
        """Whether an executor's call concerns attempts this incarnation dispatched
        (``host_name``: the name they were sent with; ``None``: not said). A
        call about an earlier incarnation's attempt is refused: its attempt key
        (run, execution, attempt number) may name one this incarnation sent
        again after reloading the run, and must not pass for it."""
        return host_name is None or host_name.endswith(self._suffix)

    def executor_results(
        self, results: list[tuple[tuple[str, str, int], Any]], host_name: str | None = None
    ) -> None:
        """Outcomes of attempts an executor finished ahead of its batch."""
        if self._from_here(host_name):
            self._pool.deliver(results)

    async def ack_remote_starts(
        self, attempts: list[tuple[str, str, int]], host_name: str | None = None
    ) -> list[bool]:
        """Start acknowledgements from an executor, each naming its call by (run,
        execution, dispatch number): one commit per run."""
        if not self._from_here(host_name):
            return [False] * len(attempts)
        by_run: dict[str, list[int]] = {}
        for index, (flow_id, _, _) in enumerate(attempts):
            by_run.setdefault(flow_id, []).append(index)
        answers = [False] * len(attempts)

        async def one_run(flow_id: str, indexes: list[int]) -> None:
            driver = self._drivers.get(flow_id)
            if driver is None or driver.stale:
                return
            batch = [(attempts[i][1], attempts[i][2]) for i in indexes]
            for index, answer in zip(
                indexes, await driver.attempts.ack_dispatches(batch), strict=True
            ):
                answers[index] = answer

        await asyncio.gather(*(one_run(f, i) for f, i in by_run.items()))
        return answers

    def live_attempts(
        self, attempts: list[tuple[str, str, int]], host_name: str | None = None
    ) -> list[bool]:
        """Whether each (flow ID, execution ID, dispatch number) is still running for
        this host; executors cancel the calls that are not (their host died or moved
        on)."""
        if not self._from_here(host_name):
            return [False] * len(attempts)
        live = []
        for flow_id, exec_id, dispatch in attempts:
            driver = self._drivers.get(flow_id)
            live.append(
                driver is not None
                and not driver.stale
                and driver.attempts.dispatch_active(exec_id, dispatch)
            )
        return live

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
        for driver in self._drivers.values():
            driver.schedule_evaluation()

    def profile_start(self) -> None:
        import cProfile

        self._prof = cProfile.Profile()
        self._prof.enable()

    def profile_stop(self, path: str) -> None:
        self._prof.disable()
        self._prof.dump_stats(path)

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
        self._drivers.pop(flow_id, None)
        driver = await self._driver(flow_id)
        return driver.epoch

    def reloading(self) -> list[str]:
        """Runs this host dropped after a store outage and waits to activate again."""
        return sorted(self._reloading)

    def _count_refusal(self, flow_id: str) -> None:
        self._refused[flow_id] = self._refused.get(flow_id, 0) + 1

    def refused_commits(self, flow_id: str) -> int:
        """How many commits of superseded incarnations of ``flow_id`` the store refused."""
        return self._refused.get(flow_id, 0)

    async def epoch_of(self, flow_id: str) -> int | None:
        driver = self._drivers.get(flow_id)
        return None if driver is None else driver.epoch

    async def shutdown(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
        for driver in list(self._drivers.values()):
            await driver.stop()
        self._streams.close()
        await self._store.close()
        run_exit_hooks()


_METHODS = frozenset(
    name for name, member in vars(FlowHost).items() if callable(member) and name[:1] != "_"
)
"""The methods a client may call through Ray, and so by the socket."""
