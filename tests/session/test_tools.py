"""Tool calls on real Ray and SQLite: effects, approvals, Steps, placement, events."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dex_agents_ray import (
    TOOL_CALL_NOT_RUN_ERROR_PREFIX,
    AgentEventType,
    AgentSessionClient,
    AgentSessionOptions,
    AgentToolCallStatus,
    ToolEffect,
    ToolPolicy,
)
from dex_agents_ray.engine import RayTaskOptions
from dex_agents_ray.testing import FileGate, InvocationLog
from tests.session.agents import Call, Reply, build_flow
from tests.session.polling import (
    has_interrupt,
    read_events,
    snapshot_when,
    turn_done,
)

POLICIES = {
    "lookup": ToolPolicy(ToolEffect.READ),
    "refund": ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE),
    "tag": ToolPolicy(ToolEffect.IDEMPOTENT_WRITE),
}


def _executed(history: list[Any]) -> list[str]:
    return [h.step_execution_id for h in history if h.event == "step_completed"]


async def test_read_runs_at_once_and_a_write_waits_for_approval(
    engine_factory: Any, state_dir: Path
) -> None:
    script = {
        "refund order 7": [
            Reply(calls=[Call("c1", "lookup", {"order": 7}), Call("c2", "refund", {"order": 7})]),
            Reply(),
        ]
    }
    flow = build_flow(state_dir, script, options=AgentSessionOptions(tool_policies=POLICIES))
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("s-1", "refund order 7")

    waiting = await snapshot_when(sessions, "s-1", has_interrupt, description="an approval")
    interrupt = waiting.pending_interrupts[0]
    assert (interrupt.interrupt_id, interrupt.kind.value, interrupt.tool_name) == (
        "c2",
        "approval",
        "refund",
    )
    found = await engine.client.search_flows('ActiveStepTypes = "AwaitToolApproval"', 50)
    assert [entry.flow_id for entry in found.flows] == ["s-1"]
    by_id = {record.tool_call_id: record for record in waiting.tool_calls}
    assert by_id["c2"].status is AgentToolCallStatus.AWAITING_APPROVAL
    assert InvocationLog(state_dir / "refund.log").entries() == []

    assert await sessions.resolve_interrupt("s-1", "c2", approved=True)
    done = await snapshot_when(sessions, "s-1", turn_done(1))

    assert done.messages[-1].text == ('lookup=echo {"order": 7}; refund=echo {"order": 7}')
    assert done.pending_interrupts == () and done.tool_calls == ()
    refund_log = InvocationLog(state_dir / "refund.log").entries()
    assert len(refund_log) == 1 and refund_log[0].startswith("c2/1/s-1/turn-1/c2/")
    found = await engine.client.search_flows('ActiveStepTypes = "AwaitToolApproval"', 50)
    assert found.flows == []
    history = await engine.client.read_step_history("s-1")
    executed = _executed(history)
    assert "CallTool-1" in executed and "CallSingleAttemptTool-1" in executed
    assert "AwaitToolApproval-1" in executed and "ResumeTurn-1" in executed
    events = await read_events(sessions, "s-1", until_type=AgentEventType.TURN_COMPLETED)
    kinds = [e.type.value for e in events]
    assert kinds.count("tool_call_deferred") == 2
    assert kinds.count("tool_call_started") == 2 and kinds.count("tool_call_finished") == 2
    raised = next(e for e in events if e.type is AgentEventType.INTERRUPT_RAISED)
    assert raised.payload["interrupt_id"] == "c2" and raised.payload["kind"] == "approval"
    resolved = next(e for e in events if e.type is AgentEventType.INTERRUPT_RESOLVED)
    assert resolved.payload["approved"] is True
    assert resolved.step_execution_id == "AwaitToolApproval-1"
    deferred = next(e for e in events if e.type is AgentEventType.TOOL_CALL_DEFERRED)
    assert deferred.payload == {
        "tool_call_id": "c1",
        "tool_name": "lookup",
        "effect": "read",
        "requires_approval": False,
    }


async def test_rejection_and_bad_interrupt_input_change_nothing(
    engine_factory: Any, state_dir: Path
) -> None:
    script = {"refund": [Reply(calls=[Call("c1", "refund")]), Reply()], "later": [Reply()]}
    flow = build_flow(state_dir, script, options=AgentSessionOptions(tool_policies=POLICIES))
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("s-2", "refund")
    before = await snapshot_when(sessions, "s-2", has_interrupt)

    assert not await sessions.resolve_interrupt("s-2", "nope", approved=True)
    assert not await sessions.answer_question("s-2", "c1", "yes")  # not a question
    assert await sessions.get_agent_snapshot("s-2") == before

    # A message sent during the turn queues for the next one.
    assert await sessions.send_user_message("s-2", "later")
    queued = await sessions.get_agent_snapshot("s-2")
    assert queued.queued_message_count == 1 and queued.queued_messages[0].text == "later"
    assert queued.queued_messages[0].message_id
    assert await sessions.resolve_interrupt(
        "s-2", "c1", approved=False, rejection_message="not today"
    )
    assert not await sessions.resolve_interrupt("s-2", "c1", approved=True)  # second answer
    done = await snapshot_when(sessions, "s-2", turn_done(2))

    assert [m.text for m in done.messages] == [
        "refund",
        "refund=The user rejected this tool call. Reason: not today",
        "later",
        "no tools",
    ]
    assert done.queued_message_count == 0
    assert InvocationLog(state_dir / "refund.log").entries() == []


async def test_tool_errors_retries_and_failure_routes(engine_factory: Any, state_dir: Path) -> None:
    calls = [
        Call("c1", "lookup"),  # ToolExecutionError: failed, one attempt
        Call("c2", "refund"),  # ToolOutcomeUnknownError: outcome_unknown
        Call("c3", "tag"),  # crashes 3 times: RecordToolFailure -> outcome_unknown
        Call("c4", "read_crash"),  # crashes 3 times: RecordToolFailure -> failed
    ]
    policies = {
        **POLICIES,
        "refund": ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE, requires_approval=False),
        "read_crash": ToolPolicy(ToolEffect.READ),
    }
    behaviours = {"lookup": "fail", "refund": "unknown", "tag": "crash", "read_crash": "crash"}
    flow = build_flow(
        state_dir,
        {"go": [Reply(calls=calls), Reply()]},
        behaviours,
        options=AgentSessionOptions(tool_policies=policies),
    )
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("s-3", "go")
    done = await snapshot_when(sessions, "s-3", turn_done(1))

    parts = done.messages[-1].text.split("; ") if done.messages[-1].text else []
    assert parts[0] == "lookup=The tool call failed: lookup refused"
    assert parts[1].startswith("refund=The tool call's outcome is unknown")
    assert "refund lost its connection" in parts[1]
    assert parts[2].startswith("tag=The tool call's outcome is unknown")
    assert parts[3] == "read_crash=The tool call failed: read_crash crashed"
    assert len(InvocationLog(state_dir / "lookup.log").entries()) == 1
    assert len(InvocationLog(state_dir / "refund.log").entries()) == 1
    tags = InvocationLog(state_dir / "tag.log").entries()
    assert [entry.split("/")[1] for entry in tags] == ["1", "2", "3"]
    assert len({entry.split("/", 2)[2].rsplit("/", 1)[0] for entry in tags}) == 1  # one key
    history = await engine.client.read_step_history("s-3")
    executed = _executed(history)
    assert executed.count("RecordToolFailure-1") + executed.count("RecordToolFailure-2") == 2
    assert TOOL_CALL_NOT_RUN_ERROR_PREFIX not in (done.messages[-1].text or "")


async def test_parallel_tool_steps_run_at_once_in_task_workers_or_inline(
    engine_factory: Any, state_dir: Path
) -> None:
    calls = [Call("c1", "left"), Call("c2", "right"), Call("c3", "cheap")]
    options = AgentSessionOptions(
        tool_policies={name: ToolPolicy(ToolEffect.READ) for name in ("left", "right", "cheap")},
        inline_tools=frozenset({"cheap"}),
        tool_ray_options_by_name={"right": RayTaskOptions(num_cpus=0.2)},
    )
    flow = build_flow(
        state_dir,
        {"both": [Reply(calls=calls), Reply()]},
        {"left": "gate", "right": "gate"},
        options=options,
    )
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("s-4", "both")

    left = FileGate(state_dir, "left-1")
    right = FileGate(state_dir, "right-1")
    left_pid = await left.wait_until_reached(timeout=120)
    right_pid = await right.wait_until_reached(timeout=120)
    assert left.times_reached() == 1 and right.times_reached() == 1  # both wait at once
    left.release()
    right.release()
    done = await snapshot_when(sessions, "s-4", turn_done(1))

    assert done.messages[-1].text == "left=left done; right=right done; cheap=echo {}"
    host_pid = await engine.host("s-4").pid.remote()
    assert host_pid not in (left_pid, right_pid)
    cheap = InvocationLog(state_dir / "cheap.log").entries()
    assert cheap[0].rsplit("/", 1)[1] == str(host_pid)


async def test_tool_call_ids_with_a_slash_fail_the_turn_at_once(
    engine_factory: Any, state_dir: Path
) -> None:
    script = {
        "bad": [Reply(calls=[Call("a/b", "lookup")])],
        "again": [Reply()],
    }
    flow = build_flow(state_dir, script, options=AgentSessionOptions(tool_policies=POLICIES))
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("s-5", "bad")
    failed = await snapshot_when(sessions, "s-5", turn_done(1))

    assert failed.state is not None
    assert failed.state.last_turn_error == "invalid tool calls: tool call ID 'a/b' contains '/'"
    assert InvocationLog(state_dir / "model.log").entries() == ["turn-1/0/1"]  # no retry
    assert await sessions.send_user_message("s-5", "again")
    later = await snapshot_when(sessions, "s-5", turn_done(2))
    assert later.state is not None and later.state.last_turn_error is None
