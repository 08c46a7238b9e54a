"""Bounded retries of transient store faults, shared by both stores.

A database that restarts, fails over or drops a connection, and a SQLite file
that another writer holds locked or whose disk is full, cost the caller a wait,
not an exception: the operation is tried again with exponential backoff (50 ms
doubling to 2 s, with jitter) until the store's ``retry_deadline``, and only
then fails with one :class:`StoreUnavailableError` that names the store. Each
store decides which errors are transient and keeps a retried write from
applying twice.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TypeVar

from dex_agents_ray.engine._errors import StoreUnavailableError

logger = logging.getLogger("dex_agents_ray.engine")

T = TypeVar("T")

FIRST_DELAY = 0.05
LONGEST_DELAY = 2.0


async def retrying(
    location: str,
    operation: str,
    deadline: timedelta,
    transient: Callable[[BaseException], bool],
    attempt: Callable[[int], Awaitable[T]],
) -> T:
    """``attempt(n)`` for n = 1, 2, ... until it succeeds, raises a fault that is
    not transient, or ``deadline`` has passed (then ``StoreUnavailableError``)."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    end = start + deadline.total_seconds()
    delay = FIRST_DELAY
    tries = 0
    while True:
        tries += 1
        try:
            result = await attempt(tries)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            if not transient(error):
                raise
            now = loop.time()
            cause = f"{type(error).__name__}: {str(error).strip() or type(error).__name__}"
            if now >= end:
                waited = now - start
                raise StoreUnavailableError(location, operation, tries, waited, cause) from error
            if tries == 1:
                logger.warning(
                    "store %s: %s failed (%s); retrying for up to %.0f s",
                    location,
                    operation,
                    cause,
                    deadline.total_seconds(),
                )
            await asyncio.sleep(min(delay * random.uniform(0.5, 1.0), max(0.0, end - now)))
            delay = min(delay * 2, LONGEST_DELAY)
            continue
        if tries > 1:
            logger.info(
                "store %s: %s succeeded after %d tries (%.1f s)",
                location,
                operation,
                tries,
                loop.time() - start,
            )
        return result
