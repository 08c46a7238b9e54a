"""Deciding which waiting Step executions are satisfied, and what they consume.

Pure functions over the run's pending Channel messages and the clock, so the
rules (canonical order, consumption for the winner only) are testable alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dex.dexpb import dex_pb2 as pb

from dex_agents_ray.engine.store._records import ChannelMessageRecord

_COMPLETED = pb.CONDITION_STATUS_COMPLETED
_WAITING = pb.CONDITION_STATUS_WAITING


@dataclass(frozen=True)
class Satisfied:
    """A wait that completed: the messages it consumes and its condition results."""

    consumed: list[ChannelMessageRecord]
    results: pb.ConditionResults


def timer_fire_times(wait: pb.WaitingCondition, started_at: float) -> list[float]:
    """When each Timer Condition of ``wait`` fires, in declaration order."""
    return [
        float(t.firing_unix_timestamp_seconds)
        if t.firing_unix_timestamp_seconds
        else started_at + t.duration_seconds
        for t in wait.timer_conditions
    ]


def next_timer_at(wait: pb.WaitingCondition, started_at: float, now: float) -> float | None:
    """The earliest Timer of ``wait`` still in the future, if any."""
    future = [t for t in timer_fire_times(wait, started_at) if t > now]
    return min(future) if future else None


def evaluate_wait(
    wait: pb.WaitingCondition,
    started_at: float,
    now: float,
    channels: Mapping[str, Sequence[ChannelMessageRecord]],
    claimed: dict[str, int],
) -> Satisfied | None:
    """Check ``wait`` against the pending messages; ``claimed`` counts messages
    already taken by earlier executions in this pass and is updated on success."""
    fire_times = timer_fire_times(wait, started_at)
    timers_ready = [now >= t for t in fire_times]
    # Each channel condition's readiness is judged independently of the others.
    channels_ready = [
        _available(c.channel_name, channels, claimed) >= _at_least(c)
        for c in wait.channel_conditions
    ]
    winners = _winners(wait, timers_ready, channels_ready)
    if winners is None:
        return None
    winning_timers, winning_channels = winners
    local_claims = dict(claimed)
    consumed: list[ChannelMessageRecord] = []
    results = pb.ConditionResults()
    for index, condition in enumerate(wait.channel_conditions):
        taken: list[ChannelMessageRecord] = []
        if index in winning_channels:
            name = condition.channel_name
            available = _available(name, channels, local_claims)
            if available < _at_least(condition):
                return None  # two conditions on one channel ask for more than there is
            limit = condition.at_most if condition.HasField("at_most") else math.inf
            count = int(min(available, limit))
            start = local_claims.get(name, 0)
            taken = list(channels.get(name, ())[start : start + count])
            local_claims[name] = start + count
            consumed.extend(taken)
        results.channel_results.add(
            condition_id=condition.condition_id,
            condition_status=_COMPLETED if index in winning_channels else _WAITING,
            channel_name=condition.channel_name,
            values=[pb.Value.FromString(m.value) for m in taken],
        )
    for index, timer in enumerate(wait.timer_conditions):
        results.timer_results.add(
            condition_id=timer.condition_id,
            condition_status=_COMPLETED if index in winning_timers else _WAITING,
        )
    claimed.clear()
    claimed.update(local_claims)
    return Satisfied(consumed=consumed, results=results)


def _at_least(condition: pb.ChannelCondition) -> int:
    return condition.at_least if condition.HasField("at_least") else 0


def _available(
    name: str, channels: Mapping[str, Sequence[ChannelMessageRecord]], claimed: Mapping[str, int]
) -> int:
    return len(channels.get(name, ())) - claimed.get(name, 0)


def _winners(
    wait: pb.WaitingCondition, timers_ready: list[bool], channels_ready: list[bool]
) -> tuple[set[int], set[int]] | None:
    kind = wait.waiting_condition_type
    if kind == pb.WAITING_CONDITION_TYPE_ALL_COMPLETED:
        if all(timers_ready) and all(channels_ready):
            return set(range(len(timers_ready))), set(range(len(channels_ready)))
        return None
    if kind == pb.WAITING_CONDITION_TYPE_ANY_COMPLETED:
        # Canonical order: Timers first, then Channels, each in declaration order.
        for index, ready in enumerate(timers_ready):
            if ready:
                return {index}, set()
        for index, ready in enumerate(channels_ready):
            if ready:
                return set(), {index}
        return None
    if kind == pb.WAITING_CONDITION_TYPE_ANY_COMBINATION_COMPLETED:
        timer_ids = {t.condition_id: i for i, t in enumerate(wait.timer_conditions)}
        channel_ids = {c.condition_id: i for i, c in enumerate(wait.channel_conditions)}
        for combination in wait.condition_combinations:
            timers = {timer_ids[c] for c in combination.condition_ids if c in timer_ids}
            chans = {channel_ids[c] for c in combination.condition_ids if c in channel_ids}
            if all(timers_ready[i] for i in timers) and all(channels_ready[i] for i in chans):
                return timers, chans
        return None
    raise ValueError(f"unsupported waiting condition type {kind}")
