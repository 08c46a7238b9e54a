"""Unchanged Pydantic AI agents as durable sessions on real Ray and SQLite.

The model is Pydantic AI's own ``FunctionModel`` (no mock of the framework);
every tool logs its real invocations with ``InvocationLog``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessagesTypeAdapter, ToolReturnPart

from dex_agents_ray import (
    AgentSessionClient,
    AgentSessionOptions,
    AgentToolCallStatus,
    CompactionPolicy,
    MessageRole,
    ToolEffect,
    ToolPolicy,
)
from dex_agents_ray.pydantic_ai import (
    MODEL_RETRY_ERROR_PREFIX,
    deferred_tool_idempotency_key,
    pydantic_ai_session_flow,
)
from dex_agents_ray.testing import ContextWindowSessionScenario, InvocationLog
from tests.pydantic_ai.agents import Deps, agent, structured_agent
from tests.session.polling import has_interrupt, snapshot_when, turn_done

READS = AgentSessionOptions(default_tool_effect=ToolEffect.READ)


def _log(state_dir: Path, tool: str) -> list[tuple[int, str]]:
    """``(pid, idempotency key)`` of every real invocation of ``tool``."""
    entries = InvocationLog(state_dir / f"{tool}.log").entries()
    return [(int(e.split("/")[1]), e.split("/", 2)[2]) for e in entries]


async def _session(
    engine_factory: Any,
    state_dir: Path,
    *,
    options: AgentSessionOptions = READS,
    flow_agent: Any = agent,
) -> AgentSessionClient:
    flow = pydantic_ai_session_flow(
        flow_agent, flow_type="PydanticSums", options=options, deps=Deps(str(state_dir))
    )
    engine = await engine_factory([flow])
    return AgentSessionClient(engine.client, flow)


async def _completed_steps(sessions: AgentSessionClient, session_id: str) -> list[str]:
    history = await sessions.client.read_step_history(session_id)
    return [entry.step_type for entry in history if entry.event_type == "step_completed"]


async def test_a_tool_loop_runs_each_call_once_in_its_own_tool_step(
    engine_factory: Any, state_dir: Path
) -> None:
    sessions = await _session(engine_factory, state_dir)
    await sessions.start_session("sum-1", "sum")
    done = await snapshot_when(sessions, "sum-1", turn_done(1), timeout=120)

    assert done.state is not None and done.state.last_turn_error is None
    assert [(m.role, m.text) for m in done.messages] == [
        (MessageRole.USER, "sum"),
        (MessageRole.ASSISTANT, None),
        (MessageRole.TOOL, "5"),
        (MessageRole.TOOL, "20"),
        (MessageRole.ASSISTANT, "5 and 20"),
    ]
    steps = await _completed_steps(sessions, "sum-1")
    assert steps.count("RunModel") == 2
    assert steps.count("CallTool") == 2  # the two calls of one response: two tool Steps
    add, multiply = _log(state_dir, "add"), _log(state_dir, "multiply")
    assert [key for _, key in add] == ["sum-1/turn-1/c1"]
    assert [key for _, key in multiply] == ["sum-1/turn-1/c2"]  # the sync tool too
    assert add[0][0] != os.getpid() and multiply[0][0] != os.getpid()
    assert done.usage.model_calls == 2


async def test_a_tool_declared_requires_approval_waits_and_an_approved_write_runs_once(
    engine_factory: Any, state_dir: Path
) -> None:
    options = AgentSessionOptions(
        default_tool_effect=ToolEffect.READ,
        tool_policies={"work": ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE)},
    )
    sessions = await _session(engine_factory, state_dir, options=options)
    await sessions.start_session("refund-1", "refund A1")  # framework metadata: approval
    waiting = await snapshot_when(sessions, "refund-1", has_interrupt, timeout=120)
    assert _log(state_dir, "refund") == []
    interrupt = waiting.pending_interrupts[0]
    assert await sessions.resolve_interrupt("refund-1", interrupt.interrupt_id, approved=True)
    await snapshot_when(sessions, "refund-1", turn_done(1), timeout=120)
    assert [key for _, key in _log(state_dir, "refund")] == ["refund-1/turn-1/r1"]

    assert await sessions.send_user_message("refund-1", "write")  # policy: approval by effect
    waiting = await snapshot_when(sessions, "refund-1", has_interrupt, timeout=120)
    record = next(c for c in waiting.tool_calls if c.tool_name == "work")
    assert record.effect is ToolEffect.NON_IDEMPOTENT_WRITE
    assert await sessions.resolve_interrupt(
        "refund-1", waiting.pending_interrupts[0].interrupt_id, approved=True
    )
    done = await snapshot_when(sessions, "refund-1", turn_done(2), timeout=120)
    assert [key for _, key in _log(state_dir, "work")] == ["refund-1/turn-2/w1"]
    assert "CallSingleAttemptTool" in await _completed_steps(sessions, "refund-1")
    assert done.messages[-1].text == "wrote"


async def test_a_rejected_call_reaches_the_model_without_running(
    engine_factory: Any, state_dir: Path
) -> None:
    sessions = await _session(engine_factory, state_dir)
    await sessions.start_session("refund-2", "refund A1")
    waiting = await snapshot_when(sessions, "refund-2", has_interrupt, timeout=120)
    assert await sessions.resolve_interrupt(
        "refund-2",
        waiting.pending_interrupts[0].interrupt_id,
        approved=False,
        rejection_message="not today",
    )
    done = await snapshot_when(sessions, "refund-2", turn_done(1), timeout=120)
    assert _log(state_dir, "refund") == []
    tool_messages = [m for m in done.messages if m.role is MessageRole.TOOL]
    assert "not today" in (tool_messages[0].tool_output or "")


async def test_a_tool_model_retry_reaches_the_model_as_a_retry_prompt(
    engine_factory: Any, state_dir: Path
) -> None:
    sessions = await _session(engine_factory, state_dir)
    await sessions.start_session("picky-1", "picky")
    done = await snapshot_when(sessions, "picky-1", turn_done(1), timeout=120)

    assert [key for _, key in _log(state_dir, "picky")] == [
        "picky-1/turn-1/p1",
        "picky-1/turn-1/p2",
    ]
    retried = next(
        m for m in done.messages if m.tool_call_id == "p1" and m.role is MessageRole.TOOL
    )
    # As Pydantic AI itself shows a tool's ModelRetry: a return with outcome "retried".
    [request] = ModelMessagesTypeAdapter.validate_json(retried.framework_item)
    [part] = request.parts
    assert isinstance(part, ToolReturnPart)
    assert (part.outcome, part.content) == ("retried", "value must be at least 10")
    assert done.messages[-1].text == "seen ['ok 12'] retries []"


async def test_a_tool_that_raises_is_retried_by_its_effect_then_fails(
    engine_factory: Any, state_dir: Path
) -> None:
    sessions = await _session(engine_factory, state_dir)
    await sessions.start_session("broken-1", "broken")
    done = await snapshot_when(sessions, "broken-1", turn_done(1), timeout=120)

    assert len(_log(state_dir, "broken")) == 3  # a read: three attempts
    record = next(m for m in done.messages if m.tool_call_id == "b1" and m.role is MessageRole.TOOL)
    assert "the broken tool broke" in (record.tool_output or "")
    assert done.state is not None and done.state.last_turn_error is None


async def test_a_tool_failed_reaches_the_model_with_its_own_message(
    engine_factory: Any, state_dir: Path
) -> None:
    sessions = await _session(engine_factory, state_dir)
    await sessions.start_session("gone-1", "gone")
    done = await snapshot_when(sessions, "gone-1", turn_done(1), timeout=120)

    assert len(_log(state_dir, "gone")) == 1  # a reported failure: no retry
    [part] = ModelMessagesTypeAdapter.validate_json(
        next(
            m for m in done.messages if m.tool_call_id == "g1" and m.role is MessageRole.TOOL
        ).framework_item
    )[0].parts
    assert isinstance(part, ToolReturnPart)
    assert (part.outcome, part.content) == ("failed", "the record is gone")


async def test_the_context_window_scenario_compacts_a_pydantic_ai_session(
    engine_factory: Any, state_dir: Path
) -> None:
    options = AgentSessionOptions(
        default_tool_effect=ToolEffect.READ,
        compaction=CompactionPolicy(context_window_tokens=1500),
        retained_message_limit=8,
    )
    sessions = await _session(engine_factory, state_dir, options=options)
    result = await ContextWindowSessionScenario(sessions=sessions, turns=12).run()

    assert result.compactions >= 1 and result.summary_generation == result.compactions
    assert result.last_sequence == 2 * 12
    snapshot = await sessions.get_agent_snapshot("context-window")
    assert snapshot.messages[-1].text == "noted (summary seen: True)"


async def test_a_failed_turn_keeps_its_tool_results_and_the_next_turn_works(
    engine_factory: Any, state_dir: Path
) -> None:
    sessions = await _session(engine_factory, state_dir)
    await sessions.start_session("fail-1", "explode")
    failed = await snapshot_when(sessions, "fail-1", turn_done(1), timeout=120)

    assert failed.state is not None and "the model service failed" in (
        failed.state.last_turn_error or ""
    )
    assert [key for _, key in _log(state_dir, "add")] == ["fail-1/turn-1/f1"]
    tool = next(m for m in failed.messages if m.role is MessageRole.TOOL)
    assert (tool.tool_call_id, tool.tool_output) == ("f1", "3")  # build_unfinished_turn_messages
    assert "Do not repeat these tool calls" in (failed.messages[-1].text or "")

    assert await sessions.send_user_message("fail-1", "echo again")
    done = await snapshot_when(sessions, "fail-1", turn_done(2), timeout=120)
    assert done.messages[-1].text is not None and done.messages[-1].text.startswith("echo: again")
    assert done.state is not None and done.state.last_turn_error is None


async def test_tool_call_ids_with_slashes_or_repeated_in_a_turn_are_mapped(
    engine_factory: Any, state_dir: Path
) -> None:
    sessions = await _session(engine_factory, state_dir)
    await sessions.start_session("ids-1", "slashes")
    done = await snapshot_when(sessions, "ids-1", turn_done(1), timeout=120)

    keys = [key for _, key in _log(state_dir, "add")]
    assert keys == ["ids-1/turn-1/x_1", "ids-1/turn-1/x_1-2"]
    assert done.messages[-1].text == "seen ['4'] retries []"
    # Messages name the session's IDs; their items keep the provider's.
    tools = [m for m in done.messages if m.role is MessageRole.TOOL]
    assert [(m.tool_call_id, m.tool_output) for m in tools] == [("x_1", "2"), ("x_1-2", "4")]
    requests = [m for m in done.messages if m.role is MessageRole.ASSISTANT and m.tool_call_id]
    assert [m.tool_call_id for m in requests] == ["x_1", "x_1-2"]
    assert all('"x/1"' in m.framework_item for m in tools)


async def test_structured_output_is_the_final_message(engine_factory: Any, state_dir: Path) -> None:
    sessions = await _session(engine_factory, state_dir, flow_agent=structured_agent)
    await sessions.start_session("order-1", "order")
    done = await snapshot_when(sessions, "order-1", turn_done(1), timeout=120)

    answers = [m for m in done.messages if m.role is MessageRole.ASSISTANT]
    assert json.loads(answers[-1].text or "") == {"order_id": "A1", "status": "shipped"}


async def test_invalid_structured_output_makes_another_model_call_in_a_new_step(
    engine_factory: Any, state_dir: Path
) -> None:
    sessions = await _session(engine_factory, state_dir, flow_agent=structured_agent)
    await sessions.start_session("order-2", "bad order")
    done = await snapshot_when(sessions, "order-2", turn_done(1), timeout=120)

    assert (await _completed_steps(sessions, "order-2")).count("RunModel") == 2
    answers = [m for m in done.messages if m.role is MessageRole.ASSISTANT]
    assert json.loads(answers[-1].text or "") == {"order_id": "A1", "status": "late"}
    assert done.usage.model_calls == 2


async def test_a_twenty_turn_session_keeps_the_whole_history(
    engine_factory: Any, state_dir: Path
) -> None:
    sessions = await _session(engine_factory, state_dir)
    await sessions.start_session("long-1", "echo 1")
    for turn in range(2, 21):
        await snapshot_when(sessions, "long-1", turn_done(turn - 1), timeout=120)
        assert await sessions.send_user_message("long-1", f"echo {turn}")
    done = await snapshot_when(sessions, "long-1", turn_done(20), timeout=120)

    assert len(done.messages) == 40
    # The model saw every earlier request and response plus this turn's prompt.
    assert done.messages[-1].text == "echo: 20 (39 messages)"


async def test_the_idempotency_key_is_refused_outside_a_tool_step(state_dir: Path) -> None:
    with pytest.raises(RuntimeError, match="deferred_tool_idempotency_key"):
        await agent.run("sum", deps=Deps(str(state_dir)))
    from pydantic_ai import RunContext

    with pytest.raises(RuntimeError, match="outside a tool Step"):
        deferred_tool_idempotency_key(RunContext.__new__(RunContext))  # type: ignore[arg-type]


def test_the_retry_prefix_is_public() -> None:
    assert MODEL_RETRY_ERROR_PREFIX == "ModelRetry: "
    assert AgentToolCallStatus.FAILED.value == "failed"
