"""A turn's end events against a host kill, on real Ray and SQLite: a Step's
events that outlived their linger must ride in its result commit, not in an
append of their own that lands after it (a slow append: a store retry, a busy
pool). The host is killed once the turn's end is durable while any append of
the run waits at the ``GATE_BEFORE_STREAM_APPEND_ENV`` gate, and the Stream
must still end the turn exactly once."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from dex_agents_ray import (
    AgentEvent,
    AgentEventType,
    AgentSessionClient,
    AgentSessionOptions,
    ToolEffect,
    ToolPolicy,
)
from dex_agents_ray.testing import kill_flow_actor
from tests.session.agents import Call, Reply, build_flow
from tests.session.polling import has_interrupt, snapshot_when, turn_done

_ENDS = {
    AgentEventType.TURN_COMPLETED,
    AgentEventType.TURN_FAILED,
    AgentEventType.TURN_CANCELLED,
    AgentEventType.TURN_STEERED,
}


async def _events_through(
    sessions: AgentSessionClient, session_id: str, turn_id: str
) -> list[AgentEvent]:
    """Every event from the Stream's start through ``turn_id``'s end event."""
    events: list[AgentEvent] = []
    token = ""
    while True:
        message = await sessions.read_event(session_id, token, timeout=60)
        events.append(message.value)
        token = message.resume_token
        if message.value.type in _ENDS and message.value.turn_id == turn_id:
            return events


async def test_a_turn_end_committed_before_a_host_kill_stays_in_the_stream(
    engine_factory: Any, state_dir: Path
) -> None:
    await check_turn_end_survives_a_host_kill(engine_factory, state_dir)


async def check_turn_end_survives_a_host_kill(
    engine_factory: Any, state_dir: Path, **engine_options: Any
) -> None:
    """The test above on the store ``engine_options`` name (SQLite by default)."""
    options = AgentSessionOptions(
        tool_policies={"refund": ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE)}
    )
    script = {
        # The reply's events outlive the busy linger (the loop stalls), and any
        # append of its own then waits at the gate.
        "go": [Reply(append_gate="append", block_loop_seconds=0.2)],
        "refund": [Reply(calls=[Call("c1", "refund")]), Reply()],
    }
    flow = build_flow(state_dir, script, options=options)
    engine = await engine_factory([flow], **engine_options)
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("end-kill", "go")
    await snapshot_when(sessions, "end-kill", turn_done(1), timeout=120)
    await kill_flow_actor(engine, "end-kill")

    assert await sessions.send_user_message("end-kill", "refund")
    await snapshot_when(sessions, "end-kill", has_interrupt, timeout=120)
    assert await sessions.resolve_interrupt("end-kill", "c1", approved=True)
    done = await snapshot_when(sessions, "end-kill", turn_done(2), timeout=120)
    events = await _events_through(sessions, "end-kill", "turn-2")

    assert done.state is not None and done.state.turn_count == 2
    ends = Counter((e.turn_id, e.type) for e in events if e.type in _ENDS)
    assert ends == {
        ("turn-1", AgentEventType.TURN_COMPLETED): 1,
        ("turn-2", AgentEventType.TURN_COMPLETED): 1,
    }
    first = [e.type for e in events if e.turn_id == "turn-1"]
    # The committed model Step's events, once each and in order.
    assert first[-3:] == [
        AgentEventType.TEXT_DELTA,
        AgentEventType.USAGE_RECORDED,
        AgentEventType.TURN_COMPLETED,
    ]
    assert first.count(AgentEventType.TEXT_DELTA) == 1
    resolved = [e for e in events if e.type is AgentEventType.INTERRUPT_RESOLVED]
    assert len(resolved) == 1
