"""Retry policy arithmetic, with the Dex server's defaults."""

from __future__ import annotations

from dex.dexpb import dex_pb2 as pb

DEFAULT_INITIAL_INTERVAL = 1.0
DEFAULT_BACKOFF = 2.0
DEFAULT_MAX_INTERVAL_FACTOR = 100
DEFAULT_TOTAL_DURATION = 4 * 3600.0
DEFAULT_METHOD_TIMEOUT = 2 * 3600.0


def next_retry_delay(
    policy: pb.RetryPolicy | None,
    attempts_failed: int,
    first_attempt_at: float,
    now: float,
    retry_after: float | None = None,
) -> float | None:
    """Seconds until the next attempt, or ``None`` when the policy is exhausted.

    ``maximum_attempts`` counts the first call; zero means unlimited within the
    total duration (default 4 h). Zero or unset fields take the defaults:
    1 s initial interval, coefficient 2, a maximum of 100 initial intervals.
    A ``dex.retry_after`` delay replaces the computed interval.
    """
    initial = float(policy.initial_interval_seconds) if policy else 0.0
    initial = initial or DEFAULT_INITIAL_INTERVAL
    coefficient = (policy.backoff_coefficient if policy else 0.0) or DEFAULT_BACKOFF
    maximum = float(policy.maximum_interval_seconds) if policy else 0.0
    maximum = maximum or initial * DEFAULT_MAX_INTERVAL_FACTOR
    max_attempts = policy.maximum_attempts if policy else 0
    total = float(policy.total_duration_seconds) if policy else 0.0
    total = total or DEFAULT_TOTAL_DURATION
    if max_attempts and attempts_failed >= max_attempts:
        return None
    if retry_after is not None:
        delay = retry_after
    else:
        delay = min(initial * coefficient ** max(attempts_failed - 1, 0), maximum)
    if now + delay - first_attempt_at > total:
        return None
    return delay
