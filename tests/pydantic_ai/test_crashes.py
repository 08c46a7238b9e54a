"""Pydantic AI tool calls keep their effect semantics when the session host is
SIGKILLed at an exact point (a gate) while the tool runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dex_agents_ray import (
    AgentSessionClient,
    AgentSessionOptions,
    AgentToolCallStatus,
    ToolEffect,
    ToolPolicy,
)
from dex_agents_ray.pydantic_ai import pydantic_ai_session_flow
from dex_agents_ray.testing import FileGate, InvocationLog, kill_flow_actor
from tests.pydantic_ai.agents import Deps, agent
from tests.session.polling import snapshot_when, turn_done


def _keys(state_dir: Path, tool: str) -> list[str]:
    return [e.split("/", 2)[2] for e in InvocationLog(state_dir / f"{tool}.log").entries()]


async def _start_gated_write(
    engine_factory: Any, state_dir: Path, effect: ToolEffect, session_id: str
) -> tuple[Any, AgentSessionClient]:
    options = AgentSessionOptions(
        default_tool_effect=ToolEffect.READ,
        tool_policies={"work": ToolPolicy(effect, requires_approval=False)},
    )
    flow = pydantic_ai_session_flow(
        agent, flow_type="PydanticCrash", options=options, deps=Deps(str(state_dir))
    )
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session(session_id, "write gated")
    await FileGate(state_dir, "work-1").wait_until_reached(timeout=120)
    return engine, sessions


async def test_host_killed_during_a_single_attempt_write_is_outcome_unknown_and_ran_once(
    engine_factory: Any, state_dir: Path
) -> None:
    engine, sessions = await _start_gated_write(
        engine_factory, state_dir, ToolEffect.NON_IDEMPOTENT_WRITE, "crash-write"
    )
    await kill_flow_actor(engine, "crash-write")
    done = await snapshot_when(sessions, "crash-write", turn_done(1), timeout=120)
    FileGate(state_dir, "work-1").release()

    assert _keys(state_dir, "work") == ["crash-write/turn-1/w1"]
    tool_message = next(m for m in done.messages if m.tool_call_id == "w1" and m.tool_output)
    assert "outcome is unknown" in (tool_message.tool_output or "")
    history = await sessions.client.read_step_history("crash-write")
    completed = [e.step_type for e in history if e.event_type == "step_completed"]
    assert "RecordToolOutcomeUnknown" in completed

    # The session goes on: the next turn runs normally after the crash.
    assert await sessions.send_user_message("crash-write", "sum")
    after = await snapshot_when(sessions, "crash-write", turn_done(2), timeout=120)
    assert after.messages[-1].text == "5 and 20"
    assert _keys(state_dir, "work") == ["crash-write/turn-1/w1"]


async def test_host_killed_during_an_idempotent_write_retries_it_with_the_same_key(
    engine_factory: Any, state_dir: Path
) -> None:
    engine, sessions = await _start_gated_write(
        engine_factory, state_dir, ToolEffect.IDEMPOTENT_WRITE, "crash-idem"
    )
    await kill_flow_actor(engine, "crash-idem")
    FileGate(state_dir, "work-1").release()
    done = await snapshot_when(sessions, "crash-idem", turn_done(1), timeout=120)

    keys = _keys(state_dir, "work")
    assert len(keys) >= 2 and set(keys) == {"crash-idem/turn-1/w1"}
    assert done.messages[-1].text == "wrote"
    assert done.state is not None and done.state.last_turn_error is None
    assert AgentToolCallStatus.SUCCEEDED.value == "succeeded"
