"""Ray-native metrics of the engine (``ray.util.metrics``): Steps and resident runs.

Names and labels are documented in docs/tracing.md. Every metric is created
lazily in the process that records it; recording never raises (a failure is
logged once at warning, later at debug, on ``dex_agents_ray.tracing``).
``DEX_AGENTS_RAY_METRICS=0`` in a process's environment turns them off there.

Counters are added up in the process and handed to Ray at most once a
``COUNT_FLUSH_SECONDS`` (:func:`add_count`): a Ray metric record validates its
tags and crosses into Ray's core, several times a turn on a session's hot path.
A host or executor that exits cleanly hands them over first; Ray itself exports
what it was handed every few seconds, so a process killed from outside loses at
most the last second's counts on top of what Ray loses then.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from typing import Any

from dex_agents_ray.engine._exit_hooks import on_clean_exit

logger = logging.getLogger("dex_agents_ray.tracing")

__all__ = [
    "COUNT_FLUSH_SECONDS",
    "METRICS_ENV",
    "add_count",
    "flush_counts",
    "metrics_enabled",
    "record_run_activated",
    "record_run_passivated",
    "record_step",
    "set_resident_runs",
]

METRICS_ENV = "DEX_AGENTS_RAY_METRICS"
"""``0`` turns the engine's and the session's Ray metrics off in a process."""

_enabled: bool | None = None
_metrics: dict[str, Any] = {}
_failed = False


def metrics_enabled() -> bool:
    """Whether this process records Ray metrics (read once)."""
    global _enabled
    if _enabled is None:
        _enabled = os.environ.get(METRICS_ENV, "1").strip() != "0"
    return _enabled


def _failure(what: str) -> None:
    global _failed
    level = logging.DEBUG if _failed else logging.WARNING
    _failed = True
    logger.log(level, "metrics: %s failed", what, exc_info=True)


def _metric(name: str) -> Any:
    metric = _metrics.get(name)
    if metric is None:
        from ray.util import metrics

        if name == "steps":
            metric = metrics.Counter(
                "dex_agents_ray_steps",
                description="Step attempts the engine committed, by Step type and outcome.",
                tag_keys=("step_type", "outcome"),
            )
        elif name == "resident":
            metric = metrics.Gauge(
                "dex_agents_ray_sessions_resident",
                description="Runs (sessions) held in memory by one host.",
                tag_keys=("host",),
            )
        elif name == "activated":
            metric = metrics.Counter(
                "dex_agents_ray_sessions_activated",
                description="Runs (sessions) a host loaded from the store.",
            )
        else:
            metric = metrics.Counter(
                "dex_agents_ray_sessions_passivated",
                description="Runs (sessions) that left memory while they only waited.",
            )
        _metrics[name] = metric
    return metric


COUNT_FLUSH_SECONDS = 1.0
"""How long counts wait in the process before they go to Ray."""

_counts: dict[tuple[Any, tuple[tuple[str, str], ...]], float] = {}
_counts_lock = threading.Lock()
_flush_pending = False


def add_count(counter: Any, value: float, tags: tuple[tuple[str, str], ...] = ()) -> None:
    """Add ``value`` to ``counter`` (a ``ray.util.metrics.Counter``) with ``tags``.

    The sum goes to Ray within ``COUNT_FLUSH_SECONDS`` when this thread runs an
    event loop (a timer of that loop), else at once."""
    global _flush_pending
    key = (counter, tags)
    with _counts_lock:
        _counts[key] = _counts.get(key, 0) + value
        if _flush_pending:
            return
        _flush_pending = True
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        flush_counts()
        return
    on_clean_exit(flush_counts)
    loop.call_later(COUNT_FLUSH_SECONDS, flush_counts)


def flush_counts() -> None:
    """Hand every count added so far to Ray now."""
    global _flush_pending
    with _counts_lock:
        pending = list(_counts.items())
        _counts.clear()
        _flush_pending = False
    for (counter, tags), value in pending:
        try:
            counter.inc(value, dict(tags))
        except Exception:
            _failure("recording a count")


def record_step(exec_id: str, outcome: str) -> None:
    """One committed attempt of ``exec_id`` (``<StepType>-<n>``): ``completed``,
    ``retrying`` (failed, another attempt follows) or ``failed`` (no attempt left)."""
    if not metrics_enabled():
        return
    try:
        tags = (("outcome", outcome), ("step_type", exec_id.rpartition("-")[0]))
        add_count(_metric("steps"), 1, tags)
    except Exception:
        _failure("recording a Step")


def record_run_activated() -> None:
    if not metrics_enabled():
        return
    try:
        _metric("activated").inc(1)
    except Exception:
        _failure("recording an activation")


def record_run_passivated() -> None:
    if not metrics_enabled():
        return
    try:
        _metric("passivated").inc(1)
    except Exception:
        _failure("recording a passivation")


def set_resident_runs(host: str | None, count: int) -> None:
    if not metrics_enabled():
        return
    try:
        _metric("resident").set(count, {"host": host or "unknown"})
    except Exception:
        _failure("recording resident runs")
