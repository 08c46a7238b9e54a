"""Pure rules of the engine: wait evaluation, retry delays, the search query language."""

from __future__ import annotations

import pytest
from dex.dexpb import dex_pb2 as pb

from dex_agents_ray.engine._query import Term, matcher, parse_query
from dex_agents_ray.engine.run._retry import next_retry_delay
from dex_agents_ray.engine.run._waits import evaluate_wait, next_timer_at
from dex_agents_ray.engine.store._records import ChannelMessageRecord

ALL = pb.WAITING_CONDITION_TYPE_ALL_COMPLETED
ANY = pb.WAITING_CONDITION_TYPE_ANY_COMPLETED
COMBINATION = pb.WAITING_CONDITION_TYPE_ANY_COMBINATION_COMPLETED
COMPLETED = pb.CONDITION_STATUS_COMPLETED
WAITING = pb.CONDITION_STATUS_WAITING
STARTED = 1_000.0


def _messages(channel: str, count: int) -> list[ChannelMessageRecord]:
    return [
        ChannelMessageRecord(
            channel=channel,
            seq=i,
            message_id=f"{channel}-{i}",
            value=pb.Value(string_value=f"{channel}{i}").SerializeToString(),
        )
        for i in range(1, count + 1)
    ]


def _channel(
    name: str, at_least: int | None = 1, at_most: int | None = 1, cid: str = ""
) -> pb.ChannelCondition:
    condition = pb.ChannelCondition(condition_id=cid or name, channel_name=name)
    if at_least is not None:
        condition.at_least = at_least
    if at_most is not None:
        condition.at_most = at_most
    return condition


def _timer(seconds: int, cid: str = "t") -> pb.TimerCondition:
    return pb.TimerCondition(condition_id=cid, duration_seconds=seconds)


def _wait(
    kind: int, *conditions: object, combinations: tuple[tuple[str, ...], ...] = ()
) -> pb.WaitingCondition:
    wait = pb.WaitingCondition(waiting_condition_type=kind)  # type: ignore[arg-type]
    for condition in conditions:
        if isinstance(condition, pb.TimerCondition):
            wait.timer_conditions.append(condition)
        else:
            wait.channel_conditions.append(condition)
    for ids in combinations:
        wait.condition_combinations.add(condition_ids=ids)
    return wait


def _taken(results: pb.ConditionResults) -> dict[str, list[str]]:
    return {
        r.channel_name: [v.string_value for v in r.values]
        for r in results.channel_results
        if r.condition_status == COMPLETED
    }


def _timers(results: pb.ConditionResults) -> list[bool]:
    return [r.condition_status == COMPLETED for r in results.timer_results]


# -- evaluate_wait --------------------------------------------------------------------


def test_all_of_needs_every_condition() -> None:
    wait = _wait(ALL, _timer(5), _channel("a"))
    channels = {"a": _messages("a", 2)}
    assert evaluate_wait(wait, STARTED, STARTED + 4, channels, {}) is None
    satisfied = evaluate_wait(wait, STARTED, STARTED + 5, channels, {})
    assert satisfied is not None
    assert [m.message_id for m in satisfied.consumed] == ["a-1"]
    assert _taken(satisfied.results) == {"a": ["a1"]}
    assert _timers(satisfied.results) == [True]


def test_any_of_prefers_a_ready_timer_and_consumes_nothing() -> None:
    wait = _wait(ANY, _channel("a"), _timer(0))
    satisfied = evaluate_wait(wait, STARTED, STARTED, {"a": _messages("a", 1)}, {})
    assert satisfied is not None
    assert satisfied.consumed == []
    assert _timers(satisfied.results) == [True]
    [channel_result] = satisfied.results.channel_results
    assert channel_result.condition_status == WAITING and not channel_result.values


def test_any_of_takes_the_first_ready_channel_in_declaration_order() -> None:
    wait = _wait(ANY, _timer(60), _channel("b"), _channel("a"))
    channels = {"a": _messages("a", 1), "b": _messages("b", 1)}
    satisfied = evaluate_wait(wait, STARTED, STARTED, channels, {})
    assert satisfied is not None
    assert _taken(satisfied.results) == {"b": ["b1"]}
    assert _timers(satisfied.results) == [False]
    only_a = evaluate_wait(wait, STARTED, STARTED, {"a": _messages("a", 1)}, {})
    assert only_a is not None and _taken(only_a.results) == {"a": ["a1"]}


