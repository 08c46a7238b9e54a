"""Passivated sessions: a session that only waits (for a user message, an approval,
an answer or a durable timer) leaves memory, and the call or timer it waits for
brings it back with nothing lost and nothing run twice."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import ray

from dex_agents_ray import (
    AgentSessionClient,
    AgentSessionFlow,
    AgentSessionOptions,
    BuiltInTool,
    ToolEffect,
    ToolPolicy,
)
from dex_agents_ray.engine.actors._handles import SCHEDULER_NAME
from dex_agents_ray.testing import InvocationLog
from tests.engine.polling import named_actors, until
from tests.session.agents import Call, Reply, build_flow
from tests.session.polling import has_interrupt, snapshot_when, turn_done

IDLE = timedelta(seconds=1)
PLACEMENTS = ("dedicated", "shared")


async def _start(
    engine_factory: Any, flow: AgentSessionFlow, placement: str
) -> tuple[Any, AgentSessionClient]:
    extra: dict[str, Any] = {"shared_hosts": 1} if placement == "shared" else {}
    engine = await engine_factory([flow], passivate_after=IDLE, placement=placement, **extra)
    return engine, AgentSessionClient(engine.client, flow)


async def _passivated(engine: Any, namespace: str, session_id: str) -> int:
    """Wait (reading the store and Ray only) until the session left memory;
    returns its epoch. A dedicated host is gone then, a shared one stays."""
    host = f"dexrun:{session_id}"

    async def gone() -> bool:
        if await engine.store.passivation.passivated_count() != 1:
            return False
        return engine.placement.mode.value == "shared" or host not in named_actors(namespace)

    await until(gone, f"passivation of {session_id}")
    if engine.placement.mode.value == "dedicated":
        assert named_actors(namespace) == [SCHEDULER_NAME]  # no session actor is resident
    else:
        assert named_actors(namespace) == sorted([SCHEDULER_NAME, "dexhost:0"])
    run = await engine.store.runs.get_run(session_id)
    assert run is not None and run.status.value == "running"
    return int(run.epoch)


async def _reactivated(engine: Any, session_id: str, passivated_epoch: int) -> None:
    """The session came back: an activation took a new ownership epoch."""
    run = await engine.store.runs.get_run(session_id)
    assert run is not None and run.epoch > passivated_epoch


def _model_calls(state_dir: Path) -> list[str]:
    return InvocationLog(state_dir / "model.log").entries()


@pytest.mark.parametrize("placement", PLACEMENTS)
async def test_an_idle_session_leaves_memory_and_a_user_message_brings_it_back(
    engine_factory: Any, namespace: str, state_dir: Path, placement: str
) -> None:
    script = {"hello": [Reply()], "look it up": [Reply(calls=[Call("c1", "lookup")]), Reply()]}
    options = AgentSessionOptions(tool_policies={"lookup": ToolPolicy(ToolEffect.READ)})
    flow = build_flow(state_dir, script, options=options)
    engine, sessions = await _start(engine_factory, flow, placement)
    await sessions.start_session("p-msg", "hello")
    await snapshot_when(sessions, "p-msg", turn_done(1))
    epoch = await _passivated(engine, namespace, "p-msg")
    run = await engine.store.runs.get_run("p-msg")
    assert run is not None and run.active_step_types == ["AwaitUserMessage"]

    assert await sessions.send_user_message("p-msg", "look it up")
    done = await snapshot_when(sessions, "p-msg", turn_done(2))

    await _reactivated(engine, "p-msg", epoch)
    assert [m.text for m in done.messages] == ["hello", "no tools", "look it up", "lookup=echo {}"]
    # The first turn's model call was not repeated by the re-activation.
    assert _model_calls(state_dir) == ["turn-1/0/1", "turn-2/0/1", "turn-2/1/1"]
    assert len(InvocationLog(state_dir / "lookup.log").entries()) == 1


@pytest.mark.parametrize("placement", PLACEMENTS)
async def test_a_session_waiting_for_an_approval_leaves_memory_and_the_approval_runs_the_tool_once(
    engine_factory: Any, namespace: str, state_dir: Path, placement: str
) -> None:
    options = AgentSessionOptions(
        tool_policies={"refund": ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE)}
    )
    flow = build_flow(
        state_dir,
        {"refund": [Reply(calls=[Call("c1", "refund", {"order": 7})]), Reply()]},
        options=options,
    )
    engine, sessions = await _start(engine_factory, flow, placement)
    await sessions.start_session("p-approval", "refund")
    await snapshot_when(sessions, "p-approval", has_interrupt, description="an approval")
    epoch = await _passivated(engine, namespace, "p-approval")
    run = await engine.store.runs.get_run("p-approval")
    assert run is not None and "AwaitToolApproval" in run.active_step_types
    assert InvocationLog(state_dir / "refund.log").entries() == []

    assert await sessions.resolve_interrupt("p-approval", "c1", approved=True)
    done = await snapshot_when(sessions, "p-approval", turn_done(1))

    await _reactivated(engine, "p-approval", epoch)
    assert done.messages[-1].text == 'refund=echo {"order": 7}'
    refunds = InvocationLog(state_dir / "refund.log").entries()
    assert len(refunds) == 1 and refunds[0].startswith("c1/1/p-approval/turn-1/c1/")
    assert not await sessions.resolve_interrupt("p-approval", "c1", approved=True)
    assert _model_calls(state_dir) == ["turn-1/0/1", "turn-1/1/1"]


@pytest.mark.parametrize("placement", PLACEMENTS)
async def test_a_session_waiting_for_an_answer_leaves_memory_and_the_answer_brings_it_back(
    engine_factory: Any, namespace: str, state_dir: Path, placement: str
) -> None:
    ask = Call("q1", "ask_user", {"question": "Color?", "choices": ["red", "blue"]})
    flow = build_flow(
        state_dir,
        {"ask": [Reply(calls=[ask]), Reply()]},
        options=AgentSessionOptions(built_in_tools=frozenset({BuiltInTool.ASK_USER})),
    )
    engine, sessions = await _start(engine_factory, flow, placement)
    await sessions.start_session("p-question", "ask")
    await snapshot_when(sessions, "p-question", has_interrupt, description="a question")
    epoch = await _passivated(engine, namespace, "p-question")
    run = await engine.store.runs.get_run("p-question")
    assert run is not None and "AwaitQuestionAnswer" in run.active_step_types

    assert await sessions.answer_question("p-question", "q1", "blue")
    done = await snapshot_when(sessions, "p-question", turn_done(1))

    await _reactivated(engine, "p-question", epoch)
    assert done.messages[-1].text == 'ask_user={"status":"answered","answer":"blue"}'
    assert _model_calls(state_dir) == ["turn-1/0/1", "turn-1/1/1"]


@pytest.mark.parametrize("placement", PLACEMENTS)
async def test_a_durable_wait_fires_while_the_session_is_passivated(
    engine_factory: Any, namespace: str, state_dir: Path, placement: str
) -> None:
    wait = Call("w1", "durable_wait", {"duration_seconds": 6, "reason": "cool down"})
    flow = build_flow(
        state_dir,
        {"wait": [Reply(calls=[wait]), Reply()]},
        options=AgentSessionOptions(built_in_tools=frozenset({BuiltInTool.DURABLE_WAIT})),
    )
    engine, sessions = await _start(engine_factory, flow, placement)
    await sessions.start_session("p-timer", "wait")
    # From here on, only the store and Ray are read: a client call would wake the session.
    epoch = await _passivated(engine, namespace, "p-timer")
    run = await engine.store.runs.get_run("p-timer")
    assert run is not None and "AwaitTimer" in run.active_step_types

    async def turn_completed() -> bool:
        history = await engine.store.runs.history("p-timer")
        fired = any(h.exec_id == "AwaitTimer-1" and h.event == "step_completed" for h in history)
        run = await engine.store.runs.get_run("p-timer")
        return fired and run is not None and run.active_step_types == ["AwaitUserMessage"]

    await until(turn_completed, "the scheduler's activation and the end of the turn")
    await _reactivated(engine, "p-timer", epoch)
    scheduler = ray.get_actor(SCHEDULER_NAME, namespace=namespace)

    async def counted() -> bool:  # the new host may finish the turn before the wake returns
        return bool(await scheduler.woken_runs.remote() >= 1)

    await until(counted, "the scheduler's count of its activation")
    assert await scheduler.woken_runs.remote() == 1

    done = await snapshot_when(sessions, "p-timer", turn_done(1))
    assert done.messages[-1].text == (
        'durable_wait={"status":"completed","waited_seconds":6,"reason":"cool down"}'
    )
    assert _model_calls(state_dir) == ["turn-1/0/1", "turn-1/1/1"]
