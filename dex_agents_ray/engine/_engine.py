"""``FlowEngine``: joins Ray, opens the store, registers flows, hands out clients."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import os
import typing
from datetime import timedelta
from pathlib import Path
from typing import Any

from dex import CodecRegistry, Flow, FlowDefinitionError, Registry

from dex_agents_ray.engine import _clock
from dex_agents_ray.engine._client import EngineClient
from dex_agents_ray.engine._engine_options import (
    EngineOptions,
    WorkerHosts,
)
from dex_agents_ray.engine._errors import EngineError
from dex_agents_ray.engine._exit_hooks import run_exit_hooks
from dex_agents_ray.engine._options import ExecutorPoolOptions, RetentionOptions
from dex_agents_ray.engine._sync import SyncEngineClient
from dex_agents_ray.engine.actors._executor import EXECUTOR_PREFIX
from dex_agents_ray.engine.actors._handles import (
    SCHEDULER_NAME,
    HostConfig,
    host_handle,
    scheduler_handle,
    shared_host_handle,
    worker_host,
)
from dex_agents_ray.engine.actors._placement import (
    DEDICATED_PREFIX,
    SHARED_PREFIX,
    Placement,
    PlacementMode,
)
from dex_agents_ray.engine.run._streams import STREAM_BATCH_WINDOW_SECONDS
from dex_agents_ray.engine.sdk._codecs import CachingCodecRegistry
from dex_agents_ray.engine.sdk._sdk import RegisteredFlow as _RegisteredFlow
from dex_agents_ray.engine.sdk._sdk import ValueMapper, flow_for_instance
from dex_agents_ray.engine.store._open import open_store
from dex_agents_ray.engine.store._store import (
    POSTGRES_URI_SCHEMES,
    FlowStore,
    PostgresStoreConfig,
    SqliteStoreConfig,
    StoreConfig,
)

logger = logging.getLogger("dex_agents_ray.engine")

DEFAULT_NAMESPACE = "dex-agents-ray"
HOST_PREFIXES = (DEDICATED_PREFIX, SHARED_PREFIX, EXECUTOR_PREFIX)
DEFAULT_SHARED_HOSTS = 4
"""The most shared hosts ``FlowEngine.start`` chooses by itself (see ``shared_hosts``)."""

DEFAULT_STORE_DIR = ".dex-agents-ray"


async def _shared_pool_size(namespace: str, asked: int | None) -> int:
    """How many shared hosts ``namespace`` runs: the size a live shared host was
    started with (``asked`` must match it), else ``asked``, else the cluster's
    CPUs up to ``DEFAULT_SHARED_HOSTS``.

    On 2 cores, ``benchmarks/agent_loop.py``'s default sessions at C=50 ran
    594 and 600 steps/s on 2 hosts against 515 and 534 on 4 (CPU per step 2.9
    against 3.6 ms): more hosts than cores only add processes to switch between
    and split the group commits.
    """
    import ray

    live: int | None = None
    for entry in ray.util.list_named_actors(all_namespaces=True):
        if entry["namespace"] != namespace or not entry["name"].startswith(SHARED_PREFIX):
            continue
        try:
            handle = ray.get_actor(entry["name"], namespace=namespace)
            live = int(await asyncio.wait_for(handle.shared_hosts.remote(), 30))
        except Exception:  # it exited meanwhile, or cannot answer: ask another
            continue
        break
    if asked is not None:
        if live is not None and live != asked:
            raise ValueError(
                f"shared_hosts={asked}: namespace {namespace!r} runs {live} shared hosts; "
                f"every driver of a namespace must use the same number (or None)"
            )
        return asked
    if live is not None:
        return live
    resources: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
    cpus = int(resources.get("CPU", 0))
    # No CPUs yet (a head node without any, workers still to come): the default.
    return min(DEFAULT_SHARED_HOSTS, cpus) if cpus >= 1 else DEFAULT_SHARED_HOSTS


def task_worker_system_config() -> dict[str, int]:
    """Ray settings for a local Ray that runs tool Steps as fractional-CPU tasks.

    With Ray's defaults a node keeps about one idle worker per CPU and kills the
    rest after 1 s, so bursts of ``num_cpus=0.1`` tasks start a worker process
    per task, over and over (measured: 20 concurrent sessions with Ray-task tools
    took 149 s; with these settings 28 s). On a cluster, set the same values
    with ``RAY_num_workers_soft_limit`` and
    ``RAY_idle_worker_killing_time_threshold_ms`` on every node.
    """
    return {
        "num_workers_soft_limit": max(32, 10 * (os.cpu_count() or 2)),
        "idle_worker_killing_time_threshold_ms": 60_000,
    }


def _resolve_annotations(flow: Flow[Any]) -> None:
    """Replace string annotations of handlers with the objects they name.

    A Flow defined in ``__main__`` or a notebook is pickled by value, and
    cloudpickle keeps only the globals a function's code uses, so string
    annotations (``from __future__ import annotations``) could not be resolved
    where the Flow is unpickled. Resolving them here, where the globals exist,
    makes the stored definition self-contained.
    """
    holders: list[type[Any]] = [type(flow)]
    holders.extend(type(entry.step) for entry in flow.get_steps())
    for holder in holders:
        for name, member in vars(holder).items():
            function = getattr(member, "__func__", member)
            if not callable(function) or not getattr(function, "__annotations__", None):
                continue
            if name not in ("execute", "wait_for", "handle_timeout") and not hasattr(
                function, "__dex_rpc_options__"
            ):
                continue
            try:
                function.__annotations__ = typing.get_type_hints(function, include_extras=True)
            except (NameError, TypeError):
                continue  # the Registry reports unresolvable annotations itself


def _store_config(store: str | Path | StoreConfig | None) -> StoreConfig:
    if isinstance(store, SqliteStoreConfig | PostgresStoreConfig):
        return store
    if isinstance(store, str) and store.startswith(POSTGRES_URI_SCHEMES):
        return PostgresStoreConfig(dsn=store)
    if store is None:
        path = Path.cwd() / DEFAULT_STORE_DIR / "engine.db"
    elif isinstance(store, (str, Path)):
        path = Path(store).expanduser().resolve()
    else:
        raise TypeError(
            "store must be a path, a postgresql:// URI or a store config, "
            f"got {type(store).__name__}"
        )
    return SqliteStoreConfig(path=str(path))


async def _gone(handle: Any, timeout: float = 30.0) -> None:
    """Wait until a killed actor answers no more (its process ended)."""
    import ray.exceptions

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        try:
            await asyncio.wait_for(handle.__ray_ready__.remote(), timeout=5)
        except ray.exceptions.RayActorError:
            return
        except TimeoutError:
            continue
        await asyncio.sleep(0.05)


async def _no_engine_actors(namespace: str, timeout: float = 60.0) -> None:
    """Wait until ``namespace`` runs no host, executor or scheduler actor.

    A killed worker's actors end within moments of it (Ray ends them with their
    owner); any still there past ``timeout`` belong to a live driver.
    """
    import ray

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        names = sorted(
            entry["name"]
            for entry in ray.util.list_named_actors(all_namespaces=True)
            if entry["namespace"] == namespace
            and (entry["name"].startswith(HOST_PREFIXES) or entry["name"] == SCHEDULER_NAME)
        )
        if not names:
            return
        if loop.time() > deadline:
            raise EngineError(
                f"worker_hosts='own': namespace {namespace!r} still runs {names}: another "
                "worker owns them, or an engine without worker_hosts started them; stop it first"
            )
        await asyncio.sleep(0.05)


def _join_ray(namespace: str, ray_address: str | None) -> bool:
    """Start a local Ray (or join ``ray_address``) unless Ray is up; whether this did."""
    import ray

    if ray.is_initialized():
        return False
    local = ray_address is None and not os.environ.get("RAY_ADDRESS")
    ray.init(
        address=ray_address,
        namespace=namespace,
        include_dashboard=False,
        _system_config=task_worker_system_config() if local else None,
    )
    return True


async def _store_definitions(
    store: FlowStore, flows: list[Flow[Any]], codec_registry: CodecRegistry | None
) -> dict[str, str]:
    """Keep each Flow pickled in the store; returns each Flow type's hash."""
    from ray import cloudpickle

    hashes: dict[str, str] = {}
    for flow in flows:
        _resolve_annotations(flow)
        blob: bytes = cloudpickle.dumps((flow, codec_registry))  # type: ignore[no-untyped-call]
        flow_hash = hashlib.sha256(blob).hexdigest()[:32]
        await store.definitions.put(flow.get_flow_type(), flow_hash, blob)
        hashes[flow.get_flow_type()] = flow_hash
    return hashes


