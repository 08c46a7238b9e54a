"""A run's deferred commits: applied in memory at once, written a little later.

An effect-free Step's completion that moves only to in-host Steps (see
``_effect_free``) need not be durable before the next Steps start. The driver
applies it in memory and hands it here: it is *held* for up to ``LINGER``
seconds, because the run's next commit, almost always the next Step's own
result a few milliseconds later, can take it into its own transaction (one
write and one fsync instead of two; ``merge_commits``). A held commit that no
commit takes is written alone when its linger ends, or at once when something
needs it durable (an attempt that must start exactly, a commit that cannot
merge with it, a stop).

One future stands for the durability of everything deferred so far: it
resolves when the last deferred commit is written, alone or merged, and fails
with what its write raised. The driver's next commit waits for it, so the
store sees a run's commits in order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from dex_agents_ray.engine.store._records import Commit

__all__ = ["LINGER", "DeferredCommits"]

LINGER = 0.005
"""Seconds a deferred commit waits for the run's next commit to share its write."""


class DeferredCommits:
    """The held deferred commit of one run and the writes of earlier ones."""

    def __init__(
        self,
        write: Callable[[Commit], Awaitable[list[int]]],
        written: Callable[[Commit, list[int]], None],
    ) -> None:
        """``write`` stores a commit (memory already holds it) and returns its
        Stream offsets; ``written`` is told, with those offsets, once a deferred
        commit written alone is durable."""
        self._write = write
        self._written = written
        self._done: asyncio.Future[None] | None = None
        """Resolved once the last deferred commit is durable."""
        self.held: Commit | None = None
        """A deferred commit not yet handed to the store (it lingers for the next)."""
        self._timer: asyncio.TimerHandle | None = None
        self._writes: set[asyncio.Task[None]] = set()
        """Deferred commits being written on their own."""

    @property
    def writing(self) -> bool:
        """Whether a deferred commit is held or its write is still in flight."""
        return self._done is not None and not self._done.done()

    def hold(self, built: Commit) -> None:
        """Hold ``built`` (memory holds it) for up to ``LINGER`` seconds."""
        loop = asyncio.get_running_loop()
        self.held = built
        self._done = loop.create_future()
        self._done.add_done_callback(_retrieve)
        self._timer = loop.call_later(LINGER, self.release)

    def join(self, merged: Commit) -> None:
        """A further deferred commit joins the held one: ``merged`` is both."""
        assert self.held is not None
        self.held = merged

    def take(self) -> asyncio.Future[None]:
        """Take the held commit out to ride in the caller's own write: the
        caller resolves the returned future, or fails it with ``fail``."""
        assert self.held is not None and self._done is not None
        self._stop_linger()
        self.held = None
        return self._done

    def release(self) -> None:
        """Hand the held commit to the store now (its linger ended, or an
        attempt or a commit needs it durable)."""
        held = self.held
        if held is None:
            return
        self._stop_linger()
        self.held = None
        assert self._done is not None
        task = asyncio.get_running_loop().create_task(self._write_alone(held, self._done))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)
        task.add_done_callback(_retrieve)

    async def durable(self) -> None:
        """Wait until every deferred commit is durable, without hurrying a held
        one; raise what its write raised."""
        done = self._done
        if done is None:
            return
        if not done.done():
            await asyncio.shield(done)
        else:
            done.result()

    async def settle(self) -> None:
        """Write the held commit now and wait until every deferred commit is durable."""
        self.release()
        await self.durable()

    async def stop(self) -> None:
        """Write the held commit and wait for the writes in flight (their
        errors are the store's to log; a stale driver's write is refused)."""
        self.release()
        await asyncio.gather(*self._writes, return_exceptions=True)

    def _stop_linger(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def _write_alone(self, built: Commit, done: asyncio.Future[None]) -> None:
        try:
            offsets = await self._write(built)
        except BaseException as error:
            fail(done, error)
            raise
        if not done.done():
            done.set_result(None)
        self._written(built, offsets)


def fail(done: asyncio.Future[None], error: BaseException) -> None:
    """A deferred commit's write failed (or was cancelled) with ``error``."""
    if done.done():
        return
    if isinstance(error, asyncio.CancelledError):
        done.cancel()
    else:
        done.set_exception(error)


def _retrieve(task: asyncio.Future[None]) -> None:
    """Mark a deferred write's error retrieved: ``settle`` raises it to the
    run's next commit, and the store's error handlers have logged it."""
    if not task.cancelled():
        task.exception()