def test_any_combination_takes_the_first_ready_combination() -> None:
    wait = _wait(
        COMBINATION,
        _channel("a"),
        _channel("b"),
        _timer(10, "t"),
        combinations=(("a", "b"), ("a", "t")),
    )
    only_a = {"a": _messages("a", 1)}
    assert evaluate_wait(wait, STARTED, STARTED + 9, only_a, {}) is None
    by_timer = evaluate_wait(wait, STARTED, STARTED + 10, only_a, {})
    assert by_timer is not None
    assert _taken(by_timer.results) == {"a": ["a1"]} and _timers(by_timer.results) == [True]
    both = {"a": _messages("a", 1), "b": _messages("b", 1)}
    by_channels = evaluate_wait(wait, STARTED, STARTED + 10, both, {})
    assert by_channels is not None
    assert _taken(by_channels.results) == {"a": ["a1"], "b": ["b1"]}
    assert _timers(by_channels.results) == [False]


@pytest.mark.parametrize(
    ("at_least", "at_most", "queued", "taken"),
    [
        (2, 2, 1, None),  # for_n(2): waits
        (2, 2, 3, 2),  # for_n(2): exactly two
        (2, None, 5, 5),  # at_least(2): everything queued
        (None, 2, 0, 0),  # at_most(2): never blocks
        (None, 2, 5, 2),  # at_most(2): at most two
        (2, 3, 1, None),  # for_range(2, 3): waits for two
        (2, 3, 5, 3),  # for_range(2, 3): then up to three
    ],
)
def test_channel_bounds(
    at_least: int | None, at_most: int | None, queued: int, taken: int | None
) -> None:
    wait = _wait(ALL, _channel("a", at_least, at_most))
    satisfied = evaluate_wait(wait, STARTED, STARTED, {"a": _messages("a", queued)}, {})
    if taken is None:
        assert satisfied is None
    else:
        assert satisfied is not None
        assert [m.message_id for m in satisfied.consumed] == [f"a-{i}" for i in range(1, taken + 1)]


def test_claimed_messages_are_not_handed_out_twice() -> None:
    wait = _wait(ALL, _channel("a"))
    channels = {"a": _messages("a", 2)}
    claimed: dict[str, int] = {}
    first = evaluate_wait(wait, STARTED, STARTED, channels, claimed)
    second = evaluate_wait(wait, STARTED, STARTED, channels, claimed)
    assert first is not None and second is not None
    assert [m.message_id for m in first.consumed + second.consumed] == ["a-1", "a-2"]
    assert claimed == {"a": 2}
    assert evaluate_wait(wait, STARTED, STARTED, channels, claimed) is None
    assert claimed == {"a": 2}


def test_two_conditions_on_one_channel_need_enough_messages_for_both() -> None:
    wait = _wait(ALL, _channel("a", cid="first"), _channel("a", cid="second"))
    claimed: dict[str, int] = {}
    assert evaluate_wait(wait, STARTED, STARTED, {"a": _messages("a", 1)}, claimed) is None
    assert claimed == {}
    satisfied = evaluate_wait(wait, STARTED, STARTED, {"a": _messages("a", 2)}, claimed)
    assert satisfied is not None
    assert [[v.string_value for v in r.values] for r in satisfied.results.channel_results] == [
        ["a1"],
        ["a2"],
    ]


def test_timers_fire_by_duration_or_at_an_absolute_time() -> None:
    absolute = pb.TimerCondition(condition_id="at", firing_unix_timestamp_seconds=1_030)
    wait = _wait(ANY, _timer(20, "late"), absolute)
    assert next_timer_at(wait, STARTED, STARTED) == STARTED + 20
    assert next_timer_at(wait, STARTED, STARTED + 25) == 1_030.0
    assert next_timer_at(wait, STARTED, 1_030.0) is None
    assert evaluate_wait(wait, STARTED, STARTED + 19, {}, {}) is None
    satisfied = evaluate_wait(wait, STARTED, 1_030.0, {}, {})
    assert satisfied is not None and _timers(satisfied.results) == [True, False]


