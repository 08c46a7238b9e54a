"""Plan mode on the built-in loop, on real Ray and SQLite: a planning turn offers only
``write_todos``, and every model call shows the plan note before the turn's items."""

from __future__ import annotations

from typing import Any

from dex_agents_ray import AgentSessionClient, PlanStatus
from tests.builtin_loop.agents import build_plan_flow
from tests.session.polling import snapshot_when, turn_done


async def test_a_planning_turn_offers_only_write_todos_and_sees_the_plan(
    engine_factory: Any,
) -> None:
    flow = build_plan_flow()
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("p-1", "")
    await snapshot_when(sessions, "p-1", lambda s: s.state is not None)

    assert await sessions.send_user_message("p-1", "plan a backup", plan_mode=True)
    planned = await snapshot_when(sessions, "p-1", turn_done(1))
    assert planned.plan is not None and planned.plan.status is PlanStatus.DRAFT
    assert planned.messages[-1].text == (
        "offered=['write_todos']; note=[Dex] The current plan (revision 1, draft):"
    )

    # The approved plan runs with every tool, and the note shows it as active.
    assert await sessions.execute_plan("p-1", 1)
    executed = await snapshot_when(sessions, "p-1", turn_done(2))
    assert executed.plan is not None and executed.plan.status is PlanStatus.ACTIVE
    assert (executed.messages[-1].text or "").startswith("offered=['lookup_order', 'write_todos']")
