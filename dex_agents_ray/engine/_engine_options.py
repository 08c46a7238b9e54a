"""``EngineOptions``: how ``FlowEngine.start`` runs an engine, as one value.

``FlowEngine.start(flows, store=..., placement=...)`` builds one from its
keywords (each keyword is the field of its name); ``options=`` passes one
whole. It is checked when it is made, before Ray or the store is touched.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Literal

from dex import CodecRegistry

from dex_agents_ray.engine._options import ExecutorPoolOptions, RetentionOptions
from dex_agents_ray.engine.actors._placement import Placement, PlacementMode
from dex_agents_ray.engine.run._streams import STREAM_BATCH_WINDOW_SECONDS
from dex_agents_ray.engine.store._store import StoreConfig

__all__ = ["MAX_STREAM_BATCH_WINDOW", "EngineOptions", "WorkerHosts"]

WorkerHosts = Literal["own", "use"]
"""How a driver stands to a worker process that owns the namespace's hosts."""
MAX_STREAM_BATCH_WINDOW = timedelta(seconds=5)
"""The longest ``stream_batch_window`` (a long poll's own wait is at most 5 s)."""


@dataclass(frozen=True, kw_only=True)
class EngineOptions:
    """Every option of :meth:`FlowEngine.start` but the flows.

    Raises (when made):
        TypeError: ``local_channels`` is not a bool.
        ValueError: ``worker_hosts``, ``passivate_after`` or
            ``stream_batch_window`` is out of its range.
    """

    store: str | Path | StoreConfig | None = None
    """A SQLite file path, a ``postgresql://`` URI (the ``postgres`` extra) or a
    store config; ``None``: ``./.dex-agents-ray/engine.db``."""
    namespace: str | None = None
    """The Ray namespace of the engine's actors; ``None``: ``"dex-agents-ray"``.
    Two drivers with the same store and namespace share runs."""
    codec_registry: CodecRegistry | None = None
    """Custom codecs, as for ``dex.Registry``."""
    ray_address: str | None = None
    """Passed to ``ray.init`` when Ray is not initialized yet."""
    resume: bool = True
    """Re-activate runs that have work in flight in the store."""
    placement: Placement | str = PlacementMode.SHARED
    """``"shared"`` (the default: ``shared_hosts`` long-lived hosts, runs placed
    by a stable hash of the flow ID) or ``"dedicated"`` (one host actor per run,
    ``dexrun:<flow id>``), or a ``Placement``. Every driver of a namespace must
    use the same placement. Shared hosts start a run in milliseconds; a
    dedicated host costs an actor (about 1 s and 60 MiB here) per run and per
    re-activation after passivation."""
    shared_hosts: int | None = None
    """The number of shared hosts. ``None``: as many as the namespace's live
    shared hosts were started with, or else the cluster's CPUs, at most 4 (a
    host is one Python process: more hosts than CPUs only compete for the same
    cores; a cluster whose nodes are still to come should pass its number). A
    number that differs from a live pool's is refused: runs would be placed on
    other hosts."""
    passivate_after: timedelta | None = None
    """Let a run whose Steps only wait (for a message, an approval, or a timer
    further away than this) leave memory after this long without activity; a
    dedicated host then exits. The next client call or the namespace's
    scheduler (for a due timer) brings it back. ``None`` keeps runs resident."""
    host_resources: dict[str, float] | None = None
    """Custom Ray resources every host actor (and the scheduler) requires, e.g.
    ``{"sessions": 0.001}`` to keep hosts on the nodes that offer them."""
    executor_pool: ExecutorPoolOptions | None = None
    """How the executor actors of remote Steps scale (see
    ``ExecutorPoolOptions``); every driver of a namespace should pass the same.
    ``None``: the defaults."""
    retention: RetentionOptions | None = None
    """What runs keep of their past (``RetentionOptions``: the newest 2,000
    finished executions with their history and 1,000 remembered RPC responses
    per run by default)."""
    stream_batch_window: timedelta = timedelta(seconds=STREAM_BATCH_WINDOW_SECONDS)
    """How long a ``read_stream`` long poll that found messages of a busy run (an
    attempt in flight, a Step about to run) waits for the ones that follow
    before it answers; it answers as soon as the run only waits. A turn's
    events then reach a reader in one Ray call instead of one per commit, and a
    message is at most this late (never past the poll's own timeout). Default
    50 ms; ``timedelta(0)`` answers at once."""
    local_channels: bool = True
    """Let this driver's client send its calls to a shared host of its own node
    by the host's Unix socket once its first call through Ray has answered
    (about 0.1 ms there and back where a Ray call takes over 1 ms; calls to
    other nodes stay on Ray). ``False``: every call goes through Ray. The
    hosts' calls to executors have their own switch,
    ``ExecutorPoolOptions.local_channel``."""
    worker_hosts: WorkerHosts | None = None
    """Tie the namespace's hosts to one worker process, as a Dex Worker holds its
    Flows, so a test can kill them all at once
    (``dex_agents_ray.testing.run_agent_worker``). ``"own"``: this driver starts
    every shared host as its own actor (not detached), so the hosts, their
    executors and the scheduler end when this process ends; it resumes the runs
    with work in flight. ``"use"``: this driver starts no host and resumes
    nothing; its calls go to the hosts a worker started and wait for a
    replacement while none runs (``HostNotStartedError`` past the client's
    deadline). Both need the shared placement. ``None`` (the default): detached
    hosts that any driver creates on demand and that outlive every driver."""

    def __post_init__(self) -> None:
        if not isinstance(self.local_channels, bool):
            raise TypeError(
                f"local_channels must be a bool, got {type(self.local_channels).__name__}"
            )
        if self.worker_hosts not in (None, "own", "use"):
            raise ValueError(
                f"worker_hosts must be 'own', 'use' or None, got {self.worker_hosts!r}"
            )
        if self.passivate_after is not None and self.passivate_after.total_seconds() <= 0:
            raise ValueError(f"passivate_after must be positive, got {self.passivate_after}")
        window = self.stream_batch_window
        if not isinstance(window, timedelta) or not (
            timedelta(0) <= window <= MAX_STREAM_BATCH_WINDOW
        ):
            raise ValueError(
                "stream_batch_window must be a timedelta from 0 to "
                f"{MAX_STREAM_BATCH_WINDOW}, got {window!r}"
            )
