"""The spec's testing kit on the engine: the spec's approval example with a host
kill, wait helpers that poll with a deadline, and the kit's names pinned."""

from __future__ import annotations

from pathlib import Path

import pytest

import dex_agents_ray.testing as testing
import dex_agents_ray.testing.chaos as chaos
from dex_agents_ray import AgentSessionOptions, ToolEffect, ToolPolicy
from dex_agents_ray.testing import (
    EXECUTE_COMPLETED_EVENT,
    AgentTestStack,
    InvocationLog,
    read_step_history,
    wait_for_agent_snapshot,
    wait_until,
)
from tests.session.agents import Call, Reply, build_flow

KIT = {
    "AgentTestStack",
    "EXECUTE_COMPLETED_EVENT",
    "FileGate",
    "InvocationLog",
    "StepHistoryEntry",
    "read_step_history",
    "run_agent_worker",
    "wait_for_agent_snapshot",
    "wait_until",
}


def test_the_kit_names_are_exported() -> None:
    assert set(testing.__all__) >= KIT
    for name in (*testing.__all__, *chaos.__all__):
        assert getattr(testing if name in testing.__all__ else chaos, name) is not None
    assert testing.StepHistoryEntry is not None and callable(testing.run_agent_worker)


async def test_a_write_survives_a_host_kill(ray_session: None, tmp_path: Path) -> None:
    options = AgentSessionOptions(
        tool_policies={"refund": ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE)}
    )
    flow = build_flow(
        tmp_path,
        {"refund order 7": [Reply(calls=[Call("r1", "refund")]), Reply()]},
        options=options,
    )
    async with AgentTestStack(tmp_path, [flow]) as stack:
        sessions = stack.sessions(flow)
        await sessions.start_session("session-1", "refund order 7")
        interrupt = await wait_for_agent_snapshot(
            sessions,
            "session-1",
            lambda snapshot: next(iter(snapshot.pending_interrupts), None),
            description="a pending approval",
        )
        killed = await stack.kill_session_host("session-1")  # SIGKILL while the session waits
        assert await sessions.resolve_interrupt("session-1", interrupt.interrupt_id, approved=True)
        await wait_for_agent_snapshot(
            sessions,
            "session-1",
            lambda s: (
                s.state is not None and s.state.turn_count == 1 and not s.state.active_turn_id
            ),
            description="the turn's end",
            timeout=120,
        )
        history = await stack.read_step_history("session-1")
        executed = [e.step_type for e in history if e.event_type == EXECUTE_COMPLETED_EVENT]

        assert executed.count("CallSingleAttemptTool") == 1
        assert await read_step_history(stack.engine, "session-1") == history
        assert len(InvocationLog(tmp_path / "refund.log").entries()) == 1
        new_pid = int(await stack.engine.host("session-1").pid.remote())
        assert new_pid != killed


async def test_wait_until_returns_the_value_or_names_what_timed_out() -> None:
    values = iter([0, None, "ready"])
    assert await wait_until("the value", lambda: next(values)) == "ready"

    async def never() -> bool:
        return False

    with pytest.raises(TimeoutError, match="the flag: not reached within 0.2 s"):
        await wait_until("the flag", never, timeout=0.2)
    with pytest.raises(ValueError, match="timeout must be positive"):
        await wait_until("x", never, timeout=0)


def test_a_stack_refuses_an_empty_flow_list_and_use_before_start(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least one flow"):
        AgentTestStack(tmp_path, [])
    stack = AgentTestStack(tmp_path, [build_flow(tmp_path, {})])
    with pytest.raises(RuntimeError, match="not started"):
        stack.engine  # noqa: B018
