"""The log of a failed OpenTelemetry call (no OpenTelemetry import).

A failure inside OpenTelemetry (a span processor or exporter that raises) is
logged on ``dex_agents_ray.tracing``, the first one in a process as a warning
with its traceback and later ones at debug, and that span is skipped.
"""

from __future__ import annotations

import logging
import threading

__all__ = ["report_failure"]

logger = logging.getLogger("dex_agents_ray.tracing")

_lock = threading.Lock()
_failures = 0


def report_failure(what: str) -> None:
    """Log a failed OpenTelemetry call (call from an ``except`` block)."""
    global _failures
    with _lock:
        _failures += 1
        first = _failures == 1
    if first:
        logger.warning("tracing: %s failed; the span is skipped", what, exc_info=True)
    else:
        logger.debug("tracing: %s failed; the span is skipped", what, exc_info=True)