class FlowEngine:
    """The durable engine: runs registered ``dex.Flow`` definitions on Ray.

    Start it with :meth:`start`; use :attr:`client` (async) or
    :meth:`sync_client` to start and operate runs. Runs live in the store and in
    named Ray actors of the engine's namespace, so another driver that starts an
    engine on the same store and namespace operates the same runs.
    """

    def __init__(
        self,
        *,
        flows: list[Flow[Any]],
        registry: Registry,
        store: FlowStore,
        store_config: StoreConfig,
        namespace: str,
        hashes: dict[str, str],
        owns_ray: bool,
        placement: Placement,
        options: EngineOptions,
    ) -> None:
        self.flows = flows
        self.options = options
        """What the engine was started with (``placement`` and ``namespace`` as given:
        the attributes of those names say what they came to)."""
        self.worker_hosts = options.worker_hosts
        """``"own"``: this driver is the worker process that owns the namespace's
        hosts; ``"use"``: its calls go to a worker's hosts; ``None``: detached hosts
        that any driver creates on demand (see ``FlowEngine.start``)."""
        self.local_channels = options.local_channels
        """Whether this driver's client reaches the shared hosts of its node by
        their Unix sockets (see ``FlowEngine.start``)."""
        self.registry = registry
        self.store = store
        self.store_config = store_config
        self.namespace = namespace
        self.values = ValueMapper(registry.codec_registry)
        self._hashes = hashes
        self._owns_ray = owns_ray
        self.placement = placement
        self._hosts: dict[str, Any] = {}
        passivate_after = options.passivate_after
        self.host_config = HostConfig(
            store=store_config,
            namespace=namespace,
            placement=placement,
            passivate_after=None if passivate_after is None else passivate_after.total_seconds(),
            host_resources=options.host_resources,
            executor_pool=options.executor_pool or ExecutorPoolOptions(),
            retention=options.retention or RetentionOptions(),
            stream_batch_window=options.stream_batch_window.total_seconds(),
            worker_owned=options.worker_hosts is not None,
        )
        self.client = EngineClient(self)
        self._sync: SyncEngineClient | None = None

    @classmethod
    async def start(
        cls,
        flows: list[Flow[Any]],
        *,
        store: str | Path | StoreConfig | None = None,
        namespace: str | None = None,
        codec_registry: CodecRegistry | None = None,
        ray_address: str | None = None,
        resume: bool = True,
        placement: Placement | str = PlacementMode.SHARED,
        shared_hosts: int | None = None,
        passivate_after: timedelta | None = None,
        host_resources: dict[str, float] | None = None,
        executor_pool: ExecutorPoolOptions | None = None,
        retention: RetentionOptions | None = None,
        stream_batch_window: timedelta = timedelta(seconds=STREAM_BATCH_WINDOW_SECONDS),
        local_channels: bool = True,
        worker_hosts: WorkerHosts | None = None,
        options: EngineOptions | None = None,
    ) -> FlowEngine:
        """Join the current Ray (or start a local one), open the store, register ``flows``.

        Every keyword but ``flows`` and ``options`` is the field of its name of
        ``EngineOptions`` (``engine/_engine_options.py``), which says all of it:

        - ``store``: a SQLite path, a ``postgresql://`` URI or a store config;
        - ``namespace``: the Ray namespace of the engine's actors;
        - ``codec_registry``: custom codecs, as for ``dex.Registry``;
        - ``ray_address``: passed to ``ray.init`` when Ray is not initialized yet;
        - ``resume``: re-activate runs that have work in flight in the store;
        - ``placement``, ``shared_hosts``: shared hosts (how many) or one per run;
        - ``passivate_after``: let a run that only waits leave memory after this long;
        - ``host_resources``: custom Ray resources every host actor requires;
        - ``executor_pool``, ``retention``: pooled executors; what runs keep;
        - ``stream_batch_window``: how long a busy run's long poll gathers messages;
        - ``local_channels``: reach this node's shared hosts by Unix socket;
        - ``worker_hosts``: tie the namespace's hosts to one worker process.

        Args:
            flows: The Flow definitions to register; each is stored by value, so
                any process can re-activate its runs later.
            options: All of the above as one value; then give no other keyword.
        """
        given = EngineOptions(
            store=store,
            namespace=namespace,
            codec_registry=codec_registry,
            ray_address=ray_address,
            resume=resume,
            placement=placement,
            shared_hosts=shared_hosts,
            passivate_after=passivate_after,
            host_resources=host_resources,
            executor_pool=executor_pool,
            retention=retention,
            stream_batch_window=stream_batch_window,
            local_channels=local_channels,
            worker_hosts=worker_hosts,
        )
        if options is None:
            options = given
        elif given != EngineOptions():
            raise TypeError("FlowEngine.start takes options= or the keywords it holds, not both")
        return await cls._start(list(flows), options)

    @classmethod
    async def _start(cls, flows: list[Flow[Any]], options: EngineOptions) -> FlowEngine:
        """:meth:`start` with its options made (and so checked)."""
        registry = Registry(
            list(flows), CachingCodecRegistry(options.codec_registry), allow_async_handlers=True
        )
        placement = options.placement
        # A Placement given whole says its size; else ``shared_hosts`` (None: chosen).
        asked = placement.shared_hosts if isinstance(placement, Placement) else options.shared_hosts
        if not isinstance(placement, Placement):
            placement = Placement(
                mode=PlacementMode(placement),
                shared_hosts=(
                    DEFAULT_SHARED_HOSTS if options.shared_hosts is None else options.shared_hosts
                ),
            )
        namespace = options.namespace or DEFAULT_NAMESPACE
        owns_ray = _join_ray(namespace, options.ray_address)
        if placement.mode is PlacementMode.SHARED:
            size = await _shared_pool_size(namespace, asked)
            if size != placement.shared_hosts:
                placement = dataclasses.replace(placement, shared_hosts=size)
        elif options.worker_hosts is not None:
            raise ValueError(
                f"worker_hosts={options.worker_hosts!r} needs the shared placement: a worker "
                "starts every host of the namespace up front"
            )
        config = _store_config(options.store)
        flow_store = open_store(config)
        await flow_store.open()
        _clock.follow_offset(await flow_store.clock.offset())
        hashes = await _store_definitions(flow_store, flows, options.codec_registry)
        engine = cls(
            flows=flows,
            registry=registry,
            store=flow_store,
            store_config=config,
            namespace=namespace,
            hashes=hashes,
            owns_ray=owns_ray,
            placement=placement,
            options=options,
        )
        if options.worker_hosts == "own":
            await engine._start_worker_hosts()
        if options.worker_hosts == "use":
            return engine  # the worker wakes timers and resumes runs
        if options.passivate_after is not None:
            await scheduler_handle(engine.host_config).woken_runs.remote()
        if options.resume:
            await engine.resume_runs()
        return engine

    async def _start_worker_hosts(self) -> None:
        """Start every shared host as this driver's own actor (``worker_hosts="own"``).

        A shared host resumes its slot's runs when it starts, so once every host
        answers, the runs a killed worker left are running again here. The hosts
        are created by name: a killed worker's must be gone first, or this
        driver would be handed actors that are about to end with their owner.
        """
        await _no_engine_actors(self.namespace)
        handles = {
            f"{SHARED_PREFIX}{slot}": shared_host_handle(self.host_config, slot)
            for slot in range(self.placement.shared_hosts)
        }
        self._hosts.update(handles)
        await asyncio.gather(*(handle.ready.remote() for handle in handles.values()))

    def registered(self, flow: Flow[Any]) -> tuple[_RegisteredFlow, str]:
        """The registered form and stored version of ``flow``; refuses unknown flows."""
        flow_type = flow.get_flow_type() if isinstance(flow, Flow) else None
        if flow_type is None or flow_type not in self._hashes:
            known = ", ".join(sorted(self._hashes)) or "none"
            raise FlowDefinitionError(
                f"flow {flow_type or flow!r} is not registered with this engine "
                f"(registered: {known})"
            )
        return flow_for_instance(self.registry, flow), self._hashes[flow_type]

    def host(self, flow_id: str) -> Any:
        """The host actor of ``flow_id``, created on demand."""
        name = self.placement.host_name(flow_id)
        handle = self._hosts.get(name)
        if handle is None:
            if self.worker_hosts == "use":
                handle = worker_host(self.namespace, name)
            else:
                handle = host_handle(self.host_config, flow_id)
            self._hosts[name] = handle
        return handle

    def forget_host(self, flow_id: str) -> None:
        self._hosts.pop(self.placement.host_name(flow_id), None)

    def forget_hosts(self) -> None:
        """Drop every host handle this engine holds (a worker that owned the hosts
        was replaced: the next call looks each one up again)."""
        self._hosts.clear()

    async def resume_runs(self) -> int:
        """Make sure every run with work in flight has a host; returns how many.

        A host resumes its runs when it starts (a shared host every run of its
        slot), so each host is asked once: a store of thousands of sessions
        waiting for a message costs two calls on the default placement, not one
        per session.
        """
        flow_ids = await self.store.runs.runs_with_work()
        one_per_host = {self.placement.host_name(flow_id): flow_id for flow_id in flow_ids}
        for flow_id in one_per_host.values():
            await self.host(flow_id).ready.remote()
        return len(flow_ids)

    def sync_client(self) -> SyncEngineClient:
        """A blocking twin of :attr:`client` for scripts, notebooks and WSGI."""
        if self._sync is None:
            self._sync = SyncEngineClient(self.client)
        return self._sync

    async def advance_clock(self, delta: timedelta) -> float:
        """Move the engine's clock ``delta`` ahead (a test engine that skips time).

        Every host, the scheduler and every executor of the namespace move with
        it, and the offset is stored with the runs, so a host that starts later
        reads it: durable waits, interrupt deadlines and timers of days or a year
        become due at once. Elapsed-time limits (Step timeouts, heartbeat
        timeouts, retry back-offs) do not move. Returns the new offset in seconds.

        Raises:
            ValueError: ``delta`` is negative (the clock never goes back).
        """
        if not isinstance(delta, timedelta):
            raise TypeError(f"advance_clock takes a timedelta, not {type(delta).__name__}")
        if delta < timedelta(0):
            raise ValueError(f"advance_clock: the clock never goes back ({delta})")
        import ray

        seconds = await self.store.clock.offset() + delta.total_seconds()
        await self.store.clock.set_offset(seconds)
        _clock.set_offset(seconds)
        prefixes = ("dexhost:", "dexrun:", "dexexec:", SCHEDULER_NAME)
        calls: list[Any] = []
        for actor in ray.util.list_named_actors(all_namespaces=True):
            if actor["namespace"] == self.namespace and actor["name"].startswith(prefixes):
                try:
                    handle = ray.get_actor(actor["name"], namespace=self.namespace)
                except ValueError:
                    continue  # it exited meanwhile; it reads the stored offset when it starts
                calls.append(handle.set_clock_offset.remote(seconds))
        results = await asyncio.gather(*calls, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                logger.info("advance_clock: an actor did not take the new clock: %s", result)
        return seconds

    async def shutdown(self, *, stop_hosts: bool | None = None) -> None:
        """Close the engine's store; stop hosts and Ray when this engine started Ray.

        ``stop_hosts=True`` also kills every host of this engine's namespace
        (runs stay in the store and resume on the next activation).
        """
        import ray

        if stop_hosts is None:
            stop_hosts = self._owns_ray
        self.client.close_channels()
        if stop_hosts:
            await self.stop_hosts()
        if self._sync is not None:
            self._sync.close()
            self._sync = None
        await self.store.close()
        if self._owns_ray:
            # Integrations stop their Ray-calling threads first (the tracing relay).
            run_exit_hooks()
            ray.shutdown()

    async def stop_hosts(self) -> None:
        """Kill every host and executor actor of this engine's namespace.

        Hosts go first, and executors only once every host is gone: an executor
        killed under a live host would fail that host's running attempts (and
        the host would record it) instead of leaving them to the next engine,
        which counts them as cut short by the host's end (``HostDiedError``).
        """
        import ray
        from ray.util import list_named_actors

        hosts: list[Any] = []
        executors: list[Any] = []
        for entry in list_named_actors(all_namespaces=True):
            name = entry["name"]
            ours = name.startswith(HOST_PREFIXES) or name == SCHEDULER_NAME
            if entry["namespace"] != self.namespace or not ours:
                continue
            try:
                handle = ray.get_actor(name, namespace=self.namespace)
            except Exception as error:  # it is ending: nothing to kill
                # Gone since the listing (ValueError), or ending with the process that
                # owned it (a worker's actors: Ray can no longer load its class).
                logger.debug("stop_hosts: %s is gone (%r)", name, error)
                continue
            (executors if name.startswith(EXECUTOR_PREFIX) else hosts).append(handle)
        for handle in hosts:
            ray.kill(handle, no_restart=True)
        if executors:
            await asyncio.gather(*(_gone(handle) for handle in hosts))
        for handle in executors:
            ray.kill(handle, no_restart=True)
        self._hosts.clear()
