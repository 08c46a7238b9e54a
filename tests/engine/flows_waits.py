"""A flow whose waiting Step takes one of many Wait shapes, chosen by its input."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import dex
from dex import (
    Channel,
    ChannelMap,
    ConditionCombination,
    Context,
    Flow,
    PersistenceSchema,
    RPCResult,
    Step,
    StepDecision,
    StepList,
    StepMovement,
    Timer,
    Wait,
    rpc,
)

A = Channel("a", str)
B = Channel("b", str)
C = Channel("c", str)
M = ChannelMap("m", str)

_CHANNELS = {"a": A, "b": B, "c": C}
MAP_INSTANCES = ("x", "y")


def _combination() -> Wait:
    a = A.for_one(condition_id="a")
    b = B.for_one(condition_id="b")
    c = C.for_one(condition_id="c")
    return Wait.any_combination_of(ConditionCombination.of(a, b), ConditionCombination.of(c))


WAITS: dict[str, Callable[[], Wait]] = {
    "skip": Wait.skip_immediately,
    "all_a_b": lambda: Wait.all_of(A.for_one(), B.for_one()),
    "any_a_b": lambda: Wait.any_of(A.for_one(), B.for_one()),
    "any_a_timer_now": lambda: Wait.any_of(A.for_one(), Timer.by_duration(timedelta(0))),
    "any_late_timer_a": lambda: Wait.any_of(Timer.by_duration(timedelta(hours=1)), A.for_one()),
    "two_timers": lambda: Wait.any_of(
        Timer.by_duration(timedelta(hours=1)), Timer.by_duration(timedelta(0))
    ),
    "subsecond_timer": lambda: Wait.until(Timer.by_duration(timedelta(milliseconds=100))),
    "combination": _combination,
    "for_one": lambda: Wait.until(A.for_one()),
    "for_n": lambda: Wait.until(A.for_n(2)),
    "at_least": lambda: Wait.until(A.at_least(2)),
    "at_most": lambda: Wait.until(A.at_most(2)),
    "for_range": lambda: Wait.until(A.for_range(at_least=2, at_most=3)),
    "map_for_one": lambda: Wait.until(M.for_one("y")),
}


@dataclass(frozen=True)
class WaitCase:
    wait: str
    """A key of ``WAITS``."""
    prefill: dict[str, list[str]] = field(default_factory=dict)
    """Messages published before the wait starts, by channel (``m/<instance>`` for M)."""
    waiters: int = 1


@dataclass(frozen=True)
class Publication:
    channel: str
    values: list[str]


def _publish(context: Context, channel: str, value: str) -> None:
    if channel.startswith("m/"):
        M.publish(context, channel[2:], value)
    else:
        _CHANNELS[channel].publish(context, value)


class Prefill(Step[WaitCase]):
    def execute(self, context: Context, input: WaitCase) -> StepDecision:
        for channel, values in input.prefill.items():
            for value in values:
                _publish(context, channel, value)
        return dex.go_to_many(*(StepMovement.of(Waiter, input) for _ in range(input.waiters)))


class Waiter(Step[WaitCase]):
    def wait_for(self, context: Context, input: WaitCase) -> Wait:
        return WAITS[input.wait]()

    def execute(self, context: Context, input: WaitCase) -> StepDecision:
        report: dict[str, Any] = {
            "results": {
                **{name: list(ch.results(context)) for name, ch in _CHANNELS.items()},
                **{f"m/{i}": list(M.results(context, i)) for i in MAP_INSTANCES},
            },
            "left": {
                **{name: ch.size(context) for name, ch in _CHANNELS.items()},
                **{f"m/{i}": M.size(context, i) for i in MAP_INSTANCES},
            },
            "timers": [context.has_timer_fired(i) for i in range(2)],
            "any_timer": context.has_timer_fired(),
        }
        return dex.graceful_complete(report)


class WaitFlow(Flow[WaitCase]):
    def get_steps(self) -> StepList[WaitCase]:
        return StepList.start_step(Prefill()).other_steps(Waiter())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(A, B, C, M)

    @rpc
    def publish(self, context: Context, input: Publication) -> RPCResult[int]:
        for value in input.values:
            _publish(context, input.channel, value)
        return RPCResult(len(input.values))
