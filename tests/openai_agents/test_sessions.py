"""Unchanged OpenAI Agents SDK agents as durable sessions on real Ray and SQLite.

The model is an ``agents`` ``Model`` scripted by prompt (tests/openai_agents/agents.py);
every tool logs its real runs with ``InvocationLog``.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, Runner, function_tool
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.testing import ScriptedModel, function_call
from agents.usage import Usage

from dex_agents_ray import (
    AgentEventType,
    AgentSessionClient,
    AgentSessionOptions,
    MessageRole,
    ToolEffect,
    ToolPolicy,
)
from dex_agents_ray.openai_agents import (
    get_current_deferred_tool_execution,
    openai_agents_session_flow,
)
from dex_agents_ray.testing import FileGate, InvocationLog, kill_flow_actor
from tests.openai_agents.agents import Context, stopper, triage
from tests.session.polling import has_interrupt, read_events, snapshot_when, turn_done

READS = AgentSessionOptions(default_tool_effect=ToolEffect.READ)


def _log(state_dir: Path, tool: str) -> list[tuple[int, str]]:
    entries = InvocationLog(state_dir / f"{tool}.log").entries()
    return [(int(e.split("/")[1]), e.split("/", 2)[2]) for e in entries]


async def _session(
    engine_factory: Any,
    state_dir: Path,
    *,
    options: AgentSessionOptions = READS,
    agent: Any = triage,
    flow_type: str = "OpenAITriage",
) -> tuple[Any, AgentSessionClient]:
    flow = openai_agents_session_flow(
        agent, flow_type=flow_type, options=options, context=Context(str(state_dir))
    )
    engine = await engine_factory([flow])
    return engine, AgentSessionClient(engine.client, flow)


async def _completed(sessions: AgentSessionClient, session_id: str) -> list[str]:
    history = await sessions.client.read_step_history(session_id)
    return [e.step_type for e in history if e.event_type == "step_completed"]


async def test_parallel_calls_run_once_each_in_their_own_tool_steps(
    engine_factory: Any, state_dir: Path
) -> None:
    _, sessions = await _session(engine_factory, state_dir)
    await sessions.start_session("sum-1", "sum")
    done = await snapshot_when(sessions, "sum-1", turn_done(1), timeout=120)

    assert done.state is not None and done.state.last_turn_error is None
    assert [(m.role, m.text or m.tool_name) for m in done.messages] == [
        (MessageRole.USER, "sum"),
        (MessageRole.ASSISTANT, "add"),
        (MessageRole.ASSISTANT, "multiply"),
        (MessageRole.TOOL, "5"),
        (MessageRole.TOOL, "20"),
        (MessageRole.ASSISTANT, "5 and 20"),
    ]
    steps = await _completed(sessions, "sum-1")
    assert steps.count("RunModel") == 2 and steps.count("CallTool") == 2
    add, multiply = _log(state_dir, "add"), _log(state_dir, "multiply")
    assert [k for _, k in add] == ["sum-1/turn-1/c1"]
    assert [k for _, k in multiply] == ["sum-1/turn-1/c2"]  # the sync tool too
    assert add[0][0] != os.getpid()
    assert done.usage.model_calls == 2 and done.usage.input_tokens == 20
    events = await read_events(sessions, "sum-1", until_type=AgentEventType.TURN_COMPLETED)
    deltas = [e.payload["text"] for e in events if e.type is AgentEventType.TEXT_DELTA]
    assert "".join(str(d) for d in deltas) == "5 and 20"  # streamed from the model


async def test_a_callable_needs_approval_is_evaluated_per_call(
    engine_factory: Any, state_dir: Path
) -> None:
    options = AgentSessionOptions(
        default_tool_effect=ToolEffect.READ,
        tool_policies={"work": ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE)},
    )
    _, sessions = await _session(engine_factory, state_dir, options=options)
    await sessions.start_session("refund-1", "refund A1")  # small: no approval
    await snapshot_when(sessions, "refund-1", turn_done(1), timeout=120)
    assert [k for _, k in _log(state_dir, "refund")] == ["refund-1/turn-1/r1"]

    assert await sessions.send_user_message("refund-1", "refund big")  # large: approval
    waiting = await snapshot_when(sessions, "refund-1", has_interrupt, timeout=120)
    assert len(_log(state_dir, "refund")) == 1
    assert await sessions.resolve_interrupt(
        "refund-1", waiting.pending_interrupts[0].interrupt_id, approved=True
    )
    done = await snapshot_when(sessions, "refund-1", turn_done(2), timeout=120)
    assert [k for _, k in _log(state_dir, "refund")][-1] == "refund-1/turn-2/r2"
    assert done.messages[-1].text == "big refund done"

    # An approved non-idempotent write (by policy) runs once, in a single-attempt Step.
    assert await sessions.send_user_message("refund-1", "write")
    waiting = await snapshot_when(sessions, "refund-1", has_interrupt, timeout=120)
    assert await sessions.resolve_interrupt(
        "refund-1", waiting.pending_interrupts[0].interrupt_id, approved=True
    )
    await snapshot_when(sessions, "refund-1", turn_done(3), timeout=120)
    assert [k for _, k in _log(state_dir, "work")] == ["refund-1/turn-3/w3"]
    assert "CallSingleAttemptTool" in await _completed(sessions, "refund-1")


async def test_a_handoff_survives_a_host_kill_and_the_new_agent_keeps_the_session(
    engine_factory: Any, state_dir: Path
) -> None:
    engine, sessions = await _session(engine_factory, state_dir)
    await sessions.start_session("bill-1", "bill me gated")
    await FileGate(state_dir, "invoice-1").wait_until_reached(timeout=120)
    await kill_flow_actor(engine, "bill-1")
    FileGate(state_dir, "invoice-1").release()
    done = await snapshot_when(sessions, "bill-1", turn_done(1), timeout=120)

    # billing answered (its instructions), after the host that ran triage died.
    assert done.messages[-1].text == "You bill."
    assert {k for _, k in _log(state_dir, "invoice")} == {"bill-1/turn-1/i1"}
    assert await sessions.send_user_message("bill-1", "echo next")
    after = await snapshot_when(sessions, "bill-1", turn_done(2), timeout=120)
    assert (after.messages[-1].text or "").endswith("You bill.)")  # billing starts turn 2


async def test_host_killed_during_a_single_attempt_write_is_outcome_unknown_and_ran_once(
    engine_factory: Any, state_dir: Path
) -> None:
    options = AgentSessionOptions(
        default_tool_effect=ToolEffect.READ,
        tool_policies={
            "work": ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE, requires_approval=False)
        },
    )
    engine, sessions = await _session(engine_factory, state_dir, options=options)
    await sessions.start_session("crash-1", "write gated")
    await FileGate(state_dir, "work-1").wait_until_reached(timeout=120)
    await kill_flow_actor(engine, "crash-1")
    done = await snapshot_when(sessions, "crash-1", turn_done(1), timeout=120)
    FileGate(state_dir, "work-1").release()

    assert [k for _, k in _log(state_dir, "work")] == ["crash-1/turn-1/w1"]
    output = next(m for m in done.messages if m.role is MessageRole.TOOL).tool_output or ""
    assert "outcome is unknown" in output
    assert await sessions.send_user_message("crash-1", "sum")
    after = await snapshot_when(sessions, "crash-1", turn_done(2), timeout=120)
    assert after.messages[-1].text == "5 and 20"


async def test_an_idempotent_write_killed_mid_call_is_retried_with_the_same_key(
    engine_factory: Any, state_dir: Path
) -> None:
    options = AgentSessionOptions(
        tool_policies={"work": ToolPolicy(ToolEffect.IDEMPOTENT_WRITE, requires_approval=False)}
    )
    engine, sessions = await _session(engine_factory, state_dir, options=options)
    await sessions.start_session("idem-1", "write gated")
    await FileGate(state_dir, "work-1").wait_until_reached(timeout=120)
    await kill_flow_actor(engine, "idem-1")
    FileGate(state_dir, "work-1").release()
    done = await snapshot_when(sessions, "idem-1", turn_done(1), timeout=120)

    keys = [k for _, k in _log(state_dir, "work")]
    assert len(keys) >= 2 and set(keys) == {"idem-1/turn-1/w1"}
    assert done.messages[-1].text == "wrote"


async def test_tool_use_behavior_ends_the_turn_with_the_tool_output_and_no_model_call(
    engine_factory: Any, state_dir: Path
) -> None:
    _, sessions = await _session(engine_factory, state_dir, agent=stopper, flow_type="Stopper")
    await sessions.start_session("stop-1", "stop at add")
    done = await snapshot_when(sessions, "stop-1", turn_done(1), timeout=120)

    assert done.messages[-1].text == "42"
    assert done.usage.model_calls == 1  # the resumed RunModel made no model call
    assert (await _completed(sessions, "stop-1")).count("RunModel") == 2


@pytest.mark.parametrize(
    ("prompt", "kind", "name"),
    [("forbidden", "input", "no_forbidden"), ("shout", "output", "no_shouting")],
)
async def test_a_tripped_guardrail_ends_the_turn_with_its_error(
    engine_factory: Any, state_dir: Path, prompt: str, kind: str, name: str
) -> None:
    _, sessions = await _session(engine_factory, state_dir, flow_type=f"Guard{kind}")
    await sessions.start_session("guard-1", prompt)
    done = await snapshot_when(sessions, "guard-1", turn_done(1), timeout=120)

    assert done.state is not None
    assert done.state.last_turn_error == f"the {kind} guardrail {name} tripped"
    assert (await _completed(sessions, "guard-1")).count("RunModel") == 1  # no retry


async def test_a_tool_call_id_with_a_slash_is_mapped(engine_factory: Any, state_dir: Path) -> None:
    _, sessions = await _session(engine_factory, state_dir)
    await sessions.start_session("ids-1", "slashes")
    done = await snapshot_when(sessions, "ids-1", turn_done(1), timeout=120)

    assert [k for _, k in _log(state_dir, "add")] == ["ids-1/turn-1/x_1"]
    tool = next(m for m in done.messages if m.role is MessageRole.TOOL)
    assert (tool.tool_call_id, tool.tool_output) == ("x_1", "2")
    assert '"x/1"' in tool.framework_item


async def test_the_execution_is_refused_outside_a_tool_step(state_dir: Path) -> None:
    with pytest.raises(RuntimeError, match="outside a tool Step"):
        get_current_deferred_tool_execution()
    result = await Runner.run(triage, "sum", context=Context(str(state_dir)))
    # Run plainly, the tools' hook raised: the SDK showed the model a tool error and
    # nothing was logged.
    outputs = [
        i["output"] for i in result.to_input_list() if i.get("type") == "function_call_output"
    ]
    assert outputs == ["An error occurred while running the tool. Please try again."] * 2
    assert _log(state_dir, "add") == []


class _Looping(Model):
    """Calls ``ping`` forever (a new call ID each time)."""

    async def get_response(self, system_instructions: Any, input: Any, *a: Any, **k: Any) -> Any:
        items = [i if isinstance(i, dict) else i.model_dump() for i in input]
        n = sum(1 for i in items if i.get("type") == "function_call")
        call = function_call("ping", "{}", call_id=f"p{n}")
        return ModelResponse(output=[call], usage=Usage(requests=1), response_id=None)

    async def stream_response(  # type: ignore[override]
        self, system_instructions: Any, input: Any, *a: Any, **k: Any
    ) -> AsyncIterator[Any]:
        reply = await self.get_response(system_instructions, input)
        async for event in ScriptedModel([reply]).stream_response(
            system_instructions, input, *a, **k
        ):
            yield event


async def test_max_turns_counts_the_model_calls_of_a_turn_across_steps(
    engine_factory: Any,
) -> None:
    @function_tool
    def ping() -> str:
        """Answers pong."""
        return "pong"

    looper = Agent(name="looper", model=_Looping(), tools=[ping])
    flow = openai_agents_session_flow(looper, flow_type="Looper", options=READS)
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("loop-1", "go")
    done = await snapshot_when(sessions, "loop-1", turn_done(1), timeout=180)

    assert done.state is not None
    assert done.state.last_turn_error == "max_turns reached: Max turns (10) exceeded"
    assert done.usage.model_calls == 10
    assert [m.tool_output for m in done.messages if m.role is MessageRole.TOOL] == ["pong"] * 10
