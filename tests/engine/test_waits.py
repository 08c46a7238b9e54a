"""Waits: skip, all_of, any_of order, combinations, Channel bounds, ChannelMaps, Timers."""

from __future__ import annotations

from typing import Any

from dex import FlowStatus

from tests.engine.flows_waits import Publication, WaitCase, WaitFlow
from tests.engine.polling import details, events, eventually, wait_for_event

TIMEOUT = 60
NOTHING_LEFT = {"a": 0, "b": 0, "c": 0, "m/x": 0, "m/y": 0}


async def _run(engine: Any, flow: WaitFlow, flow_id: str, case: WaitCase) -> dict[str, Any]:
    await engine.client.start_flow(flow, flow_id, case)
    result = await engine.client.wait_for_flow(flow_id, timeout=TIMEOUT)
    assert result.status is FlowStatus.COMPLETED
    report: dict[str, Any] = result.single_output(dict[str, Any])
    return report


def _taken(report: dict[str, Any]) -> dict[str, list[str]]:
    return {name: values for name, values in report["results"].items() if values}


async def _waiting(engine: Any, flow_id: str, exec_id: str = "Waiter-1") -> None:
    """Wait until ``exec_id`` returned its Wait (so messages sent now find it waiting)."""
    entry = await wait_for_event(engine.client, flow_id, exec_id, "wait_for_completed")
    assert entry.detail["waiting"] is True


async def test_skip_immediately_runs_execute_without_waiting(engine_factory: Any) -> None:
    flow = WaitFlow()
    engine = await engine_factory([flow])
    report = await _run(engine, flow, "skip", WaitCase("skip", {"a": ["a1"]}))
    assert _taken(report) == {}
    assert report["left"] == {**NOTHING_LEFT, "a": 1}
    assert report["any_timer"] is False
    history = await engine.client.read_step_history("skip")
    assert details(history, "Waiter-1", "wait_for_completed") == [{"waiting": False}]
    assert details(history, "Waiter-1", "wait_satisfied") == []


async def test_all_of_waits_for_every_condition(engine_factory: Any) -> None:
    flow = WaitFlow()
    engine = await engine_factory([flow])
    await engine.client.start_flow(flow, "all", WaitCase("all_a_b", {"a": ["a1", "a2"]}))
    await _waiting(engine, "all")
    await engine.client.invoke_rpc(flow.publish, "all", Publication("b", ["b1"]))
    result = await engine.client.wait_for_flow("all", timeout=TIMEOUT)
    report = result.single_output(dict[str, Any])
    assert _taken(report) == {"a": ["a1"], "b": ["b1"]}
    assert report["left"] == {**NOTHING_LEFT, "a": 1}


async def test_any_of_prefers_timers_over_channels(engine_factory: Any) -> None:
    flow = WaitFlow()
    engine = await engine_factory([flow])
    # Both are ready at the first look; the Timer wins although declared second,
    # and the Channel keeps its message because only the winner consumes.
    report = await _run(engine, flow, "timer-first", WaitCase("any_a_timer_now", {"a": ["a1"]}))
    assert _taken(report) == {}
    assert report["left"] == {**NOTHING_LEFT, "a": 1}
    assert report["any_timer"] is True


async def test_any_of_takes_channels_in_declaration_order_and_consumes_only_the_winner(
    engine_factory: Any,
) -> None:
    flow = WaitFlow()
    engine = await engine_factory([flow])
    report = await _run(engine, flow, "any", WaitCase("any_a_b", {"b": ["b1"], "a": ["a1"]}))
    assert _taken(report) == {"a": ["a1"]}
    assert report["left"] == {**NOTHING_LEFT, "b": 1}


async def test_any_of_with_a_late_timer_lets_the_channel_win(engine_factory: Any) -> None:
    flow = WaitFlow()
    engine = await engine_factory([flow])
    report = await _run(engine, flow, "late", WaitCase("any_late_timer_a", {"a": ["a1"]}))
    assert _taken(report) == {"a": ["a1"]}
    assert report["timers"] == [False, False]
    assert report["any_timer"] is False


async def test_has_timer_fired_indexes_the_timers_of_the_wait(engine_factory: Any) -> None:
    flow = WaitFlow()
    engine = await engine_factory([flow])
    report = await _run(engine, flow, "timers", WaitCase("two_timers"))
    assert report["timers"] == [False, True]
    assert report["any_timer"] is True


async def test_timer_durations_round_up_to_whole_seconds(engine_factory: Any) -> None:
    flow = WaitFlow()
    engine = await engine_factory([flow])
    report = await _run(engine, flow, "subsecond", WaitCase("subsecond_timer"))
    assert report["timers"] == [True, False]
    history = await engine.client.read_step_history("subsecond")
    [waiting] = [h for h in history if h.event == "wait_for_completed"]
    [satisfied] = [h for h in history if h.event == "wait_satisfied"]
    # 100 ms rounds up to 1 s (the SDK itself refuses sub-second Timers).
    assert (satisfied.at - waiting.at).total_seconds() >= 0.999


async def test_any_combination_of_takes_the_first_ready_combination(
    engine_factory: Any,
) -> None:
    flow = WaitFlow()
    engine = await engine_factory([flow])
    only_c = await _run(
        engine, flow, "combo-c", WaitCase("combination", {"a": ["a1"], "c": ["c1"]})
    )
    assert _taken(only_c) == {"c": ["c1"]}
    assert only_c["left"] == {**NOTHING_LEFT, "a": 1}
    both = await _run(
        engine, flow, "combo-ab", WaitCase("combination", {"a": ["a1"], "b": ["b1"], "c": ["c1"]})
    )
    assert _taken(both) == {"a": ["a1"], "b": ["b1"]}
    assert both["left"] == {**NOTHING_LEFT, "c": 1}


