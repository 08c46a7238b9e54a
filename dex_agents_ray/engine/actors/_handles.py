"""Finding (or creating) the actors of an engine namespace: hosts and the scheduler.

A host tells the scheduler about a passivated run's timer and the scheduler
wakes the run's host, so each creates the other on demand. Neither module
imports the other: ``actors/__init__`` hands both classes to
:func:`register_actor_classes`, and the functions here create them by name.
"""

from __future__ import annotations

from typing import Any

from dex_agents_ray.engine._errors import HostNotStartedError
from dex_agents_ray.engine.actors._config import HostConfig
from dex_agents_ray.engine.actors._placement import SHARED_PREFIX, PlacementMode

__all__ = [
    "SCHEDULER_NAME",
    "HostConfig",  # here for the old path ``engine._hosts.HostConfig`` (see ``_moved``)
    "host_handle",
    "register_actor_classes",
    "scheduler_handle",
    "shared_host_handle",
    "worker_host",
]

SCHEDULER_NAME = "dexscheduler"

_actor_classes: dict[str, type[Any]] = {}
"""The host and scheduler classes, as ``actors/__init__`` registered them."""
_classes: dict[str, Any] = {}
"""The same as Ray actor classes (made once per process)."""


def register_actor_classes(*, host: type[Any], scheduler: type[Any]) -> None:
    """Name the classes :func:`host_handle` and :func:`scheduler_handle` create."""
    _actor_classes["host"] = host
    _actor_classes["scheduler"] = scheduler


def _remote_class(name: str) -> Any:
    if name not in _classes:
        import ray

        _classes[name] = ray.remote(_actor_classes[name])
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
