"""Threads for synchronous Step handlers: reused when idle, never a bound.

A synchronous ``wait_for`` or ``execute`` (and a Step generator) runs off the
event loop. A bounded pool (``asyncio.to_thread``'s default executor has
``min(32, CPUs + 4)`` threads) would let handlers that block fill it and hold
up every later one; a thread each guarantees that a handler starts at once but
costs a thread start (and the wait for it) per call. Here an idle thread takes
the next call, a new one starts only when none is idle, and one idle for
``IDLE_SECONDS`` exits. Each call runs in the ``contextvars`` context its
caller gives it, so a reused thread carries no context from the call before.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

__all__ = ["IDLE_SECONDS", "HandlerThreads", "handler_threads"]

IDLE_SECONDS = 30.0
"""How long a thread waits for another call before it exits."""

Job = Callable[[], None]

logger = logging.getLogger("dex_agents_ray.engine")


class HandlerThreads:
    """Runs each job on an idle thread, or on a new one when none is idle."""

    def __init__(self, name: str, idle_seconds: float = IDLE_SECONDS) -> None:
        self._name = name
        self._idle_seconds = idle_seconds
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue[Job]] = []
        """The job queues of the threads waiting for a job, the latest idle last."""
        self.started = 0
        """Threads started so far."""

    def submit(self, job: Job) -> None:
        """Run ``job`` on a thread now; it must not raise (it reports its own outcome)."""
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
            if inbox is None:
                self.started += 1
        if inbox is not None:
            inbox.put(job)
            return
        inbox = queue.SimpleQueue()
        inbox.put(job)
        threading.Thread(target=self._work, args=(inbox,), name=self._name, daemon=True).start()

    @property
    def idle(self) -> int:
        """Threads waiting for a job."""
        with self._lock:
            return len(self._idle)

    def _work(self, inbox: queue.SimpleQueue[Job]) -> None:
        job: Job | None = inbox.get()
        while job is not None:
            try:
                job()
            except BaseException:  # a job reports its own outcome; this one did not
                logger.exception("a synchronous handler's thread job raised")
            job = None  # let go of the call's objects while idle
            with self._lock:
                self._idle.append(inbox)
            try:
                job = inbox.get(timeout=self._idle_seconds)
            except queue.Empty:
                with self._lock:
                    if inbox in self._idle:
                        self._idle.remove(inbox)
                        return
                # ``submit`` took this thread as the wait ended: its job is on the way.
                job = inbox.get()


handler_threads = HandlerThreads("dex-sync-handler")
"""The process's threads for synchronous Step and RPC handlers."""
