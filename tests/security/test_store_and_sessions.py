"""Security checks on the store and between sessions: owner-only store files, and
an interrupt ID or resume token of one session refused by another."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest

from dex_agents_ray import AgentSessionClient, AgentSessionOptions, ToolEffect, ToolPolicy
from dex_agents_ray.engine import InvalidStreamTokenError
from dex_agents_ray.testing import wait_for_agent_snapshot
from tests.session.agents import Call, Reply, build_flow
from tests.session.polling import turn_done


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_the_sqlite_store_and_its_wal_and_shm_files_are_owner_only(
    engine_factory: Any, state_dir: Path, store_path: Path
) -> None:
    flow = build_flow(state_dir, {"go": [Reply()]})
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("perm-1", "go")
    await wait_for_agent_snapshot(sessions, "perm-1", turn_done(1), timeout=120)

    wal, shm = Path(f"{store_path}-wal"), Path(f"{store_path}-shm")
    assert {p.name: _mode(p) for p in (store_path, wal, shm)} == {
        store_path.name: 0o600,
        wal.name: 0o600,
        shm.name: 0o600,
    }
    assert _mode(store_path.parent) == 0o700


def _approval_flow(state_dir: Path) -> Any:
    options = AgentSessionOptions(
        tool_policies={"pay": ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE, requires_approval=True)}
    )
    script = {
        "pay a": [Reply(calls=[Call("pay-a", "pay")]), Reply()],
        "pay b": [Reply(calls=[Call("pay-b", "pay")]), Reply()],
    }
    return build_flow(state_dir, script, options=options)


async def test_an_interrupt_or_resume_token_of_one_session_is_refused_by_another(
    engine_factory: Any, state_dir: Path
) -> None:
    flow = _approval_flow(state_dir)
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("a", "pay a")
    await sessions.start_session("b", "pay b")
    a = await wait_for_agent_snapshot(sessions, "a", lambda s: s if s.pending_interrupts else None)
    b = await wait_for_agent_snapshot(sessions, "b", lambda s: s if s.pending_interrupts else None)
    a_interrupt = a.pending_interrupts[0].interrupt_id
    a_token = (await sessions.read_event("a", "", timeout=10)).resume_token

    assert not await sessions.resolve_interrupt("b", a_interrupt, approved=True)
    assert not await sessions.answer_question("b", a_interrupt, "yes")
    with pytest.raises(InvalidStreamTokenError):
        await sessions.read_event("b", a_token, timeout=1)

    assert await sessions.get_agent_snapshot("b") == b
    assert await sessions.get_agent_snapshot("a") == a
    assert [c.status.value for c in b.tool_calls] == ["awaiting_approval"]
