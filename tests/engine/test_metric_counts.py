"""Counters are added up in the process before they go to Ray (``engine/_metrics.py``)."""

from __future__ import annotations

import asyncio

import pytest

from dex_agents_ray.engine import _metrics
from dex_agents_ray.engine._exit_hooks import run_exit_hooks
from dex_agents_ray.engine._metrics import add_count, flush_counts


class _Counter:
    """Takes what ``ray.util.metrics.Counter.inc`` takes."""

    def __init__(self) -> None:
        self.records: list[tuple[float, dict[str, str]]] = []
        self.recorded = asyncio.Event()

    def inc(self, value: float, tags: dict[str, str]) -> None:
        self.records.append((value, tags))
        self.recorded.set()


async def test_counts_of_one_counter_and_tags_reach_ray_as_one_sum_after_the_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_metrics, "COUNT_FLUSH_SECONDS", 0.0)
    counter = _Counter()
    add_count(counter, 1, (("outcome", "completed"),))
    add_count(counter, 2, (("outcome", "completed"),))
    add_count(counter, 5, (("outcome", "failed"),))
    assert counter.records == []  # nothing yet: the loop's timer hands them over
    await asyncio.wait_for(counter.recorded.wait(), timeout=30)
    assert sorted(counter.records, key=lambda r: r[1]["outcome"]) == [
        (3, {"outcome": "completed"}),
        (5, {"outcome": "failed"}),
    ]
    flush_counts()
    assert len(counter.records) == 2  # nothing left to hand over


async def test_a_clean_exit_hands_over_what_waits() -> None:
    counter = _Counter()
    add_count(counter, 4)
    run_exit_hooks()
    assert counter.records == [(4, {})]
    flush_counts()


def test_without_an_event_loop_a_count_goes_to_ray_at_once() -> None:
    counter = _Counter()
    add_count(counter, 7, (("kind", "input"),))
    assert counter.records == [(7, {"kind": "input"})]
