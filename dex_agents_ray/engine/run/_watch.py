"""One attempt of a Step handler: its deadline, heartbeat watchdog and outcome."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dex import RetryAfterError

from dex_agents_ray.engine.sdk._invoke import StepResult
from dex_agents_ray.errors import DexAgentsError


@dataclass
class AttemptOutcome:
    """What an attempt produced: a mapped result, or a failure description."""

    result: StepResult | None = None
    error_type: str = ""
    detail: str = ""
    retry_after: float | None = None
    infrastructure: bool = False
    """The failure came from the runtime (a dead worker, a timeout), not user code."""
    acknowledged: bool = True
    """False for a remote attempt that never acknowledged its start (no user code ran)."""


class StepTimeoutError(DexAgentsError, TimeoutError):
    """An attempt ran past its method timeout or its heartbeat timeout."""


def describe_failure(error: BaseException) -> AttemptOutcome:
    """Turn a handler's exception (possibly wrapped by Ray) into an outcome."""
    retry_after: float | None = None
    infrastructure = False
    try:
        import ray.exceptions as ray_errors
    except ImportError:  # pragma: no cover - ray is a hard dependency
        ray_errors = None  # type: ignore[assignment]
    if ray_errors is not None and isinstance(error, ray_errors.RayTaskError):
        cause = error.cause
        if cause is not None:
            error = cause
    elif ray_errors is not None and isinstance(error, ray_errors.RayError):
        infrastructure = True
    if isinstance(error, RetryAfterError):
        retry_after = float(error.after_seconds)
        error = error.cause
    return AttemptOutcome(
        error_type=type(error).__name__,
        detail=str(error) or type(error).__name__,
        retry_after=retry_after,
        infrastructure=infrastructure,
    )


async def watch_attempt(
    task: asyncio.Future[Any],
    *,
    timeout: float,
    heartbeat_timeout: float | None,
    last_beat: Callable[[], float],
    kill: Callable[[], None],
    decode: Callable[[Any], StepResult],
    acked: asyncio.Future[None] | None = None,
) -> AttemptOutcome:
    """Wait for ``task`` under the method timeout and heartbeat timeout.

    ``last_beat`` returns the loop time of the latest heartbeat (or the start);
    ``kill`` stops the attempt when a deadline passes. With ``acked`` (a remote
    attempt), both timeouts count from its start acknowledgement: the time it
    waited for a worker, an executor or a slot is not the attempt's.
    """
    loop = asyncio.get_running_loop()
    if acked is not None and not acked.done():
        await _first_done((task, acked), None)
    deadline = loop.time() + timeout
    while True:
        wake = deadline
        if heartbeat_timeout:
            wake = min(wake, last_beat() + heartbeat_timeout)
        await _first_done((task,), wake)
        if task.done():
            error = task.exception()
            if error is not None:
                return describe_failure(error)
            return AttemptOutcome(result=decode(task.result()))
        now = loop.time()
        if now >= deadline:
            kill()
            return AttemptOutcome(
                error_type=StepTimeoutError.__name__,
                detail=f"the attempt did not finish within its {timeout:g} s timeout",
                infrastructure=True,
            )
        if heartbeat_timeout and now >= last_beat() + heartbeat_timeout:
            kill()
            return AttemptOutcome(
                error_type=StepTimeoutError.__name__,
                detail=f"no heartbeat within the {heartbeat_timeout:g} s heartbeat timeout",
                infrastructure=True,
            )


async def _first_done(futures: tuple[asyncio.Future[Any], ...], until: float | None) -> None:
    """Return once one of ``futures`` is done or the loop's clock reaches ``until``
    (``asyncio.wait`` without its task wrapping and sets: every attempt waits here;
    the futures are left as they are)."""
    if any(future.done() for future in futures):
        return
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()

    def wake(_: object = None) -> None:
        if not waiter.done():
            waiter.set_result(None)

    for future in futures:
        future.add_done_callback(wake)
    timer = None if until is None else loop.call_at(until, wake)
    try:
        await waiter
    finally:
        if timer is not None:
            timer.cancel()
        for future in futures:
            future.remove_done_callback(wake)
