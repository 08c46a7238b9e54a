"""Spend limits on real Ray and SQLite: ``RaySpendLimit`` counts the tokens of two
sessions on different hosts against one budget, refuses the call that would go
past it (no provider request, a clear ``last_turn_error``), and keeps its counts
across a restart of its actor."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import ray

from dex_agents_ray import (
    SPEND_LIMIT_REFUSED_PREFIX,
    AgentSessionClient,
    AgentSessionOptions,
    RaySpendLimit,
)
from dex_agents_ray.testing import InvocationLog
from tests.session.polling import snapshot_when, turn_done
from tests.session.spend_agents import build_flow


def _two_hosts(engine: Any) -> tuple[str, str]:
    """Two session IDs that shared placement puts on different hosts."""
    first = "acme-0"
    for i in range(1, 100):
        other = f"acme-{i}"
        if engine.placement.host_name(other) != engine.placement.host_name(first):
            return first, other
    raise AssertionError("every ID hashed to one host")


async def test_one_budget_across_sessions_on_two_hosts(
    engine_factory: Any, state_dir: Path, namespace: str
) -> None:
    limit = RaySpendLimit(
        "acme-test",
        {"acme": 150},
        ledger_path=state_dir / "spend.db",
        namespace=namespace,
    )
    flow = build_flow(str(state_dir), limit)
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    first, second = _two_hosts(engine)
    settings = {"account": "acme"}

    await sessions.start_session(first, "one", session_settings=settings)
    a = await snapshot_when(sessions, first, turn_done(1))
    used = a.usage.input_tokens + a.usage.output_tokens
    assert 0 < used < 150
    assert await limit.spent("acme") == used

    # The second session, on another host, spends from the same budget until it is gone.
    await sessions.start_session(second, "two", session_settings=settings)
    b = await snapshot_when(sessions, second, turn_done(1))
    turn = 1
    while b.state is not None and b.state.last_turn_error is None:
        turn += 1
        assert turn < 20, "the budget never ran out"
        assert await sessions.send_user_message(second, f"more {turn}")
        b = await snapshot_when(sessions, second, turn_done(turn))
    assert b.state is not None and b.state.last_turn_error is not None
    assert b.state.last_turn_error.startswith(SPEND_LIMIT_REFUSED_PREFIX)
    assert "'acme'" in b.state.last_turn_error
    refused = f"more {turn}"
    assert refused not in InvocationLog(state_dir / "model.log").entries()  # never sent
    spent = await limit.spent("acme")
    assert spent >= 150

    # The ledger's actor restarts and keeps its counts; the budget stays spent.
    handle = ray.get_actor("dexspend:acme-test", namespace=namespace)
    ray.kill(handle, no_restart=False)
    assert await limit.spent("acme") == spent
    assert await sessions.send_user_message(first, "again")
    again = await snapshot_when(sessions, first, turn_done(2))
    assert again.state is not None
    assert (again.state.last_turn_error or "").startswith(SPEND_LIMIT_REFUSED_PREFIX)


def test_a_spend_limit_must_have_reserve_and_record() -> None:
    with pytest.raises(TypeError, match="spend_limit"):
        AgentSessionOptions(spend_limit=object())
    with pytest.raises(ValueError, match="budget"):
        RaySpendLimit("x", {"a": -1})
