"""The threads that run synchronous Step handlers: reused when idle, never a bound."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from dex_agents_ray.engine.sdk._handler_threads import HandlerThreads


def _until(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("the condition did not hold in time")
        time.sleep(0.001)


def _run(threads: HandlerThreads) -> str:
    """Run one job and return the name-and-ident of the thread that ran it."""
    done = threading.Event()
    seen: list[str] = []

    def job() -> None:
        seen.append(f"{threading.current_thread().name}:{threading.get_ident()}")
        done.set()

    threads.submit(job)
    assert done.wait(10)
    return seen[0]


def test_an_idle_thread_takes_the_next_job() -> None:
    threads = HandlerThreads("test-handler")
    first = _run(threads)
    _until(lambda: threads.idle == 1)
    second = _run(threads)
    assert first == second and first.startswith("test-handler:")
    assert threads.started == 1


def test_a_blocked_job_never_holds_up_the_next_one() -> None:
    threads = HandlerThreads("test-handler")
    release = threading.Event()
    blocked = threading.Event()

    def blocking() -> None:
        blocked.set()
        release.wait(10)

    # More blocked jobs than any default pool has threads: each later job still runs.
    for _ in range(40):
        blocked.clear()
        threads.submit(blocking)
        assert blocked.wait(10)
    try:
        _run(threads)
        assert threads.started == 41
    finally:
        release.set()
    _until(lambda: threads.idle == 41)


def test_an_idle_thread_exits_after_its_idle_time_and_a_new_one_starts() -> None:
    threads = HandlerThreads("test-handler", idle_seconds=0.05)
    _run(threads)
    _until(lambda: threads.idle == 1)
    _until(lambda: threads.idle == 0)  # it waited its idle time and exited
    _run(threads)
    assert threads.started == 2


def test_a_job_that_raises_leaves_its_thread_working(caplog: pytest.LogCaptureFixture) -> None:
    threads = HandlerThreads("test-handler")

    def failing() -> None:
        raise RuntimeError("boom")

    threads.submit(failing)
    _until(lambda: threads.idle == 1)
    _run(threads)
    assert threads.started == 1
    assert "a synchronous handler's thread job raised" in caplog.text
