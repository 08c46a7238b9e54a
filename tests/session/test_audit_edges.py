"""Edges of the built-in tools and tool tasks on real Ray and SQLite, each against the
spec's words: a question whose deadline passes ("`interrupt_deadline` applies
(`question deadline passed`)", and a task's question goes back to the task as
``DEADLINE_PASSED``), the ``cleared`` plan, invalid todos that fail and change
nothing, and ``PollToolTask``'s interval "rounded up to whole seconds from 1 to a
day". The engine's clock moves for the deadline and the day-long interval."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from dex_agents_ray import (
    AgentEventType,
    AgentSessionClient,
    AgentSessionOptions,
    AgentSnapshot,
    AgentToolCall,
    AgentToolCallStatus,
    BuiltInTool,
    PlanStatus,
    PlanTodo,
    QuestionResolution,
    TodoStatus,
    ToolEffect,
    ToolPolicy,
)
from dex_agents_ray.testing import InvocationLog
from tests.session.agents import Call, Reply, TaskRunner, build_flow
from tests.session.interval_agents import IntervalTaskRunner
from tests.session.polling import eventually, read_events, snapshot_when, turn_done

DEADLINE_PASSED = "question deadline passed"
DAY = timedelta(days=1)


def _record(snapshot: AgentSnapshot, tool_call_id: str) -> AgentToolCall:
    return next(r for r in snapshot.tool_calls if r.tool_call_id == tool_call_id)


def _answers(snapshot: AgentSnapshot) -> list[str]:
    return (snapshot.messages[-1].text or "").split("; ")


async def test_questions_whose_deadline_passes(engine_factory: Any, state_dir: Path) -> None:
    calls = [Call("q1", "ask_user", {"question": "Color?"}), Call("p1", "pick"), Call("j1", "job")]
    options = AgentSessionOptions(
        tool_policies={"pick": ToolPolicy(ToolEffect.READ), "job": ToolPolicy(ToolEffect.READ)},
        built_in_tools=frozenset({BuiltInTool.ASK_USER}),
        interrupt_deadline=timedelta(days=2),
    )
    flow = build_flow(
        state_dir,
        {"ask": [Reply(calls=calls), Reply()]},
        {"pick": "ask", "job": "task"},
        options=options,
        runner_class=TaskRunner,
    )
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("s-1", "ask")
    asked = await snapshot_when(
        sessions, "s-1", lambda s: len(s.pending_interrupts) == 3, description="three questions"
    )
    ids = {i.interrupt_id for i in asked.pending_interrupts}
    assert ids == {"q1", "p1-input-1", "j1-input-1"}
    assert all(i.deadline is not None for i in asked.pending_interrupts)

    # Past the deadline: every question is withdrawn, and an answer comes too late.
    await engine.advance_clock(timedelta(days=3))
    expired = await snapshot_when(
        sessions, "s-1", lambda s: not s.pending_interrupts, description="deadlines"
    )
    assert not await sessions.answer_question("s-1", "q1", "red")
    assert not await sessions.answer_question("s-1", "j1-input-1", "go")
    # The started task's question does not end its call: the task gets the deadline.
    task = await snapshot_when(
        sessions,
        "s-1",
        lambda s: bool(_record(s, "j1").input_answers),
        description="the task's answer",
    )
    (answer,) = _record(task, "j1").input_answers
    assert (answer.interrupt_id, answer.resolution) == (
        "j1-input-1",
        QuestionResolution.DEADLINE_PASSED,
    )
    assert answer.answer is None and _record(task, "j1").task_id == "job-1"
    assert _record(expired, "q1").status is AgentToolCallStatus.REJECTED
    (state_dir / "task-done").write_text("yes")

    done = await snapshot_when(sessions, "s-1", turn_done(1))
    assert done.state is not None and done.state.last_turn_error is None
    q1, p1, j1 = _answers(done)
    assert q1.startswith("ask_user=") and DEADLINE_PASSED in q1
    assert p1.startswith("pick=") and DEADLINE_PASSED in p1
    assert j1 == "job=task job-1 finished after None"
    assert [e.split("/")[0] for e in InvocationLog(state_dir / "pick.log").entries()] == ["p1"]
    events = await read_events(sessions, "s-1", until_type=AgentEventType.TURN_COMPLETED)
    resolved = {
        e.payload["interrupt_id"]: e.payload
        for e in events
        if e.type is AgentEventType.INTERRUPT_RESOLVED
    }
    assert set(resolved) == {"q1", "p1-input-1", "j1-input-1"}
    assert all(p["approved"] is False and not p["answered"] for p in resolved.values())


async def _timer_set(engine: Any, session_id: str, execution: str) -> None:
    """Wait until ``execution`` waits on its Timer, so a clock move counts for it."""

    async def history() -> list[Any]:
        return list(await engine.client.read_step_history(session_id))

    await eventually(
        history,
        lambda entries: any(
            h.step_execution_id == execution and h.event == "wait_for_completed" for h in entries
        ),
        description=f"{execution}'s Timer",
    )


def _todos(*items: tuple[str, str]) -> dict[str, Any]:
    return {"todos": [{"content": c, "status": s} for c, s in items]}


INVALID_TODOS: dict[str, tuple[dict[str, Any], str]] = {
    "b1": ({"todos": "back up"}, "invalid todos: todos must be a list"),
    "b2": ({}, "invalid todos: todos must be a list"),
    "b3": ({"todos": ["back up"]}, "invalid todos: todos[0] must be an object"),
    "b4": (
        _todos(("back up", "pending"), ("  ", "pending")),
        "invalid todos: todos[1].content must be a non-empty string",
    ),
    "b5": (
        _todos(("back up", "done")),
        "invalid todos: todos[0].status must be pending, in_progress or completed",
    ),
}


async def test_invalid_todos_change_nothing_and_no_tasks_clear_the_plan(
    engine_factory: Any, state_dir: Path
) -> None:
    first = _todos(("back up", "completed"), ("migrate", "in_progress"))
    script = {
        # One call per response: two in one response would fail for that reason instead.
        "plan": [
            Reply(calls=[Call("t1", "write_todos", first)]),
            *(Reply(calls=[Call(i, "write_todos", a)]) for i, (a, _) in INVALID_TODOS.items()),
            Reply(),
        ],
        "clear": [Reply(calls=[Call("t2", "write_todos", {"todos": []})]), Reply()],
    }
    options = AgentSessionOptions(built_in_tools=frozenset({BuiltInTool.WRITE_TODOS}))
    flow = build_flow(state_dir, script, options=options)
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("s-2", "plan")
    planned = await snapshot_when(sessions, "s-2", turn_done(1))

    assert planned.plan is not None
    assert (planned.plan.revision, planned.plan.status) == (1, PlanStatus.ACTIVE)
    assert planned.plan.todos == (
        PlanTodo(content="back up", status=TodoStatus.COMPLETED),
        PlanTodo(content="migrate", status=TodoStatus.IN_PROGRESS),
    )
    answers = _answers(planned)
    assert answers[0] == 'write_todos={"status":"updated","revision":1,"task_count":2}'
    for answer, (tool_call_id, (_, reason)) in zip(answers[1:], INVALID_TODOS.items(), strict=True):
        assert answer == f"write_todos=The tool call failed: {reason}", tool_call_id

    assert await sessions.send_user_message("s-2", "clear")
    cleared = await snapshot_when(sessions, "s-2", turn_done(2))
    assert cleared.plan is not None
    assert (cleared.plan.revision, cleared.plan.status) == (2, PlanStatus.CLEARED)
    assert cleared.plan.todos == ()
    assert _answers(cleared) == ['write_todos={"status":"cleared","revision":2}']

    updates = []
    token, completed = "", 0
    while completed < 2:  # every event of both turns
        message = await sessions.read_event("s-2", token, timeout=30)
        token, event = message.resume_token, message.value
        completed += event.type is AgentEventType.TURN_COMPLETED
        if event.type is AgentEventType.PLAN_UPDATED:
            updates.append(event.payload)
    assert updates == [
        {"revision": 1, "status": "active", "task_count": 2},
        {"revision": 2, "status": "cleared", "task_count": 0},
    ]


async def test_poll_intervals_are_whole_seconds_from_one_to_a_day(
    engine_factory: Any, state_dir: Path
) -> None:
    calls = [
        Call("c1", "job", {"start": 1e9, "pending": [3600.2, -5]}),
        Call("c2", "job", {"start": "soon", "pending": []}),
    ]
    options = AgentSessionOptions(tool_policies={"job": ToolPolicy(ToolEffect.READ)})
    flow = build_flow(
        state_dir,
        {"go": [Reply(calls=calls), Reply()]},
        {"job": "interval-task"},
        options=options,
        runner_class=IntervalTaskRunner,
    )
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("s-3", "go")
    polls = InvocationLog(state_dir / "poll.log")

    def interval(seconds: int, count: int) -> Any:
        def check(snapshot: AgentSnapshot) -> bool:
            records = [r for r in snapshot.tool_calls if r.tool_call_id == "c1"]
            return (
                bool(records)
                and records[0].task_poll_interval_seconds == seconds
                and polls.count("c1") == count
            )

        return check

    # An interval that is not a number fails the call, naming what is wrong.
    refused = await snapshot_when(
        sessions,
        "s-3",
        lambda s: any(r.status is AgentToolCallStatus.FAILED for r in s.tool_calls),
        description="the refused interval",
    )
    failed = _record(refused, "c2")
    assert failed.task_id is None
    assert "poll_interval_seconds must be a number" in (failed.error or "")
    # 1e9 seconds waits one day, not more: the poll comes when the clock passes it.
    started = await snapshot_when(sessions, "s-3", interval(86_400, 0), description="a day")
    assert _record(started, "c1").status is AgentToolCallStatus.WAITING_FOR_TASK
    await _timer_set(engine, "s-3", "PollToolTask-1")
    await engine.advance_clock(DAY)
    await snapshot_when(sessions, "s-3", interval(3_601, 1), description="3600.2 s rounded up")
    await _timer_set(engine, "s-3", "PollToolTask-2")
    await engine.advance_clock(timedelta(seconds=3_601))
    # -5 seconds polls after 1 second: the next poll needs no clock move.
    done = await snapshot_when(sessions, "s-3", turn_done(1))
    assert polls.count("c1") == 3
    c1, c2 = _answers(done)
    assert c1 == "job=job-c1 done after 3 polls"
    assert c2.startswith("job=The tool call failed") and "poll_interval_seconds" in c2

    # Each poll's Timer, as the engine's clock saw it: a day, 3601 s, then 1 s.
    history = await engine.client.read_step_history("s-3")

    def waited(execution: str) -> float:
        times: dict[str, datetime] = {
            h.event: h.at for h in history if h.step_execution_id == execution
        }
        return (times["attempt_started"] - times["step_scheduled"]).total_seconds()

    assert waited("PollToolTask-1") >= DAY.total_seconds()
    assert 3_601 <= waited("PollToolTask-2") < DAY.total_seconds()
    assert 1 <= waited("PollToolTask-3") < 3_601
