"""Decisions: go_to, go_to_many, completions, failure, dead ends, conditional close,
cancellation with the snapshot rule, Step instances as targets."""

from __future__ import annotations

from typing import Any

from dex import FlowErrorType, FlowStatus

from tests.engine.flows_decisions import DecisionFlow
from tests.engine.polling import details, events, eventually, wait_for_event

TIMEOUT = 60


async def _start(engine_factory: Any, flow_id: str) -> tuple[Any, DecisionFlow]:
    flow = DecisionFlow()
    engine = await engine_factory([flow])
    await engine.client.start_flow(flow, flow_id, flow_id.split("#")[0])
    return engine, flow


def _outputs(result: Any) -> list[tuple[str, str]]:
    return sorted((c.step_execution_id, c.decode(str)) for c in result.completions)


async def _canceled(engine: Any, flow_id: str) -> list[str]:
    history = await events(engine.client, flow_id)
    return [exec_id for exec_id, event in history if event == "step_canceled"]


async def test_go_to_schedules_the_target_with_its_input(engine_factory: Any) -> None:
    engine, _ = await _start(engine_factory, "go_to")
    result = await engine.client.wait_for_flow("go_to", timeout=TIMEOUT)
    assert result.status is FlowStatus.COMPLETED
    assert result.single_output(str) == "echo:hello:Start-1"


async def test_go_to_many_applies_per_movement_step_options(engine_factory: Any) -> None:
    engine, _ = await _start(engine_factory, "per_movement")
    result = await engine.client.wait_for_flow("per_movement", timeout=TIMEOUT)
    assert result.status is FlowStatus.COMPLETED
    # "a" moved with a 2-attempt retry policy and succeeds on attempt 2; "b" kept
    # Flaky's own options (one attempt, then the failure route).
    assert _outputs(result) == [("Fallback-1", "b:fallback"), ("Flaky-1", "a@2")]


async def test_graceful_complete_waits_for_every_branch_and_keeps_all_outputs(
    engine_factory: Any,
) -> None:
    engine, flow = await _start(engine_factory, "graceful")
    for exec_id in ("Finish-1", "Finish-2", "Ends-1"):
        await wait_for_event(engine.client, "graceful", exec_id, "step_completed")
    await wait_for_event(engine.client, "graceful", "Parked-1", "wait_for_completed")
    assert (await engine.client.describe_flow("graceful")).status is FlowStatus.RUNNING
    await engine.client.invoke_rpc(flow.release, "graceful")
    result = await engine.client.wait_for_flow("graceful", timeout=TIMEOUT)
    assert result.status is FlowStatus.COMPLETED
    assert _outputs(result) == [
        ("Finish-1", "out-1"),
        ("Finish-2", "out-2"),
        ("Parked-1", "parked:p"),
    ]


async def test_force_complete_closes_the_run_and_cancels_active_steps(
    engine_factory: Any,
) -> None:
    engine, _ = await _start(engine_factory, "force_complete")
    result = await engine.client.wait_for_flow("force_complete", timeout=TIMEOUT)
    assert result.status is FlowStatus.COMPLETED
    assert _outputs(result) == [("ForceDone-1", "forced")]
    assert await _canceled(engine, "force_complete") == ["Parked-1"]


async def test_force_fail_fails_the_run_with_its_reason(engine_factory: Any) -> None:
    engine, _ = await _start(engine_factory, "force_fail")
    result = await engine.client.wait_for_flow("force_fail", timeout=TIMEOUT)
    assert result.status is FlowStatus.FAILED
    assert result.error_type is FlowErrorType.STEP_DECISION_FAILED
    assert result.error_message == "rejected bad input"
    assert list(result.completions) == []


async def test_dead_end_keeps_the_run_open(engine_factory: Any) -> None:
    engine, flow = await _start(engine_factory, "dead_end")
    await wait_for_event(engine.client, "dead_end", "Start-1", "step_completed")
    assert (await engine.client.describe_flow("dead_end")).status is FlowStatus.RUNNING
    page = await engine.client.search_flows("FlowId = 'dead_end'", 10)
    assert page.flows[0].status is FlowStatus.RUNNING
    # Nothing is active, yet the run still takes work.
    assert await engine.client.invoke_rpc(flow.resume, "dead_end") == "resumed"
    result = await engine.client.wait_for_flow("dead_end", timeout=TIMEOUT)
    assert result.single_output(str) == "echo:after-dead-end:"


