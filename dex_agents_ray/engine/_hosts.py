"""Finding (or creating) the actors of an engine namespace: hosts and the scheduler."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dex_agents_ray.engine._errors import HostNotStartedError
from dex_agents_ray.engine._options import ExecutorPoolOptions, RetentionOptions
from dex_agents_ray.engine._placement import SHARED_PREFIX, Placement, PlacementMode
from dex_agents_ray.engine._store import StoreConfig
from dex_agents_ray.engine._streams import STREAM_BATCH_WINDOW_SECONDS

SCHEDULER_NAME = "dexscheduler"


@dataclass(frozen=True, kw_only=True)
class HostConfig:
    """What every host and the scheduler of one namespace are built with (plain data)."""

    store: StoreConfig
    namespace: str
    placement: Placement
    passivate_after: float | None
    """Seconds a run may sit idle (only waiting) before it leaves memory; ``None``: never."""
    host_resources: dict[str, float] | None = None
    """Custom Ray resources each host actor needs (to keep hosts on some nodes)."""
    executor_pool: ExecutorPoolOptions = field(default_factory=ExecutorPoolOptions)
    """How remote Steps' pooled executors scale."""
    retention: RetentionOptions = field(default_factory=RetentionOptions)
    """What runs keep of their past."""
    stream_batch_window: float = STREAM_BATCH_WINDOW_SECONDS
    """Seconds a long poll that found records of a busy run waits for more."""
    worker_owned: bool = False
    """Whether one worker process owns the namespace's actors
    (``FlowEngine.start(worker_hosts="own")``): hosts, their executors and the
    scheduler are then ordinary actors, which Ray ends with the process that
    created them, instead of detached ones that outlive every driver."""


_classes: dict[str, Any] = {}


def _remote_class(name: str) -> Any:
    if name not in _classes:
        import ray

        if name == "host":
            from dex_agents_ray.engine._host import FlowHost

            _classes[name] = ray.remote(FlowHost)
        else:
            from dex_agents_ray.engine._scheduler import FlowScheduler

            _classes[name] = ray.remote(FlowScheduler)
    return _classes[name]


def _actor_options(name: str, config: HostConfig) -> dict[str, Any]:
    options: dict[str, Any] = {
        "name": name,
        "namespace": config.namespace,
        "get_if_exists": True,
        "num_cpus": 0,
        "max_restarts": -1,
        "max_task_retries": 0,
        "max_concurrency": 10_000,
    }
    if not config.worker_owned:
        options["lifetime"] = "detached"
    if config.host_resources:
        options["resources"] = dict(config.host_resources)
    return options


def host_handle(config: HostConfig, flow_id: str) -> Any:
    """The host actor of ``flow_id`` (created on demand, by name)."""
    placement = config.placement
    name = placement.host_name(flow_id)
    if placement.mode is PlacementMode.DEDICATED:
        args: tuple[Any, ...] = (config, flow_id, None)
    else:
        args = (config, None, placement.slot(flow_id))
    return _remote_class("host").options(**_actor_options(name, config)).remote(*args)


def shared_host_handle(config: HostConfig, slot: int) -> Any:
    """The shared host of ``slot`` (created on demand, by name)."""
    name = f"{SHARED_PREFIX}{slot}"
    return _remote_class("host").options(**_actor_options(name, config)).remote(config, None, slot)


def worker_host(namespace: str, name: str) -> Any:
    """The running host ``name`` that a worker process started; never creates one.

    Raises:
        HostNotStartedError: No host of that name runs (no worker runs, or a
            killed worker's replacement has not started it yet).
    """
    import ray

    try:
        return ray.get_actor(name, namespace=namespace)
    except ValueError:
        raise HostNotStartedError(
            f"no worker runs host {name!r} of namespace {namespace!r}: start one "
            "(AgentTestStack.start_worker(), or run_agent_worker in a process of its own)"
        ) from None


def scheduler_handle(config: HostConfig) -> Any:
    """The namespace's scheduler actor (created on demand, by name)."""
    options = _actor_options(SCHEDULER_NAME, config)
    return _remote_class("scheduler").options(**options).remote(config)
