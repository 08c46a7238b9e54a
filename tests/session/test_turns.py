"""Turns end to end on real Ray and SQLite: answers, messages, events, usage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dex_agents_ray import AgentEventType, AgentSessionClient, AgentStatus
from tests.session.agents import Reply, build_flow
from tests.session.polling import read_events, snapshot_when, turn_done


async def test_a_turn_answers_stores_messages_and_writes_events(
    engine_factory: Any, state_dir: Path
) -> None:
    flow = build_flow(state_dir, {"hello": [Reply()]})
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)

    await sessions.start_session("s-1", "hello")
    snapshot = await snapshot_when(sessions, "s-1", turn_done(1))

    assert snapshot.state is not None
    assert snapshot.state.status is AgentStatus.WAITING_FOR_USER_MESSAGE
    assert snapshot.state.last_turn_error is None
    assert [(m.sequence, m.role.value, m.text) for m in snapshot.messages] == [
        (1, "user", "hello"),
        (2, "assistant", "no tools"),
    ]
    assert snapshot.usage.model_calls == 1 and snapshot.usage.input_tokens == 10
    events = await read_events(sessions, "s-1", until_type=AgentEventType.TURN_COMPLETED)
    assert [e.type.value for e in events] == [
        "turn_started",
        "text_delta",
        "usage_recorded",
        "turn_completed",
    ]
    assert events[0].payload == {"sequence": 1}
    assert {e.turn_id for e in events} == {"turn-1"}
    assert events[0].step_execution_id == "StartAgentSession-1"
    assert events[1].step_execution_id == "RunModel-1" and events[1].attempt == 1
    assert events[2].payload["session"]["model_calls"] == 1
    assert events[3].payload == {"message_count": 2}
