"""A time-skipping engine on real Ray and SQLite: ``FlowEngine.advance_clock`` moves
the clock of the driver, the hosts, the scheduler and the executors, so a durable
wait of most of a year and an approval deadline of days come due in milliseconds,
also for a session that no process holds (the scheduler wakes it)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from dex_agents_ray import (
    AgentSessionClient,
    AgentSessionOptions,
    AgentToolCallStatus,
    BuiltInTool,
    ToolEffect,
    ToolPolicy,
)
from dex_agents_ray.session._records import APPROVAL_DEADLINE_PASSED
from tests.engine.polling import until
from tests.session.agents import Call, Reply, build_flow
from tests.session.polling import snapshot_when, turn_done

YEAR = timedelta(days=300)
OPTIONS = AgentSessionOptions(
    tool_policies={"refund": ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE, requires_approval=True)},
    built_in_tools=frozenset({BuiltInTool.DURABLE_WAIT}),
    max_durable_wait=timedelta(days=400),
    interrupt_deadline=timedelta(days=2),
)


def _waiting(kind: AgentToolCallStatus) -> Any:
    return lambda s: any(r.status is kind for r in s.tool_calls)


async def test_a_year_long_wait_and_a_deadline_come_due_when_the_clock_moves(
    engine_factory: Any, state_dir: Path
) -> None:
    wait = Call(
        "w1", "durable_wait", {"duration_seconds": int(YEAR.total_seconds()), "reason": "renewal"}
    )
    flow = build_flow(
        state_dir, {"later": [Reply(calls=[wait, Call("c1", "refund")]), Reply()]}, options=OPTIONS
    )
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("s-1", "later")
    await snapshot_when(sessions, "s-1", _waiting(AgentToolCallStatus.WAITING_FOR_TIMER))
    await snapshot_when(sessions, "s-1", lambda s: bool(s.pending_interrupts))

    # Three days on: the approval's deadline passed, the wait still holds.
    await engine.advance_clock(timedelta(days=3))
    expired = await snapshot_when(
        sessions, "s-1", lambda s: any(r.tool_call_id == "c1" and r.is_final for r in s.tool_calls)
    )
    assert not expired.pending_interrupts
    assert [r.status for r in expired.tool_calls if r.tool_call_id == "c1"] == [
        AgentToolCallStatus.REJECTED
    ]
    assert expired.state is not None and expired.state.active_turn_id == "turn-1"

    await engine.advance_clock(YEAR)
    done = await snapshot_when(sessions, "s-1", turn_done(1))
    answer = done.messages[-1].text or ""
    assert f'"waited_seconds":{int(YEAR.total_seconds())}' in answer
    assert APPROVAL_DEADLINE_PASSED in answer
    with pytest.raises(ValueError, match="never goes back"):
        await engine.advance_clock(timedelta(seconds=-1))


async def test_the_scheduler_wakes_a_passivated_session_when_the_clock_moves(
    engine_factory: Any, state_dir: Path
) -> None:
    wait = Call(
        "w1", "durable_wait", {"duration_seconds": int(YEAR.total_seconds()), "reason": "renewal"}
    )
    flow = build_flow(state_dir, {"later": [Reply(calls=[wait]), Reply()]}, options=OPTIONS)
    engine = await engine_factory([flow], passivate_after=timedelta(seconds=1), shared_hosts=1)
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("s-1", "later")

    async def passivated() -> bool:
        return await engine.store.passivation.passivated_count() == 1

    await until(passivated, "passivation of s-1")
    await engine.advance_clock(YEAR)

    async def awake() -> bool:
        return await engine.store.passivation.passivated_count() == 0

    await until(awake, "the scheduler's wake of s-1")
    done = await snapshot_when(sessions, "s-1", turn_done(1))
    assert "renewal" in (done.messages[-1].text or "")


async def test_events_written_after_the_clock_moves_carry_the_engines_time(
    engine_factory: Any, state_dir: Path
) -> None:
    """A Stream record's time is the engine's clock, as every other time of a run
    is: an event written a year on reads a year on, from the long poll's tail and
    from the store alike."""

    flow = build_flow(state_dir, {"hello": [Reply()]}, options=OPTIONS)
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await engine.advance_clock(YEAR)
    await sessions.start_session("s-3", "hello")

    token, events = "", []
    while not events or events[-1].value.type.value != "turn_completed":
        message = await sessions.read_event("s-3", token, timeout=60)
        token = message.resume_token
        events.append(message)
    page = await engine.client.list_stream_messages("s-3", flow.agent_events, 1000)
    stored = page.messages  # read from the store, newest first

    floor = datetime.now(UTC) + YEAR - timedelta(days=1)
    assert all(m.created_time >= floor for m in events), [m.created_time for m in events]
    assert len(stored) == len(events)
    assert all(m.created_time >= floor for m in stored), [m.created_time for m in stored]


async def test_an_engine_counts_its_clock_from_its_own_store(
    engine_factory: Any, state_dir: Path, tmp_path: Path, namespace: str
) -> None:
    """A driver that opened an engine whose clock moved a year, then opens another
    store, reads that store's time: the second engine's day is a day, not a year
    and a day (the driver's clock is the store's it opened last)."""
    from dex_agents_ray.engine import utc_now

    flow = build_flow(state_dir, {"hello": [Reply()]}, options=OPTIONS)
    first = await engine_factory([flow])
    assert await first.advance_clock(YEAR) == YEAR.total_seconds()
    await first.shutdown(stop_hosts=True)

    second = await engine_factory(
        [flow], store=tmp_path / "second.db", namespace=f"{namespace}-second"
    )
    assert abs((utc_now() - datetime.now(UTC)).total_seconds()) < 60
    assert await second.advance_clock(timedelta(days=1)) == 86_400