async def test_for_one_and_for_n_take_exactly_their_count(engine_factory: Any) -> None:
    flow = WaitFlow()
    engine = await engine_factory([flow])
    three = {"a": ["a1", "a2", "a3"]}
    one = await _run(engine, flow, "for-one", WaitCase("for_one", three))
    assert _taken(one) == {"a": ["a1"]}
    assert one["left"]["a"] == 2
    two = await _run(engine, flow, "for-n", WaitCase("for_n", three))
    assert _taken(two) == {"a": ["a1", "a2"]}
    assert two["left"]["a"] == 1


async def test_for_n_waits_until_enough_messages_arrive(engine_factory: Any) -> None:
    flow = WaitFlow()
    engine = await engine_factory([flow])
    await engine.client.start_flow(flow, "for-n-wait", WaitCase("for_n", {"a": ["a1"]}))
    await _waiting(engine, "for-n-wait")
    await engine.client.invoke_rpc(flow.publish, "for-n-wait", Publication("a", ["a2", "a3"]))
    result = await engine.client.wait_for_flow("for-n-wait", timeout=TIMEOUT)
    report = result.single_output(dict[str, Any])
    assert _taken(report) == {"a": ["a1", "a2"]}
    assert report["left"]["a"] == 1


async def test_at_least_takes_everything_queued(engine_factory: Any) -> None:
    flow = WaitFlow()
    engine = await engine_factory([flow])
    report = await _run(engine, flow, "at-least", WaitCase("at_least", {"a": ["a1", "a2", "a3"]}))
    assert _taken(report) == {"a": ["a1", "a2", "a3"]}
    assert report["left"]["a"] == 0


async def test_at_most_never_blocks_and_takes_at_most_its_count(engine_factory: Any) -> None:
    flow = WaitFlow()
    engine = await engine_factory([flow])
    empty = await _run(engine, flow, "at-most-empty", WaitCase("at_most"))
    assert _taken(empty) == {}
    full = await _run(engine, flow, "at-most", WaitCase("at_most", {"a": ["a1", "a2", "a3"]}))
    assert _taken(full) == {"a": ["a1", "a2"]}
    assert full["left"]["a"] == 1


async def test_for_range_waits_for_the_lower_bound_and_takes_up_to_the_upper(
    engine_factory: Any,
) -> None:
    flow = WaitFlow()
    engine = await engine_factory([flow])
    await engine.client.start_flow(flow, "range", WaitCase("for_range", {"a": ["a1"]}))
    await _waiting(engine, "range")
    await engine.client.invoke_rpc(
        flow.publish, "range", Publication("a", ["a2", "a3", "a4", "a5"])
    )
    result = await engine.client.wait_for_flow("range", timeout=TIMEOUT)
    report = result.single_output(dict[str, Any])
    # One message is too few; once the RPC's four land together, three are taken.
    assert _taken(report) == {"a": ["a1", "a2", "a3"]}
    assert report["left"]["a"] == 2


async def test_channel_map_for_one_waits_on_one_instance(engine_factory: Any) -> None:
    flow = WaitFlow()
    engine = await engine_factory([flow])
    report = await _run(
        engine, flow, "map", WaitCase("map_for_one", {"m/x": ["x1"], "m/y": ["y1", "y2"]})
    )
    assert _taken(report) == {"m/y": ["y1"]}
    assert report["left"] == {**NOTHING_LEFT, "m/x": 1, "m/y": 1}


async def test_waiters_on_one_channel_never_share_a_message(engine_factory: Any) -> None:
    flow = WaitFlow()
    engine = await engine_factory([flow])
    await engine.client.start_flow(flow, "share", WaitCase("for_one", {"a": ["a1"]}, waiters=2))
    # One waiter takes a1 and completes; the other keeps waiting for a message of its own.
    await eventually(
        lambda: events(engine.client, "share"),
        lambda e: (
            sum(1 for _, event in e if event == "step_completed") == 2
            and sum(1 for _, event in e if event == "wait_for_completed") == 2
        ),
    )
    await engine.client.invoke_rpc(flow.publish, "share", Publication("a", ["a2"]))
    result = await engine.client.wait_for_flow("share", timeout=TIMEOUT)
    taken = sorted(c.decode(dict[str, Any])["results"]["a"] for c in result.completions)
    assert taken == [["a1"], ["a2"]]


async def test_a_publication_satisfies_a_waiting_step_in_its_own_commit(
    engine_factory: Any,
) -> None:
    flow = WaitFlow()
    engine = await engine_factory([flow])
    await engine.client.start_flow(flow, "same", WaitCase("all_a_b", {"a": ["a1"]}))
    await _waiting(engine, "same")
    await engine.client.invoke_rpc(flow.publish, "same", Publication("b", ["b1"]))
    result = await engine.client.wait_for_flow("same", timeout=TIMEOUT)
    assert _taken(result.single_output(dict[str, Any])) == {"a": ["a1"], "b": ["b1"]}

    history = await engine.client.read_step_history("same")
    applied = next(i for i, h in enumerate(history) if h.event == "rpc_applied")
    # One transaction: the message, the wait it satisfies, and the start of the
    # Step's first attempt (entries of one commit share its timestamp).
    same_commit = [h for h in history if h.at == history[applied].at]
    assert [(h.step_execution_id, h.event) for h in same_commit] == [
        ("", "rpc_applied"),
        ("Waiter-1", "wait_satisfied"),
        ("Waiter-1", "attempt_started"),
    ]
