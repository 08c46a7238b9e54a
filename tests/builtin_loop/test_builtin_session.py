"""A whole built-in loop turn with a function tool, on real Ray and SQLite."""

from __future__ import annotations

import asyncio
from typing import Any

from dex_agents_ray import AgentSessionClient, AgentSnapshot
from dex_agents_ray.builtin_loop import BuiltinLoopAgentRunner
from tests.builtin_loop.agents import build_flow


async def first_turn_done(sessions: AgentSessionClient, session_id: str) -> AgentSnapshot:
    """Poll the snapshot with a deadline until the first turn ended."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while True:
        snapshot = await sessions.get_agent_snapshot(session_id)
        state = snapshot.state
        if state is not None and state.turn_count >= 1 and state.active_turn_id is None:
            return snapshot
        assert loop.time() < deadline, f"the first turn did not end; last: {snapshot!r}"
        await asyncio.sleep(0.05)


async def test_a_turn_calls_a_function_tool_and_answers(engine_factory: Any) -> None:
    flow = build_flow()
    assert isinstance(flow.runner, BuiltinLoopAgentRunner)
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)

    await sessions.start_session("order-1", "Where is A1?")
    snapshot = await first_turn_done(sessions, "order-1")

    assert snapshot.state is not None and snapshot.state.last_turn_error is None
    output = '{"order_id": "A1", "status": "shipped", "key": "order-1/turn-1/call-1"}'
    assert [(m.role.value, m.text, m.tool_output) for m in snapshot.messages] == [
        ("user", "Where is A1?", None),
        ("assistant", None, None),
        ("tool", None, output),
        ("assistant", output, None),
    ]
    assert snapshot.messages[1].tool_name == "lookup_order"
    assert snapshot.usage.model_calls == 2
