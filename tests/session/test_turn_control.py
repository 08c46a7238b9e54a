"""Turn control on real Ray and SQLite (the spec's "Steering and turn cancellation"):
steering with queued messages and with text, deleting queued messages, and
``cancel_turn`` during a model call, an approval, a question and a durable wait.
Gates hold model calls and tools; nothing sleeps for timing."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from dex_agents_ray import (
    TOOL_CALL_NOT_RUN_ERROR_PREFIX,
    TOOL_CALL_SKIPPED_AFTER_WRITE_DETAIL,
    AgentEventType,
    AgentSessionClient,
    AgentSessionOptions,
    AgentSnapshot,
    AgentToolCallStatus,
    BuiltInTool,
    CancellationReason,
    ToolEffect,
    ToolPolicy,
)
from dex_agents_ray.testing import FileGate, InvocationLog, kill_flow_actor
from tests.session.agents import Call, CancellingTaskRunner, Reply, build_flow
from tests.session.polling import has_interrupt, read_events, snapshot_when, turn_done

POLICIES = {
    "slow": ToolPolicy(ToolEffect.READ),
    "job": ToolPolicy(ToolEffect.READ),
    "lookup": ToolPolicy(ToolEffect.READ),
    "refund": ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE, requires_approval=True),
}
OPTIONS = AgentSessionOptions(
    tool_policies=POLICIES,
    built_in_tools=frozenset({BuiltInTool.ASK_USER, BuiltInTool.DURABLE_WAIT}),
)


def _user_texts(snapshot: AgentSnapshot, turn_id: str) -> list[str | None]:
    return [m.text for m in snapshot.messages if m.turn_id == turn_id and m.role.value == "user"]


def _no_turn(snapshot: AgentSnapshot) -> bool:
    return snapshot.state is not None and snapshot.state.active_turn_id is None


async def test_steering_ends_the_turn_after_the_running_tool_and_keeps_every_message(
    engine_factory: Any, state_dir: Path
) -> None:
    script = {
        "go": [Reply(calls=[Call("c1", "slow"), Call("c2", "refund"), Call("c3", "lookup")])],
        "first steer": [Reply()],
    }
    flow = build_flow(state_dir, script, {"slow": "gate"}, options=OPTIONS)
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("s-1", "go")
    await FileGate(state_dir, "slow-1").wait_until_reached(timeout=120)
    await snapshot_when(sessions, "s-1", has_interrupt, description="the approval")

    # One message queued and moved by its ID, one steered with text, one deleted.
    assert await sessions.send_user_message("s-1", "first steer")
    assert await sessions.send_user_message("s-1", "never mind")
    queued = (await sessions.get_agent_snapshot("s-1")).queued_messages
    assert [q.text for q in queued] == ["first steer", "never mind"]
    assert await sessions.steer_user_message("s-1", message_id=queued[0].message_id)
    assert not await sessions.steer_user_message("s-1", message_id=queued[0].message_id)
    assert await sessions.steer_user_message("s-1", text="second steer")
    assert await sessions.delete_queued_message("s-1", queued[1].message_id)
    assert not await sessions.delete_queued_message("s-1", queued[1].message_id)

    # The approval is withdrawn at once; the started tool runs to its end.
    steered = await snapshot_when(
        sessions, "s-1", lambda s: not s.pending_interrupts, description="approval withdrawn"
    )
    assert [m.text for m in steered.steered_messages] == ["first steer", "second steer"]
    assert steered.queued_messages == ()
    assert not await sessions.resolve_interrupt("s-1", "c2", approved=True)
    FileGate(state_dir, "slow-1").release()

    done = await snapshot_when(sessions, "s-1", turn_done(2), description="the steered turn")
    assert done.state is not None and done.state.last_turn_error is None
    assert _user_texts(done, "turn-2") == ["first steer", "second steer"]
    assert done.steered_messages == () and done.queued_messages == ()
    assert len(InvocationLog(state_dir / "slow.log").entries()) == 1
    assert InvocationLog(state_dir / "refund.log").entries() == []
    events = await read_events(sessions, "s-1", until_type=AgentEventType.TURN_COMPLETED)
    ended = [e for e in events if e.type is AgentEventType.TURN_STEERED]
    assert [(e.turn_id, e.payload["steered_message_count"]) for e in ended] == [("turn-1", 2)]
    finished = {
        e.payload["tool_call_id"]: e.payload["status"]
        for e in events
        if e.type is AgentEventType.TOOL_CALL_FINISHED and e.turn_id == "turn-1"
    }
    assert finished["c1"] == AgentToolCallStatus.SUCCEEDED
    assert finished["c2"] == AgentToolCallStatus.REJECTED
    # The note of turn 1 lists what ran; the steered turn sees it before its messages.
    note = [m.text for m in done.messages if m.turn_id == "turn-1" and m.role.value == "user"]
    assert note[0] == "go" and len(note) == 2 and "slow" in (note[1] or "")


async def test_cancel_during_a_model_call_drops_its_answer(
    engine_factory: Any, state_dir: Path
) -> None:
    script = {"think": [Reply(model_gate="think")], "again": [Reply()]}
    flow = build_flow(state_dir, script, options=OPTIONS)
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("s-1", "think")
    await FileGate(state_dir, "model-think").wait_until_reached(timeout=120)

    assert not await sessions.cancel_turn("s-1", "turn-7")  # another turn
    first, second = await asyncio.gather(
        sessions.cancel_turn("s-1", "turn-1"), sessions.cancel_turn("s-1", "turn-1")
    )
    assert first and second  # concurrent cancels: both recorded, applied once
    done = await snapshot_when(sessions, "s-1", _no_turn, description="the cancelled turn")
    assert done.state is not None and done.state.turn_count == 1
    assert done.state.last_turn_error is None
    assert [m.role.value for m in done.messages] == ["user"]  # no answer stored
    assert await sessions.cancel_turn("s-1", "turn-1")  # recorded before: changes nothing
    assert not await sessions.cancel_turn("s-1", "turn-2")  # no turn is active
    events = await read_events(sessions, "s-1", until_type=AgentEventType.TURN_CANCELLED)
    assert [e.turn_id for e in events if e.type is AgentEventType.TURN_CANCELLED] == ["turn-1"]

    FileGate(state_dir, "model-think").release()  # the cancelled attempt never returns
    assert await sessions.send_user_message("s-1", "again")
    after = await snapshot_when(sessions, "s-1", turn_done(2), description="the next turn")
    assert after.messages[-1].text == "no tools"
    assert InvocationLog(state_dir / "model.log").entries() == ["turn-1/0/1", "turn-2/0/1"]


async def test_cancel_ends_every_wait_and_answers_then_return_false(
    engine_factory: Any, state_dir: Path
) -> None:
    calls = [
        Call("c1", "refund"),
        Call("q1", "ask_user", {"question": "Color?", "choices": ["red"]}),
        Call("w1", "durable_wait", {"duration_seconds": 3600, "reason": "later"}),
        Call("c2", "lookup"),
        Call("q2", "ask_user", {"question": "Size?", "choices": ["s"]}),
        Call("q3", "ask_user", {"choices": ["x"]}),  # invalid: fails at once
    ]
    flow = build_flow(state_dir, {"wait": [Reply(calls=calls), Reply()]}, options=OPTIONS)
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("s-1", "wait")
    waiting = await snapshot_when(
        sessions, "s-1", lambda s: len(s.pending_interrupts) == 3, description="three interrupts"
    )
    assert waiting.state is not None and waiting.state.active_turn_id == "turn-1"

    # An answer that commits before the cancel is the call's result.
    assert await sessions.answer_question("s-1", "q2", "s")
    assert await sessions.cancel_turn("s-1", "turn-1")
    assert not await sessions.resolve_interrupt("s-1", "c1", approved=True)
    assert not await sessions.answer_question("s-1", "q1", "red")
    done = await snapshot_when(sessions, "s-1", _no_turn, description="the cancelled turn")
    assert done.pending_interrupts == () and done.tool_calls == ()
    events = await read_events(sessions, "s-1", until_type=AgentEventType.TURN_CANCELLED)
    finished = {
        e.payload["tool_call_id"]: e.payload["status"]
        for e in events
        if e.type is AgentEventType.TOOL_CALL_FINISHED
    }
    assert finished == {
        "c1": AgentToolCallStatus.REJECTED,
        "q1": AgentToolCallStatus.REJECTED,
        "w1": AgentToolCallStatus.REJECTED,
        "c2": AgentToolCallStatus.SUCCEEDED,
        "q2": AgentToolCallStatus.SUCCEEDED,
        "q3": AgentToolCallStatus.FAILED,
    }
    resolved = [e.payload for e in events if e.type is AgentEventType.INTERRUPT_RESOLVED]
    assert {(p["interrupt_id"], p["cancellation_reason"]) for p in resolved} == {
        ("c1", CancellationReason.TURN_CANCELLED),
        ("q1", CancellationReason.TURN_CANCELLED),
        ("q2", None),
    }
    # One model call: the cancelled turn never went back to the model.
    assert InvocationLog(state_dir / "model.log").entries() == ["turn-1/0/1"]
    assert InvocationLog(state_dir / "refund.log").entries() == []
    found = await engine.client.search_flows('ActiveStepTypes = "AwaitTimer"', 50)
    assert found.flows == []


async def test_bad_turn_control_input_changes_nothing(engine_factory: Any, state_dir: Path) -> None:
    flow = build_flow(state_dir, {"hello": [Reply()], "queued": [Reply()]}, options=OPTIONS)
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("s-1", "hello")
    before = await snapshot_when(sessions, "s-1", turn_done(1))

    assert not await sessions.steer_user_message("s-1")  # neither
    assert not await sessions.steer_user_message("s-1", message_id="m", text="both")
    assert not await sessions.steer_user_message("s-1", text="   ")  # blank
    assert not await sessions.steer_user_message("s-1", message_id="unknown")
    assert not await sessions.delete_queued_message("s-1", "unknown")
    assert not await sessions.delete_queued_message("s-1", "")
    assert not await sessions.cancel_turn("s-1", "turn-1")  # it ended without a cancel
    assert await sessions.get_agent_snapshot("s-1") == before

    # With no turn active, steering with text queues the message: it starts a turn.
    assert await sessions.steer_user_message("s-1", text="queued")
    after = await snapshot_when(sessions, "s-1", turn_done(2))
    assert _user_texts(after, "turn-2") == ["queued"]


async def test_a_cancelled_turn_abandons_its_task_across_a_host_crash(
    engine_factory: Any, state_dir: Path
) -> None:
    """The host dies while ``CancelToolTask`` asks the runner to cancel the task: the
    retry asks again, the call records ``outcome_unknown`` once, the turn ends cancelled."""
    flow = build_flow(
        state_dir,
        {"job": [Reply(calls=[Call("t1", "job")]), Reply()]},
        {"job": "task", "cancel_tool_task": "gate"},
        options=OPTIONS,
        runner_class=CancellingTaskRunner,
    )
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("s-1", "job")
    asked = await snapshot_when(sessions, "s-1", has_interrupt, description="the task's question")
    assert asked.pending_interrupts[0].question == "Proceed?"

    assert await sessions.cancel_turn("s-1", "turn-1")
    await FileGate(state_dir, "cancel-1").wait_until_reached(timeout=120)
    await kill_flow_actor(engine, "s-1")
    FileGate(state_dir, "cancel-2").release()

    done = await snapshot_when(sessions, "s-1", _no_turn, timeout=120, description="cancelled")
    assert done.state is not None and done.state.last_turn_error is None
    assert [
        entry.split("/")[:2] for entry in InvocationLog(state_dir / "cancel.log").entries()
    ] == [
        ["job-1", "1"],
        ["job-1", "2"],
    ]
    events = await read_events(sessions, "s-1", until_type=AgentEventType.TURN_CANCELLED)
    finished = [e.payload["status"] for e in events if e.type is AgentEventType.TOOL_CALL_FINISHED]
    assert finished == [AgentToolCallStatus.OUTCOME_UNKNOWN]
    assert InvocationLog(state_dir / "model.log").entries() == ["turn-1/0/1"]
    FileGate(state_dir, "cancel-1").release()


async def test_a_host_killed_right_after_the_cancel_finishes_it_on_restart(
    engine_factory: Any, state_dir: Path
) -> None:
    """The cancel committed, then the host died: the cancelled model call is not run
    again, and the restarted host ends the turn cancelled, once."""
    script = {"think": [Reply(model_gate="think")], "again": [Reply()]}
    flow = build_flow(state_dir, script, options=OPTIONS)
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("s-1", "think")
    await FileGate(state_dir, "model-think").wait_until_reached(timeout=120)
    assert await sessions.cancel_turn("s-1", "turn-1")
    await kill_flow_actor(engine, "s-1")

    done = await snapshot_when(sessions, "s-1", _no_turn, timeout=120, description="cancelled")
    assert done.state is not None and done.state.turn_count == 1
    events = await read_events(sessions, "s-1", until_type=AgentEventType.TURN_CANCELLED)
    assert [e.type for e in events].count(AgentEventType.TURN_CANCELLED) == 1
    assert InvocationLog(state_dir / "model.log").entries() == ["turn-1/0/1"]
    FileGate(state_dir, "model-think").release()
    assert await sessions.send_user_message("s-1", "again")
    await snapshot_when(sessions, "s-1", turn_done(2), timeout=120)


async def test_ordered_writes_run_one_at_a_time_and_stop_after_a_failure(
    engine_factory: Any, state_dir: Path
) -> None:
    """Three ordered writes where the second fails: the third is skipped, the reads
    ran in parallel with the first, and the second's approval came only when it
    started; no model call came between the writes."""
    calls = [
        Call("r1", "lookup"),
        Call("w1", "write1", ordered=True),
        Call("w2", "write2", ordered=True),
        Call("w3", "write3", ordered=True),
        Call("r2", "lookup"),
    ]
    policies = {
        **POLICIES,
        "write1": ToolPolicy(ToolEffect.IDEMPOTENT_WRITE, requires_approval=False),
        "write2": ToolPolicy(ToolEffect.IDEMPOTENT_WRITE, requires_approval=True),
        "write3": ToolPolicy(ToolEffect.IDEMPOTENT_WRITE, requires_approval=False),
    }
    flow = build_flow(
        state_dir,
        {"write": [Reply(calls=calls), Reply()]},
        {"write1": "gate", "write2": "fail"},
        options=AgentSessionOptions(tool_policies=policies),
    )
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("s-1", "write")
    await FileGate(state_dir, "write1-1").wait_until_reached(timeout=120)

    def reads_done(snapshot: AgentSnapshot) -> bool:
        done = {r.tool_call_id for r in snapshot.tool_calls if r.is_final}
        return {"r1", "r2"} <= done

    running = await snapshot_when(sessions, "s-1", reads_done, description="the reads")
    queued = {r.tool_call_id: r for r in running.tool_calls}
    assert queued["w2"].write_queued and queued["w3"].write_queued
    assert running.pending_interrupts == ()  # w2 asks only once it starts
    FileGate(state_dir, "write1-1").release()

    asked = await snapshot_when(sessions, "s-1", has_interrupt, description="w2's approval")
    assert [i.tool_call_id for i in asked.pending_interrupts] == ["w2"]
    assert await sessions.resolve_interrupt("s-1", "w2", approved=True)
    done = await snapshot_when(sessions, "s-1", turn_done(1))

    assert done.messages[-1].text == "; ".join(
        [
            "lookup=echo {}",
            "write1=write1 done",
            "write2=The tool call failed: write2 refused",
            f"write3=The tool call failed: {TOOL_CALL_NOT_RUN_ERROR_PREFIX}: "
            f"{TOOL_CALL_SKIPPED_AFTER_WRITE_DETAIL}",
            "lookup=echo {}",
        ]
    )
    assert InvocationLog(state_dir / "write3.log").entries() == []
    assert InvocationLog(state_dir / "model.log").entries() == ["turn-1/0/1", "turn-1/1/1"]


async def test_a_steer_cancels_queued_writes(engine_factory: Any, state_dir: Path) -> None:
    calls = [Call("w1", "write1", ordered=True), Call("w2", "write2", ordered=True)]
    policies = {
        "write1": ToolPolicy(ToolEffect.IDEMPOTENT_WRITE, requires_approval=False),
        "write2": ToolPolicy(ToolEffect.IDEMPOTENT_WRITE, requires_approval=False),
    }
    flow = build_flow(
        state_dir,
        {"write": [Reply(calls=calls), Reply()], "stop": [Reply()]},
        {"write1": "gate"},
        options=AgentSessionOptions(tool_policies=policies),
    )
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("s-1", "write")
    await FileGate(state_dir, "write1-1").wait_until_reached(timeout=120)
    assert await sessions.steer_user_message("s-1", text="stop")
    FileGate(state_dir, "write1-1").release()
    done = await snapshot_when(sessions, "s-1", turn_done(2))
    assert InvocationLog(state_dir / "write2.log").entries() == []
    note = [m.text or "" for m in done.messages if m.turn_id == "turn-1"][-1]
    assert "write1" in note and "superseded_by_steered_user_message" in note
