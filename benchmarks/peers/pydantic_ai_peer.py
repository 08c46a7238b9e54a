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
  messages it stores; ``run_state.drive``). The built-in loop's runner is weighed
  the same way, beside it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
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


def run_state_bytes(turns: int = TURNS) -> dict[str, dict[str, Any]]:
    """Bytes per ``RunModel`` of this agent's runner and of the built-in loop's runner
    on the same scripted workload (see the module)."""
    from dex_agents_ray.pydantic_ai import PydanticAIRunner

    from .run_state import builtin_bytes, drive

    mine = asyncio.run(drive(PydanticAIRunner(agent), turns, TOOL_NAMES))
    return {"dex:pydantic-ai": mine, "dex:session-shared-ray": builtin_bytes(turns)}
