"""What every host and the scheduler of one engine namespace are built with."""

from __future__ import annotations

from dataclasses import dataclass, field

from dex_agents_ray.engine._options import ExecutorPoolOptions, RetentionOptions
from dex_agents_ray.engine.actors._placement import Placement
from dex_agents_ray.engine.run._streams import STREAM_BATCH_WINDOW_SECONDS
from dex_agents_ray.engine.store._store import StoreConfig

__all__ = ["HostConfig"]


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