async def test_force_complete_if_channels_empty_completes_when_empty(
    engine_factory: Any,
) -> None:
    engine, _ = await _start(engine_factory, "empty")
    result = await engine.client.wait_for_flow("empty", timeout=TIMEOUT)
    assert result.status is FlowStatus.COMPLETED
    assert _outputs(result) == [("Closer-1", "closed")]
    assert not any(e.startswith("Drain") for e, _ in await events(engine.client, "empty"))


async def test_force_complete_if_channels_empty_takes_the_fallback_otherwise(
    engine_factory: Any,
) -> None:
    engine, _ = await _start(engine_factory, "busy")
    result = await engine.client.wait_for_flow("busy", timeout=TIMEOUT)
    assert result.status is FlowStatus.COMPLETED
    # Closer-1 published to the inbox in the same result, so the inbox was not
    # empty: the fallback drained it and Closer-2 completed.
    assert _outputs(result) == [("Closer-2", "closed")]
    history = await engine.client.read_step_history("busy")
    assert details(history, "Drain-1", "step_scheduled") == [{"from": "Closer-1"}]


async def test_canceling_steps_spares_the_steps_the_decision_creates(
    engine_factory: Any,
) -> None:
    engine, flow = await _start(engine_factory, "cancel_snapshot")
    await wait_for_event(engine.client, "cancel_snapshot", "Parked-2", "wait_for_completed")
    assert await _canceled(engine, "cancel_snapshot") == ["Parked-1"]
    await engine.client.invoke_rpc(flow.release, "cancel_snapshot")
    result = await engine.client.wait_for_flow("cancel_snapshot", timeout=TIMEOUT)
    assert _outputs(result) == [("Parked-2", "parked:new")]
    assert await _canceled(engine, "cancel_snapshot") == ["Parked-1"]


async def test_canceling_sibling_steps_cancels_only_executions_of_the_same_parent(
    engine_factory: Any,
) -> None:
    engine, flow = await _start(engine_factory, "cancel_siblings")
    # Parked-1 is a sibling (from Start-1); Parked-2 is a cousin (from Uncle-1).
    await wait_for_event(engine.client, "cancel_siblings", "Parked-2", "wait_for_completed")
    history = await engine.client.read_step_history("cancel_siblings")
    assert details(history, "Parked-2", "step_scheduled") == [{"from": "Uncle-1"}]
    await engine.client.invoke_rpc(flow.poke, "cancel_siblings")
    await wait_for_event(engine.client, "cancel_siblings", "CancelsSiblings-1", "step_completed")
    assert await _canceled(engine, "cancel_siblings") == ["Parked-1"]
    await engine.client.invoke_rpc(flow.release, "cancel_siblings")
    result = await engine.client.wait_for_flow("cancel_siblings", timeout=TIMEOUT)
    assert _outputs(result) == [("Parked-2", "parked:cousin")]


async def test_step_instances_are_accepted_wherever_step_classes_are(
    engine_factory: Any,
) -> None:
    engine, _ = await _start(engine_factory, "instances")
    result = await engine.client.wait_for_flow("instances", timeout=TIMEOUT)
    assert result.status is FlowStatus.COMPLETED
    assert result.single_output(str) == "echo:boom:FragileInstance-1"
    history = await engine.client.read_step_history("instances")
    assert details(history, "Parked-1", "step_canceled") == [
        {"reason": "canceled by UsesInstances-1"}
    ]


async def test_canceled_steps_stay_canceled(engine_factory: Any) -> None:
    engine, flow = await _start(engine_factory, "cancel_snapshot#2")
    await eventually(lambda: _canceled(engine, "cancel_snapshot#2"), lambda c: c == ["Parked-1"])
    await engine.client.invoke_rpc(flow.release, "cancel_snapshot#2")
    await engine.client.wait_for_flow("cancel_snapshot#2", timeout=TIMEOUT)
    history = await engine.client.read_step_history("cancel_snapshot#2")
    assert details(history, "Parked-1", "wait_satisfied") == []
    assert details(history, "Parked-1", "step_completed") == []
