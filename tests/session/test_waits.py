"""Built-in tools and tool questions: ask_user, durable_wait, write_todos,
ToolInputRequested, tool tasks, and interrupt deadlines."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

from dex_agents_ray import (
    MISSING_TOOL_TASK_POLLER,
    AgentEventType,
    AgentSessionClient,
    AgentSessionOptions,
    AgentToolCallStatus,
    BuiltInTool,
    PlanStatus,
    ToolEffect,
    ToolPolicy,
)
from dex_agents_ray.testing import InvocationLog
from tests.session.agents import Call, Reply, TaskRunner, build_flow
from tests.session.polling import has_interrupt, read_events, snapshot_when, turn_done

BUILT_INS = frozenset({BuiltInTool.ASK_USER, BuiltInTool.DURABLE_WAIT, BuiltInTool.WRITE_TODOS})


async def test_ask_user_answers_and_declines(engine_factory: Any, state_dir: Path) -> None:
    calls = [
        Call("q1", "ask_user", {"question": "Color?", "choices": ["red", "blue"]}),
        Call("q2", "ask_user", {"question": "Why?", "choices": None}),
        Call("q3", "ask_user", {"choices": ["x"]}),  # invalid: no question
    ]
    flow = build_flow(
        state_dir,
        {"ask": [Reply(calls=calls), Reply()]},
        options=AgentSessionOptions(built_in_tools=BUILT_INS),
    )
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("s-1", "ask")
    waiting = await snapshot_when(
        sessions, "s-1", lambda s: len(s.pending_interrupts) == 2, description="two questions"
    )
    questions = {i.interrupt_id: i for i in waiting.pending_interrupts}
    assert questions["q1"].kind.value == "question"
    assert questions["q1"].choices == ("red", "blue") and not questions["q1"].allows_free_text
    found = await engine.client.search_flows('ActiveStepTypes = "AwaitQuestionAnswer"', 50)
    assert [entry.flow_id for entry in found.flows] == ["s-1"]

    assert not await sessions.answer_question("s-1", "q1", "green")  # outside choices
    assert not await sessions.answer_question("s-1", "q1", "   ")  # blank
    assert not await sessions.answer_question("s-1", "nope", "red")  # unknown
    assert not await sessions.resolve_interrupt("s-1", "q1", approved=True)  # not a question op
    assert await sessions.get_agent_snapshot("s-1") == waiting  # nothing changed
    assert await sessions.answer_question("s-1", "q1", "red")
    assert not await sessions.answer_question("s-1", "q1", "blue")  # second answer
    assert await sessions.resolve_interrupt("s-1", "q2", approved=False)  # decline
    done = await snapshot_when(sessions, "s-1", turn_done(1))

    assert done.messages[-1].text == (
        'ask_user={"status":"answered","answer":"red"}; '
        "ask_user=The user declined to answer.; "
        "ask_user=The tool call failed: invalid ask_user arguments: "
        "question must be a non-empty string"
    )
    events = await read_events(sessions, "s-1", until_type=AgentEventType.TURN_COMPLETED)
    resolved = [e.payload for e in events if e.type is AgentEventType.INTERRUPT_RESOLVED]
    assert {(p["interrupt_id"], p["approved"], p["answered"]) for p in resolved} == {
        ("q1", True, True),
        ("q2", False, False),
    }


async def test_durable_wait_holds_a_timer_and_write_todos_updates_the_plan(
    engine_factory: Any, state_dir: Path
) -> None:
    todos = {
        "todos": [
            {"content": "check", "status": "completed"},
            {"content": "fix", "status": "pending"},
        ]
    }
    calls = [
        Call("w1", "durable_wait", {"duration_seconds": 1, "reason": "cool down"}),
        Call("w2", "durable_wait", {"duration_seconds": 0, "reason": "too short"}),
        Call("p1", "write_todos", todos),
    ]
    script = {
        "wait": [Reply(calls=calls), Reply()],
        "twice": [
            Reply(calls=[Call("p2", "write_todos", todos), Call("p3", "write_todos", todos)]),
            Reply(),
        ],
    }
    flow = build_flow(state_dir, script, options=AgentSessionOptions(built_in_tools=BUILT_INS))
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("s-2", "wait")
    done = await snapshot_when(sessions, "s-2", turn_done(1))

    parts = (done.messages[-1].text or "").split("; ")
    assert parts[0] == 'durable_wait={"status":"completed","waited_seconds":1,"reason":"cool down"}'
    assert parts[1].startswith("durable_wait=The tool call failed: invalid durable_wait arguments")
    assert parts[2] == 'write_todos={"status":"updated","revision":1,"task_count":2}'
    assert done.plan is not None
    assert (done.plan.revision, done.plan.status) == (1, PlanStatus.ACTIVE)
    history = await engine.client.read_step_history("s-2")
    assert any(
        h.step_execution_id == "AwaitTimer-1" and h.event == "step_completed" for h in history
    )
    events = await read_events(sessions, "s-2", until_type=AgentEventType.TURN_COMPLETED)
    timer = next(e for e in events if e.type is AgentEventType.TIMER_STARTED)
    assert timer.payload["tool_call_id"] == "w1" and timer.payload["reason"] == "cool down"
    plan = next(e for e in events if e.type is AgentEventType.PLAN_UPDATED)
    assert plan.payload == {"revision": 1, "status": "active", "task_count": 2}

    assert await sessions.send_user_message("s-2", "twice")
    twice = await snapshot_when(sessions, "s-2", turn_done(2))
    assert (twice.messages[-1].text or "").count("write_todos was called more than once") == 2
    assert twice.plan is not None and twice.plan.revision == 1


async def test_a_tool_asks_a_question_then_runs_with_the_answer(
    engine_factory: Any, state_dir: Path
) -> None:
    flow = build_flow(
        state_dir,
        {
            "pick": [Reply(calls=[Call("t1", "picker")]), Reply()],
            "clash": [Reply(calls=[Call("t1", "picker"), Call("t1-input-1", "lookup")]), Reply()],
        },
        {"picker": "ask"},
        options=AgentSessionOptions(
            tool_policies={
                "picker": ToolPolicy(ToolEffect.READ),
                "lookup": ToolPolicy(ToolEffect.READ),
            }
        ),
    )
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("s-3", "pick")
    waiting = await snapshot_when(sessions, "s-3", has_interrupt)
    question = waiting.pending_interrupts[0]
    assert (question.interrupt_id, question.question) == ("t1-input-1", "Which account?")
    assert waiting.tool_calls[0].status is AgentToolCallStatus.AWAITING_ANSWER

    assert not await sessions.answer_question("s-3", "t1-input-1", "c")
    assert await sessions.answer_question("s-3", "t1-input-1", "b")
    done = await snapshot_when(sessions, "s-3", turn_done(1))

    assert done.messages[-1].text == "picker=account b (answered, q1)"
    assert len(InvocationLog(state_dir / "picker.log").entries()) == 2

    # A question ID that another call of the turn already uses fails the asking call.
    assert await sessions.send_user_message("s-3", "clash")
    clash = await snapshot_when(sessions, "s-3", turn_done(2))
    assert clash.messages[-1].text == (
        "picker=The tool call failed: the tool's question ID t1-input-1 is already used "
        "in this turn; lookup=echo {}"
    )


async def test_a_tool_task_is_polled_asks_and_finishes(
    engine_factory: Any, state_dir: Path
) -> None:
    flow = build_flow(
        state_dir,
        {"report": [Reply(calls=[Call("r1", "report")]), Reply()]},
        {"report": "task"},
        options=AgentSessionOptions(
            tool_policies={"report": ToolPolicy(ToolEffect.IDEMPOTENT_WRITE)}
        ),
        runner_class=TaskRunner,
    )
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("s-4", "report")
    waiting = await snapshot_when(sessions, "s-4", has_interrupt)
    assert waiting.pending_interrupts[0].interrupt_id == "r1-input-1"
    record = waiting.tool_calls[0]
    assert record.task_id == "job-1" and record.status is AgentToolCallStatus.AWAITING_ANSWER

    assert await sessions.answer_question("s-4", "r1-input-1", "go")
    polls = InvocationLog(state_dir / "poll.log")
    await snapshot_when(
        sessions, "s-4", lambda _: len(polls.entries()) >= 3, description="pending polls"
    )
    (state_dir / "task-done").write_text("yes")
    done = await snapshot_when(sessions, "s-4", turn_done(1))

    assert done.messages[-1].text == "report=task job-1 finished after go"
    entries = polls.entries()
    assert entries[0] == "job-1/None/None"
    assert entries[1] == "job-1/ask-1/go"  # the answer, handed over once
    assert entries[2] == "job-1/ask-1/None"
    events = await read_events(sessions, "s-4", until_type=AgentEventType.TURN_COMPLETED)
    started = next(e for e in events if e.type is AgentEventType.TOOL_TASK_STARTED)
    assert started.payload == {"tool_call_id": "r1", "tool_name": "report", "task_id": "job-1"}


async def test_a_task_without_a_poller_and_an_expired_approval(
    engine_factory: Any, state_dir: Path
) -> None:
    calls = [Call("r1", "report"), Call("r2", "wipe")]
    options = AgentSessionOptions(
        tool_policies={
            "report": ToolPolicy(ToolEffect.READ),
            "wipe": ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE),
        },
        interrupt_deadline=timedelta(seconds=1),
    )
    flow = build_flow(
        state_dir, {"go": [Reply(calls=calls), Reply()]}, {"report": "task"}, options=options
    )
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("s-5", "go")
    done = await snapshot_when(sessions, "s-5", turn_done(1))

    parts = (done.messages[-1].text or "").split("; ")
    assert parts[0] == f"report=The tool call failed: {MISSING_TOOL_TASK_POLLER}"
    assert parts[1] == "wipe=The user rejected this tool call. Reason: approval deadline passed"
    assert not await sessions.resolve_interrupt("s-5", "r2", approved=True)
    assert InvocationLog(state_dir / "wipe.log").entries() == []
    assert json.loads(json.dumps(done.state.turn_count if done.state else 0)) == 1
