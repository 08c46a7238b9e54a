"""Plans and plan mode on real Ray and SQLite (the spec's "Plans and plan mode"): a
planning turn writes a draft, feedback revises it, ``execute_plan`` approves the
current revision, and the ``executing`` turn keeps the statuses current."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dex_agents_ray import (
    PLANNING_TURN_CALL_REJECTED,
    AgentEventType,
    AgentSessionClient,
    AgentSessionOptions,
    AgentSnapshot,
    BuiltInTool,
    InteractionMode,
    PlanStatus,
    ToolEffect,
    ToolPolicy,
    build_plan_note,
)
from dex_agents_ray.testing import InvocationLog
from tests.session.agents import Call, PlanningRunner, Reply, build_flow
from tests.session.polling import read_events, snapshot_when, turn_done

OPTIONS = AgentSessionOptions(
    tool_policies={"lookup": ToolPolicy(ToolEffect.READ)},
    built_in_tools=frozenset({BuiltInTool.WRITE_TODOS}),
    plan_mode_enabled=True,
)
APPROVED = (
    "[Dex] The user approved plan revision 2. Execute it and keep the task statuses "
    "current with write_todos."
)


def _todos(*items: tuple[str, str]) -> dict[str, Any]:
    return {"todos": [{"content": c, "status": s} for c, s in items]}


def _plan(snapshot: AgentSnapshot) -> tuple[int, PlanStatus] | None:
    plan = snapshot.plan
    return None if plan is None else (plan.revision, plan.status)


async def test_draft_feedback_approval_and_an_executing_turn(
    engine_factory: Any, state_dir: Path
) -> None:
    draft = _todos(("back up", "pending"), ("migrate", "pending"))
    revised = _todos(("back up", "pending"), ("migrate", "pending"), ("verify", "pending"))
    done = _todos(("back up", "completed"), ("migrate", "completed"), ("verify", "completed"))
    script = {
        "plan the migration": [
            Reply(calls=[Call("t1", "write_todos", draft), Call("x1", "lookup")]),
            Reply(),
        ],
        "add a check": [Reply(calls=[Call("t2", "write_todos", revised)]), Reply()],
        APPROVED: [Reply(calls=[Call("l1", "lookup"), Call("t3", "write_todos", done)]), Reply()],
    }
    flow = build_flow(state_dir, script, options=OPTIONS, runner_class=PlanningRunner)
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("s-1", "")
    await snapshot_when(sessions, "s-1", lambda s: s.state is not None)

    assert await sessions.send_user_message("s-1", "plan the migration", plan_mode=True)
    first = await snapshot_when(sessions, "s-1", turn_done(1))
    assert _plan(first) == (1, PlanStatus.DRAFT)
    assert first.state is not None and first.state.interaction_mode is InteractionMode.PLANNING
    answer = first.messages[-1].text or ""
    assert 'write_todos={"status":"updated","revision":1,"task_count":2}' in answer
    assert f"lookup={PLANNING_TURN_CALL_REJECTED}" in answer
    assert InvocationLog(state_dir / "lookup.log").entries() == []  # never ran

    # Feedback on a draft is an ordinary message: another planning turn revises it.
    assert await sessions.send_user_message("s-1", "add a check")
    second = await snapshot_when(sessions, "s-1", turn_done(2))
    assert _plan(second) == (2, PlanStatus.DRAFT)

    assert not await sessions.execute_plan("s-1", 1)  # a replaced revision
    assert not await sessions.execute_plan("s-1", 3)  # no such revision
    assert await sessions.execute_plan("s-1", 2)
    third = await snapshot_when(sessions, "s-1", turn_done(3))
    assert not await sessions.execute_plan("s-1", 2)  # it ran; the plan is completed now
    assert _plan(third) == (3, PlanStatus.COMPLETED)
    assert third.state is not None
    assert third.state.interaction_mode is InteractionMode.EXECUTING
    assert [m.text for m in third.messages if m.turn_id == "turn-3"][0] == APPROVED
    assert len(InvocationLog(state_dir / "lookup.log").entries()) == 1  # executing: every tool

    modes = InvocationLog(state_dir / "modes.log").entries()
    assert modes == [
        "turn-1/planning/None",
        "turn-1/planning/1",
        "turn-2/planning/1",
        "turn-2/planning/2",
        "turn-3/executing/2",
        "turn-3/executing/3",
    ]
    events = await read_events(sessions, "s-1", until_type=AgentEventType.TURN_COMPLETED)
    events += await read_events(sessions, "s-1", until_type=AgentEventType.PLAN_EXECUTION_STARTED)
    updated = [
        (e.payload["revision"], e.payload["status"])
        for e in events
        if e.type is AgentEventType.PLAN_UPDATED
    ]
    assert (2, PlanStatus.ACTIVE) in updated  # the approval marked the draft active
    started = [e for e in events if e.type is AgentEventType.PLAN_EXECUTION_STARTED]
    assert [(e.payload, e.turn_id) for e in started] == [({"revision": 2}, "turn-3")]


async def test_plan_mode_input_that_is_refused(engine_factory: Any, state_dir: Path) -> None:
    with pytest.raises(ValueError, match="write_todos"):
        AgentSessionOptions(plan_mode_enabled=True)
    with pytest.raises(TypeError, match="PlanModeRunner"):
        build_flow(state_dir, {}, options=OPTIONS)  # ScriptedRunner has no plan mode
    flow = build_flow(state_dir, {"hi": [Reply()]}, options=AgentSessionOptions())
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("s-1", "hi")
    before = await snapshot_when(sessions, "s-1", turn_done(1))
    assert not await sessions.send_user_message("s-1", "plan", plan_mode=True)  # off
    assert not await sessions.execute_plan("s-1", 1)  # no plan
    assert await sessions.get_agent_snapshot("s-1") == before


def test_the_plan_note_shows_the_plan_and_what_the_turn_may_do() -> None:
    from dex_agents_ray import AgentPlan, PlanTodo, TodoStatus

    plan = AgentPlan(
        revision=2,
        status=PlanStatus.DRAFT,
        todos=(
            PlanTodo(content="back up", status=TodoStatus.COMPLETED),
            PlanTodo(content="migrate", status=TodoStatus.PENDING),
        ),
    )
    note = build_plan_note(plan, InteractionMode.PLANNING)
    assert note is not None
    assert note.splitlines()[:3] == [
        "[Dex] The current plan (revision 2, draft):",
        "1. [completed] back up",
        "2. [pending] migrate",
    ]
    assert "planning turn" in note
    assert build_plan_note(None, InteractionMode.CHAT) is None
    assert build_plan_note(None, InteractionMode.PLANNING) is not None
    cleared = AgentPlan(revision=3, status=PlanStatus.CLEARED)
    assert build_plan_note(cleared, InteractionMode.CHAT) is None
