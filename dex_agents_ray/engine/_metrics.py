"""Ray-native metrics of the engine (``ray.util.metrics``): Steps and resident runs.

Names and labels are documented in docs/tracing.md. Every metric is created
lazily in the process that records it; recording never raises (a failure is
logged once at warning, later at debug, on ``dex_agents_ray.tracing``).
``DEX_AGENTS_RAY_METRICS=0`` in a process's environment turns them off there.
"""

from __future__ import annotations

import logging
import os
from typing import Any

logger = logging.getLogger("dex_agents_ray.tracing")

__all__ = [
    "METRICS_ENV",
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


def record_step(exec_id: str, outcome: str) -> None:
    """One committed attempt of ``exec_id`` (``<StepType>-<n>``): ``completed``,
    ``retrying`` (failed, another attempt follows) or ``failed`` (no attempt left)."""
    if not metrics_enabled():
        return
    try:
        _metric("steps").inc(1, {"step_type": exec_id.rpartition("-")[0], "outcome": outcome})
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
