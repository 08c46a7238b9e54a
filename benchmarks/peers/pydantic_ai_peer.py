"""The workload as an unchanged Pydantic AI agent: run plainly, and durably by the adapter.

``agent`` is a ``pydantic_ai.Agent`` whose model is Pydantic AI's own
``FunctionModel``, scripted like the workload's model (``workload.py``): a user
prompt gets ``TOOLS`` tool calls in one response (``tool_0`` .. ``tool_2``, each
``{"query": QUERY_TEXT}``, IDs ``c0`` .. ``c2`` as the ``dex:session-*`` rows'
scripted model asks), tool results get the ~0.4 KB answer; its tools are no-ops
declared with ``@agent.tool_plain`` that return the ~0.2 KB result. The agent is a
global of this importable module, so it travels to Ray's processes by reference.

- ``open_system`` (the ``pydantic-ai`` row): the agent run plainly in this process,
  Pydantic AI's own ``agent.run`` loop, its tools run by Pydantic AI (the 3 calls
  of a response at once), no durability; a session is ``TURNS`` runs, each
  continuing the message history of the one before. Set against
  ``dex:pydantic-ai`` it is what durability costs a Pydantic AI user.
- :func:`session_flow` (``dex:pydantic-ai``, see ``dex_engine.py``): the same agent
  through ``pydantic_ai_session_flow``; the tools are ``read`` by policy, so they
  run without approval, on the default tool Step options (pooled executors), as
  ``dex:session-shared-ray``'s.
- :func:`run_state_bytes`: what the runner hands the session as
  ``framework_run_state`` per ``RunModel``, measured by driving ``TURNS`` turns of
  the runner contract by hand in this process (no Ray, no store): each user
  message and every ``new_messages`` are stored as the session stores them, the
  tool calls get succeeded records, and each ``run_model_step`` outcome is
  weighed (UTF-8 bytes of ``framework_run_state``; of ``framework_item`` of the
  messages it stores). The built-in loop's runner is weighed the same way, beside it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from pydantic_ai import Agent
from pydantic_ai import messages as pai
from pydantic_ai.models.function import AgentInfo, FunctionModel

from .workload import FINAL_TEXT, QUERY_TEXT, TOOL_TEXT, TOOLS, TURNS

# Distributions whose versions a job reports.
PACKAGES: tuple[str, ...] = ("pydantic-ai-slim",)

TOOL_NAMES = tuple(f"tool_{i}" for i in range(TOOLS))


def scripted_model(messages: list[pai.ModelMessage], info: AgentInfo) -> pai.ModelResponse:
    """The instant model: tool results get the answer, anything else ``TOOLS`` calls."""
    last = messages[-1]
    if any(isinstance(part, pai.ToolReturnPart) for part in last.parts):
        return pai.ModelResponse(parts=[pai.TextPart(FINAL_TEXT)])
    return pai.ModelResponse(
        parts=[
            pai.ToolCallPart(name, {"query": QUERY_TEXT}, tool_call_id=f"c{i}")
            for i, name in enumerate(TOOL_NAMES)
        ]
    )


agent = Agent(FunctionModel(scripted_model), instructions="Benchmark agent.", name="bench")


@agent.tool_plain
async def tool_0(query: str) -> str:
    """A no-op tool."""
    return TOOL_TEXT


@agent.tool_plain
async def tool_1(query: str) -> str:
    """A no-op tool."""
    return TOOL_TEXT


@agent.tool_plain
async def tool_2(query: str) -> str:
    """A no-op tool."""
    return TOOL_TEXT


# -- plainly, in process ----------------------------------------------------------------


class PlainPydanticAI:
    """One session is ``TURNS`` ``agent.run`` calls over one growing message history."""

    async def session(self, session_id: str) -> None:
        history: list[pai.ModelMessage] = []
        for turn in range(1, TURNS + 1):
            result = await agent.run(f"turn {turn}", message_history=history)
            if result.output != FINAL_TEXT:
                raise RuntimeError(f"turn {turn} answered {result.output!r}")
            history = result.all_messages()


@asynccontextmanager
async def open_system(workdir: Path, variant: str) -> AsyncIterator[PlainPydanticAI]:
    yield PlainPydanticAI()


# -- durably, through the adapter -------------------------------------------------------


def session_flow() -> Any:
    """The agent's session Flow: tools ``read`` by policy (no approval), the default
    tool Step options (pooled executors), as ``dex:session-shared-ray``."""
    from dex_agents_ray import AgentSessionOptions, ToolEffect, ToolPolicy
    from dex_agents_ray.pydantic_ai import pydantic_ai_session_flow

    options = AgentSessionOptions(
        tool_policies={name: ToolPolicy(ToolEffect.READ) for name in TOOL_NAMES}
    )
    return pydantic_ai_session_flow(agent, flow_type="BenchPydanticAI", options=options)


async def _drive(runner: Any, turns: int) -> dict[str, Any]:
    """``turns`` turns of the runner contract by hand, as the session drives it."""
    from dex_agents_ray.session import (
        AgentEventWriter,
        AgentMessage,
        AgentToolCall,
        AgentToolCallStatus,
        AgentTurnContext,
        FrameworkMessage,
        ToolCallsRequested,
        TurnCompleted,
    )

    stored: list[AgentMessage] = []

    def store(messages: Sequence[FrameworkMessage], turn_id: str) -> int:
        for message in messages:
            stored.append(
                AgentMessage(
                    sequence=len(stored) + 1,
                    turn_id=turn_id,
                    role=message.role,
                    framework_item=message.framework_item,
                    text=message.text,
                    tool_call_id=message.tool_call_id,
                    tool_name=message.tool_name,
                    tool_arguments=message.tool_arguments,
                    tool_output=message.tool_output,
                )
            )
        return sum(len(m.framework_item.encode()) for m in messages)

    async def heartbeat() -> None:
        return None

    run_state: list[int] = []  # per RunModel: bytes of framework_run_state (0: none)
    message_bytes: list[int] = []  # per RunModel: bytes of the messages it stores
    for number in range(1, turns + 1):
        turn_id = f"turn-{number}"
        store([runner.build_user_message(f"turn {number}")], turn_id)
        state: str | None = None
        records: dict[str, AgentToolCall] = {}
        for _ in range(2):
            context = AgentTurnContext(
                flow_id="bytes",
                turn_id=turn_id,
                attempt=1,
                messages=list(stored),
                framework_run_state=state,
                tool_calls=dict(records),
                events=AgentEventWriter(
                    lambda _event: None, turn_id=turn_id, step_execution_id="s", attempt=1
                ),
                heartbeat=heartbeat,
                tool_policies={name: _read_policy() for name in TOOL_NAMES},
            )
            outcome = await runner.run_model_step(context)
            message_bytes.append(store(outcome.new_messages, turn_id))
            if isinstance(outcome, TurnCompleted):
                run_state.append(0)
                break
            assert isinstance(outcome, ToolCallsRequested), outcome
            state = outcome.framework_run_state
            run_state.append(len(state.encode()))
            records = {
                call.tool_call_id: AgentToolCall(
                    tool_call_id=call.tool_call_id,
                    turn_id=turn_id,
                    tool_name=call.tool_name,
                    arguments=call.arguments,
                    effect=call.policy.effect,
                    requires_approval=False,
                    status=AgentToolCallStatus.SUCCEEDED,
                    deferral_order=order,
                    output=TOOL_TEXT,
                    runner_tool_state=call.runner_tool_state,
                )
                for order, call in enumerate(outcome.tool_calls)
            }
        else:
            raise RuntimeError(f"{runner!r}: turn {number} did not complete")
    asking = [b for b in run_state if b]
    return {
        "run_models": len(run_state),
        "run_state_bytes_per_run_model": sum(run_state) / len(run_state),
        "run_state_bytes_per_tool_call_response": sum(asking) / len(asking),
        "run_state_bytes_min_max": (min(asking), max(asking)),
        "message_bytes_per_run_model": sum(message_bytes) / len(message_bytes),
    }


def _read_policy() -> Any:
    from dex_agents_ray import ToolEffect, ToolPolicy

    return ToolPolicy(ToolEffect.READ)


def run_state_bytes(turns: int = TURNS) -> dict[str, dict[str, Any]]:
    """Bytes per ``RunModel`` of this agent's runner and of the built-in loop's runner
    on the same scripted workload (see the module)."""
    from dex_agents_ray.pydantic_ai import PydanticAIRunner

    from .dex_engine import session_flow as builtin_session_flow

    builtin = builtin_session_flow("ray").runner

    async def both() -> dict[str, dict[str, Any]]:
        return {
            "dex:pydantic-ai": await _drive(PydanticAIRunner(agent), turns),
            "dex:session-shared-ray": await _drive(builtin, turns),
        }

    return asyncio.run(both())
