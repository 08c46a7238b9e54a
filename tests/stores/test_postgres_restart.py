"""Agent sessions on PostgreSQL while the server crash-restarts (``pg_ctl restart
-m immediate``): no client call fails, no write runs twice, every session finishes."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from dex_agents_ray import AgentSessionClient, AgentSessionOptions, ToolEffect, ToolPolicy
from dex_agents_ray.testing import InvocationLog
from tests.session.agents import Call, Reply, build_flow
from tests.session.polling import has_interrupt, snapshot_when, turn_done
from tests.stores.postgres_server import (
    SERVICES_HINT,
    PostgresServer,
    find_bin_dir,
    running_server,
)

T = TypeVar("T")
SESSIONS = 4


@pytest.fixture
def restartable_server() -> Iterator[PostgresServer]:
    """A server of this test alone: restarting it disturbs no other test."""
    bin_dir = find_bin_dir()
    if bin_dir is None:
        pytest.fail(f"PostgreSQL binaries not found: {SERVICES_HINT}")
    with running_server(bin_dir) as server:
        yield server


def _database(server: PostgresServer) -> str:
    import psycopg

    name = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return server.dsn(name)


async def test_sessions_ride_out_server_crash_restarts(
    engine_factory: Any, state_dir: Path, restartable_server: PostgresServer
) -> None:
    options = AgentSessionOptions(
        tool_policies={
            "look": ToolPolicy(ToolEffect.READ, requires_approval=False),
            "save": ToolPolicy(ToolEffect.IDEMPOTENT_WRITE, requires_approval=False),
            "pay": ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE, requires_approval=True),
            "note": ToolPolicy(ToolEffect.UNCLASSIFIED, requires_approval=False),
        }
    )
    script = {
        "go": [Reply(calls=[Call("c1", "look"), Call("c2", "save")]), Reply()],
        "pay": [Reply(calls=[Call("c3", "pay")]), Reply()],
        "bye": [Reply(calls=[Call("c4", "note")]), Reply()],
    }
    flow = build_flow(state_dir, script, options=options)
    engine = await engine_factory([flow], store=_database(restartable_server))
    sessions = AgentSessionClient(engine.client, flow)
    calls: list[str] = []
    failures: list[str] = []
    progress = asyncio.Event()

    async def call(what: str, operation: Callable[[], Awaitable[T]]) -> T:
        try:
            result = await operation()
        except Exception as error:
            failures.append(f"{what}: {type(error).__name__}: {error}")
            raise
        calls.append(what)
        progress.set()
        return result

    async def session(session_id: str) -> None:
        await call("start", lambda: sessions.start_session(session_id, "go"))
        await snapshot_when(sessions, session_id, turn_done(1), timeout=240)
        await call("send pay", lambda: sessions.send_user_message(session_id, "pay"))
        waiting = await snapshot_when(sessions, session_id, has_interrupt, timeout=240)
        interrupt = waiting.pending_interrupts[0].interrupt_id
        await call(
            "approve", lambda: sessions.resolve_interrupt(session_id, interrupt, approved=True)
        )
        await snapshot_when(sessions, session_id, turn_done(2), timeout=240)
        await call("send bye", lambda: sessions.send_user_message(session_id, "bye"))
        await snapshot_when(sessions, session_id, turn_done(3), timeout=240)

    restarts = 0

    async def crash_server_while_sessions_run() -> None:
        nonlocal restarts
        for threshold in (1, SESSIONS + 1, 3 * SESSIONS):
            while len(calls) < threshold:
                progress.clear()
                await progress.wait()
            await asyncio.to_thread(restartable_server.restart, "immediate")
            restarts += 1

    ids = [f"pg-restart-{i}" for i in range(SESSIONS)]
    crasher = asyncio.create_task(crash_server_while_sessions_run())
    try:
        await asyncio.wait_for(asyncio.gather(*(session(i) for i in ids)), timeout=600)
    finally:
        await asyncio.wait_for(crasher, timeout=120)

    assert failures == []
    assert restarts == 3
    for session_id in ids:
        snapshot = await sessions.get_agent_snapshot(session_id)
        users = [m.text for m in snapshot.messages if m.role.value == "user"]
        assert users == ["go", "pay", "bye"], (session_id, users)
        assert snapshot.state is not None and snapshot.state.turn_count == 3
    # The single-attempt calls (an approved write, an unclassified tool) ran at
    # most once per session; read and idempotent calls ran at least once.
    for tool, at_most_once in (("pay", True), ("note", True), ("look", False), ("save", False)):
        entries = InvocationLog(state_dir / f"{tool}.log").entries()
        sessions_that_ran = [e.split("/")[2] for e in entries]
        assert set(sessions_that_ran) <= set(ids), (tool, entries)
        if at_most_once:
            assert len(sessions_that_ran) == len(set(sessions_that_ran)), (tool, entries)
        else:
            assert set(sessions_that_ran) == set(ids), (tool, entries)
