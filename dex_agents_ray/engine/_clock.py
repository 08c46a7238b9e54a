"""The engine's clock: every time the engine and the session read goes through here.

Real time plus an offset. Production never moves the offset; a test engine does
(``FlowEngine.advance_clock``): it stores the new offset with the runs, so a host
or scheduler that starts later reads it, and tells every running host, scheduler
and executor of its namespace, so durable waits, interrupt deadlines and timers of
days or a year run in milliseconds. Step timeouts, heartbeat timeouts and retry
back-offs measure elapsed time on the event loop's monotonic clock and do not move.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

__all__ = ["follow_offset", "now", "offset", "set_offset", "utc_now"]

_offset = 0.0


def now() -> float:
    """Seconds since the epoch, as the engine sees them."""
    return time.time() + _offset


def utc_now() -> datetime:
    """``now()`` as a timezone-aware UTC datetime."""
    return datetime.fromtimestamp(now(), UTC)


def offset() -> float:
    """How far this process's clock is ahead of real time, in seconds."""
    return _offset


def set_offset(seconds: float) -> None:
    """Move this process's clock to ``seconds`` ahead of real time (never back)."""
    global _offset
    _offset = max(_offset, float(seconds))


def follow_offset(seconds: float) -> None:
    """Set this process's clock to exactly ``seconds`` ahead of real time.

    For a driver that opens an engine's store: its clock is that store's, not
    whatever an engine it opened before moved it to.
    """
    global _offset
    _offset = float(seconds)