# -- next_retry_delay -----------------------------------------------------------------


def _policy(**fields: float) -> pb.RetryPolicy:
    return pb.RetryPolicy(**fields)  # type: ignore[arg-type]


def test_retry_defaults_double_from_one_second() -> None:
    delays = [next_retry_delay(None, n, 0.0, 0.0) for n in (1, 2, 3, 4)]
    assert delays == [1.0, 2.0, 4.0, 8.0]
    assert next_retry_delay(None, 20, 0.0, 0.0) == 100.0  # capped at 100 initial intervals
    assert next_retry_delay(None, 1, 0.0, 4 * 3600.0) is None  # 4 h total by default


def test_retry_backoff_is_capped_by_the_maximum_interval() -> None:
    policy = _policy(
        initial_interval_seconds=2, backoff_coefficient=3.0, maximum_interval_seconds=10
    )
    assert [next_retry_delay(policy, n, 0.0, 0.0) for n in (1, 2, 3)] == [2.0, 6.0, 10.0]
    flat = _policy(initial_interval_seconds=1, backoff_coefficient=1.0)
    assert [next_retry_delay(flat, n, 0.0, 0.0) for n in (1, 2, 3)] == [1.0, 1.0, 1.0]


def test_retry_stops_at_maximum_attempts_and_total_duration() -> None:
    policy = _policy(initial_interval_seconds=1, maximum_attempts=3, total_duration_seconds=12)
    assert next_retry_delay(policy, 2, 0.0, 0.0) is not None
    assert next_retry_delay(policy, 3, 0.0, 0.0) is None  # attempts include the first call
    assert next_retry_delay(policy, 1, 0.0, 11.0) == 1.0  # the next attempt at 12 s fits
    assert next_retry_delay(policy, 1, 0.0, 11.5) is None


def test_retry_after_replaces_the_interval_but_not_the_limits() -> None:
    policy = _policy(initial_interval_seconds=3600, maximum_attempts=2)
    assert next_retry_delay(policy, 1, 0.0, 0.0, retry_after=1.0) == 1.0
    assert next_retry_delay(policy, 2, 0.0, 0.0, retry_after=1.0) is None


# -- the search query language --------------------------------------------------------


def test_parse_query_reads_terms_joined_by_and() -> None:
    assert parse_query("") == []
    assert parse_query(
        'FlowType = \'a b\' AND n != 3 and x = 2.5 AND ok = true AND q = "it\\"s"'
    ) == [
        Term("FlowType", "=", "a b"),
        Term("n", "!=", 3),
        Term("x", "=", 2.5),
        Term("ok", "=", True),
        Term("q", "=", 'it"s'),
    ]


@pytest.mark.parametrize(
    "query",
    [
        "FlowType",
        "FlowType =",
        "FlowType = flow",
        "FlowType == 'x'",
        "'FlowType' = 'x'",
        "FlowType = 'x' OR FlowType = 'y'",
        "FlowType = 'x' AND",
        "FlowType = 'x' FlowType = 'y'",
        "FlowType = 'unterminated",
        "FlowType > 3",
    ],
)
def test_parse_query_rejects_malformed_queries(query: str) -> None:
    with pytest.raises(ValueError, match="search query"):
        parse_query(query)


def test_matcher_treats_arrays_as_contains() -> None:
    fields = {"FlowType": "F", "ActiveStepTypes": ["A", "B"], "owner": "bob"}
    assert matcher(parse_query("ActiveStepTypes = 'B' AND FlowType = 'F'"))(fields)
    assert not matcher(parse_query("ActiveStepTypes = 'C'"))(fields)
    assert matcher(parse_query("ActiveStepTypes != 'C'"))(fields)
    assert not matcher(parse_query("owner = 'bob' AND FlowType = 'G'"))(fields)
    assert not matcher(parse_query("missing = 'x'"))(fields)
    assert matcher(parse_query(""))(fields)
