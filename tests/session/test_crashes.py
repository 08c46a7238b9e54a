"""The spec's crash cases on real Ray and SQLite: the session host or a tool worker
is killed at an exact point (a gate), and each call keeps its effect semantics."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from dex_agents_ray import (
    TOOL_CALL_NOT_RUN_ERROR_PREFIX,
    AgentEventType,
    AgentSessionClient,
    AgentSessionOptions,
    AgentToolCallStatus,
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
from tests.session.polling import eventually, has_interrupt, read_events, snapshot_when, turn_done


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


def _tool_step_heartbeat_stored(store_path: Path, flow_id: str) -> bool:
    """Whether the store holds a heartbeat value of ``flow_id``'s ``CallTool`` Step:
    what tells its next attempt that an earlier one started the tool."""
    db = sqlite3.connect(store_path, timeout=30)
    try:
        rows = db.execute("SELECT doc FROM executions WHERE flow_id=?", (flow_id,)).fetchall()
    finally:
        db.close()
    docs = [json.loads(doc) for (doc,) in rows]
    return any(d["step_type"] == "CallTool" and d["heartbeat"] is not None for d in docs)


@pytest.mark.parametrize("behaviour", ["gate", "checkpoint-gate"])
async def test_a_started_idempotent_write_runs_to_the_end_after_a_crash_and_a_steer(
    engine_factory: Any, state_dir: Path, store_path: Path, behaviour: str
) -> None:
    """The spec: a tool that has started runs to the end, however the turn is
    steered; its retry (after the host died mid-call) runs with the same key."""
    session_id = f"crash-steer-{behaviour}"
    ack = FileGate(state_dir, "ack")
    options = AgentSessionOptions(
        tool_policies={"work": ToolPolicy(ToolEffect.IDEMPOTENT_WRITE, requires_approval=False)},
        # Every attempt waits at "ack" first, so the retry starts after the steer.
        tool_ray_options_by_name={
            "work": RayTaskOptions(
                runtime_env={"env_vars": gate_before_ack_env(str(state_dir), "ack")}
            )
        },
    )
    script = {"go": [Reply(calls=[Call("c1", "work")]), Reply()], "steer": [Reply()]}
    flow = build_flow(state_dir, script, {"work": behaviour}, options=options)
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    ack.release()
    FileGate(state_dir, "work-2").release()
    await sessions.start_session(session_id, "go")
    await FileGate(state_dir, "work-1").wait_until_reached(timeout=120)
    await eventually(
        lambda: asyncio.to_thread(_tool_step_heartbeat_stored, store_path, session_id),
        timeout=60,
        description="the tool Step's start stored with its heartbeat",
    )
    ack.close()
    await kill_flow_actor(engine, session_id)
    assert await sessions.steer_user_message(session_id, text="steer")
    ack.release()

    done = await snapshot_when(sessions, session_id, turn_done(2), timeout=120)
    FileGate(state_dir, "work-1").release()

    assert done.messages[-1].text == "no tools"
    attempts = _attempts(state_dir, "work")
    assert [attempt for attempt, _ in attempts] == ["1", "2"]
    assert {key for _, key in attempts} == {f"{session_id}/turn-1/c1"}
    events = await read_events(sessions, session_id, until_type=AgentEventType.TURN_COMPLETED)
    finished = [
        (e.payload["tool_call_id"], e.payload["status"])
        for e in events
        if e.type is AgentEventType.TOOL_CALL_FINISHED
    ]
    assert finished == [("c1", AgentToolCallStatus.SUCCEEDED)]
    assert [e.turn_id for e in events if e.type is AgentEventType.TURN_STEERED] == ["turn-1"]


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


async def test_a_models_commit_carries_the_next_wait_and_a_kill_before_it_runs_the_write_once(
    engine_factory: Any, state_dir: Path
) -> None:
    """``RunModel``'s result and the wait of the Step it creates (``ResumeTurn`` after
    tool calls, ``AwaitUserMessage`` after the answer) are one commit
    (``engine/run/_fusion.py``). A host killed before that commit (its model call at
    a gate) calls the model again, and the single-attempt write it asks for runs
    once, after; a host killed after it (the write at its gate) is the case above."""
    options = AgentSessionOptions(
        tool_policies={"work": ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE, requires_approval=False)}
    )
    flow = build_flow(
        state_dir,
        {"go": [Reply(calls=[Call("c1", "work")], model_gate="m1"), Reply()]},
        {},
        options=options,
    )
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("fused", "go")
    await FileGate(state_dir, "model-m1").wait_until_reached(timeout=120)
    await kill_flow_actor(engine, "fused")
    FileGate(state_dir, "model-m1").release()

    done = await snapshot_when(sessions, "fused", turn_done(1), timeout=120)

    answer = done.messages[-1].text or ""
    assert answer.startswith("work=") and "unknown" not in answer
    assert InvocationLog(state_dir / "model.log").entries() == [
        "turn-1/0/1",
        "turn-1/0/2",
        "turn-1/1/1",
    ]
    [work] = InvocationLog(state_dir / "work.log").entries()
    assert work.startswith("c1/1/")
    history = await engine.client.read_step_history("fused")
    model_commits = {
        h.at for h in history if h.event == "step_completed" and h.step_type == "RunModel"
    }
    waits = [
        h
        for h in history
        if h.event == "wait_for_completed" and h.step_type in ("ResumeTurn", "AwaitUserMessage")
    ]
    assert sorted(h.step_type for h in waits) == ["AwaitUserMessage", "ResumeTurn"]
    assert all(h.at in model_commits for h in waits), (waits, model_commits)
