"""The spec's crash cases on real Ray and SQLite: the session host or a tool worker
is killed at an exact point (a gate), and each call keeps its effect semantics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dex_agents_ray import (
    TOOL_CALL_NOT_RUN_ERROR_PREFIX,
    AgentSessionClient,
    AgentSessionOptions,
    ToolEffect,
    ToolPolicy,
)
from dex_agents_ray.engine import RayTaskOptions
from dex_agents_ray.testing import (
    FileGate,
    InvocationLog,
    gate_before_ack_env,
    kill_flow_actor,
    kill_process,
)
from tests.session.agents import Call, Reply, build_flow
from tests.session.polling import has_interrupt, snapshot_when, turn_done


def _attempts(state_dir: Path, tool: str) -> list[tuple[str, str]]:
    """``(attempt, idempotency key)`` of every real invocation of ``tool``."""
    entries = InvocationLog(state_dir / f"{tool}.log").entries()
    return [(e.split("/")[1], e.split("/", 2)[2].rsplit("/", 1)[0]) for e in entries]


async def _kill_host_during(
    engine_factory: Any, state_dir: Path, effect: ToolEffect, session_id: str
) -> str:
    """Run one gated call of ``effect``, kill the host at its gate, return the answer."""
    options = AgentSessionOptions(
        tool_policies={"work": ToolPolicy(effect, requires_approval=False)}
    )
    flow = build_flow(
        state_dir,
        {"go": [Reply(calls=[Call("c1", "work")]), Reply()]},
        {"work": "gate"},
        options=options,
    )
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    FileGate(state_dir, "work-2").release()
    await sessions.start_session(session_id, "go")
    await FileGate(state_dir, "work-1").wait_until_reached(timeout=120)
    await kill_flow_actor(engine, session_id)
    done = await snapshot_when(sessions, session_id, turn_done(1), timeout=120)
    FileGate(state_dir, "work-1").release()
    return done.messages[-1].text or ""


async def test_host_killed_during_a_read_runs_it_again(
    engine_factory: Any, state_dir: Path
) -> None:
    answer = await _kill_host_during(engine_factory, state_dir, ToolEffect.READ, "crash-read")

    assert answer == "work=work done"
    assert [attempt for attempt, _ in _attempts(state_dir, "work")] == ["1", "2"]


async def test_host_killed_during_an_idempotent_write_retries_with_the_same_key(
    engine_factory: Any, state_dir: Path
) -> None:
    answer = await _kill_host_during(
        engine_factory, state_dir, ToolEffect.IDEMPOTENT_WRITE, "crash-idem"
    )

    assert answer == "work=work done"
    attempts = _attempts(state_dir, "work")
    assert [attempt for attempt, _ in attempts] == ["1", "2"]
    assert {key for _, key in attempts} == {"crash-idem/turn-1/c1"}


async def test_host_killed_during_a_single_attempt_write_is_outcome_unknown_and_runs_once(
    engine_factory: Any, state_dir: Path
) -> None:
    answer = await _kill_host_during(
        engine_factory, state_dir, ToolEffect.NON_IDEMPOTENT_WRITE, "crash-write"
    )

    assert answer.startswith("work=The tool call's outcome is unknown")
    assert TOOL_CALL_NOT_RUN_ERROR_PREFIX not in answer
    assert InvocationLog(state_dir / "work.log").entries()[0].startswith("c1/1/")
    assert len(InvocationLog(state_dir / "work.log").entries()) == 1


async def test_an_approval_survives_a_host_restart(engine_factory: Any, state_dir: Path) -> None:
    options = AgentSessionOptions(
        tool_policies={"refund": ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE)}
    )
    flow = build_flow(
        state_dir, {"refund": [Reply(calls=[Call("c1", "refund")]), Reply()]}, options=options
    )
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("crash-approval", "refund")
    await snapshot_when(sessions, "crash-approval", has_interrupt)
    await kill_flow_actor(engine, "crash-approval")

    assert await sessions.resolve_interrupt("crash-approval", "c1", approved=True)
    done = await snapshot_when(sessions, "crash-approval", turn_done(1), timeout=120)

    assert done.messages[-1].text == "refund=echo {}"
    assert len(InvocationLog(state_dir / "refund.log").entries()) == 1


async def test_a_tool_worker_that_never_started_fails_the_call_and_it_may_run_again(
    engine_factory: Any, state_dir: Path
) -> None:
    options = AgentSessionOptions(
        tool_policies={"pay": ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE, requires_approval=False)},
        tool_ray_options_by_name={
            "pay": RayTaskOptions(
                runtime_env={"env_vars": gate_before_ack_env(str(state_dir), "ack")}
            )
        },
    )
    script = {
        "pay": [Reply(calls=[Call("c1", "pay")]), Reply()],
        "pay again": [Reply(calls=[Call("c1", "pay")]), Reply()],
    }
    flow = build_flow(state_dir, script, options=options)
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("crash-ack", "pay")
    kill_process(await FileGate(state_dir, "ack").wait_until_reached(timeout=120))
    failed = await snapshot_when(sessions, "crash-ack", turn_done(1), timeout=120)

    answer = failed.messages[-1].text or ""
    assert answer.startswith(f"pay=The tool call failed: {TOOL_CALL_NOT_RUN_ERROR_PREFIX}: ")
    assert InvocationLog(state_dir / "pay.log").entries() == []

    FileGate(state_dir, "ack").release()
    assert await sessions.send_user_message("crash-ack", "pay again")
    again = await snapshot_when(sessions, "crash-ack", turn_done(2), timeout=120)
    assert again.messages[-1].text == "pay=echo {}"
    assert [key for _, key in _attempts(state_dir, "pay")] == ["crash-ack/turn-2/c1"]
