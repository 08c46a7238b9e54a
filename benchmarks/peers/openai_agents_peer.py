"""The workload as an unchanged OpenAI Agents SDK agent: run plainly, and durably by the adapter.

``agent`` is an ``agents.Agent`` whose model is a scripted ``agents`` ``Model``
(:class:`ScriptedModel`), like the workload's model (``workload.py``): a user
prompt gets ``TOOLS`` function calls in one response (``tool_0`` .. ``tool_2``,
each ``{"query": QUERY_TEXT}``), tool outputs get the ~0.4 KB answer (outputs
built with ``agents.testing``'s ``function_call`` and ``assistant_message``). Call
IDs are ``c<turn>-<i>``, ``turn`` the number of user messages in the model's
input: the SDK refuses a call ID used twice in one run, and a history that
repeats them across turns is not one a real model writes. Its tools are no-op
``@function_tool`` coroutines that return the ~0.2 KB result. The agent is a
global of this importable module, so it travels to Ray's processes by reference.

- ``open_system`` (the ``openai-agents`` row): the agent run plainly in this
  process, the SDK's own ``Runner.run`` loop, its tools run by the SDK (the 3
  calls of a response at once), tracing off, no durability; a session is
  ``TURNS`` runs, each continuing ``result.to_input_list()`` of the one before
  with the next user message. Set against ``dex:openai-agents`` it is what
  durability costs an Agents SDK user.
- :func:`session_flow` (``dex:openai-agents``, see ``dex_engine.py``): the same
  agent through ``openai_agents_session_flow``; the tools are ``read`` by policy,
  so they run without approval, on the default tool Step options (pooled
  executors), as ``dex:session-shared-ray``'s.
- :func:`run_state_bytes`: ``pydantic_ai_peer.run_state_bytes``'s measure for this
  agent's runner (``run_state.drive``: the runner contract driven by hand in this
  process, no Ray, no store), beside the built-in loop's. The OpenAI runner stores nothing of a turn
  until it completes (its run state carries the turn's items), so its stored
  message bytes per ``RunModel`` all land on the answering one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from agents import Agent, RunConfig, Runner, function_tool
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.testing import ScriptedModel as SdkScriptedModel
from agents.testing import assistant_message
from agents.testing import function_call as scripted_call
from agents.usage import Usage

from .workload import FINAL_TEXT, QUERY_TEXT, TOOL_TEXT, TOOLS, TURNS

# Distributions whose versions a job reports.
PACKAGES: tuple[str, ...] = ("openai-agents",)

TOOL_NAMES = tuple(f"tool_{i}" for i in range(TOOLS))


def _data(item: Any) -> dict[str, Any]:
    if isinstance(item, dict):
        return item
    data: dict[str, Any] = item.model_dump()
    return data


class ScriptedModel(Model):
    """The instant model: tool outputs get the answer, anything else ``TOOLS`` calls."""

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else input
        data = [_data(item) for item in items]
        turn = sum(1 for d in data if d.get("role") == "user")
        usage = Usage(requests=1)
        if data and data[-1].get("type") == "function_call_output":
            reply = assistant_message(FINAL_TEXT, item_id=f"m{turn}")
            return ModelResponse(output=[reply], usage=usage, response_id=None)
        calls = [
            scripted_call(name, {"query": QUERY_TEXT}, call_id=f"c{turn}-{i}")
            for i, name in enumerate(TOOL_NAMES)
        ]
        return ModelResponse(output=calls, usage=usage, response_id=None)

    async def stream_response(  # type: ignore[override]
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> AsyncIterator[Any]:
        """The same reply as stream events (through a one-step SDK ``ScriptedModel``)."""
        response = await self.get_response(system_instructions, input, *args, **kwargs)
        replay = SdkScriptedModel([response])
        async for event in replay.stream_response(system_instructions, input, *args, **kwargs):
            yield event


@function_tool
async def tool_0(query: str) -> str:
    """A no-op tool."""
    return TOOL_TEXT


@function_tool
async def tool_1(query: str) -> str:
    """A no-op tool."""
    return TOOL_TEXT


@function_tool
async def tool_2(query: str) -> str:
    """A no-op tool."""
    return TOOL_TEXT


agent = Agent(
    name="bench",
    instructions="Benchmark agent.",
    model=ScriptedModel(),
    tools=[tool_0, tool_1, tool_2],
)

# -- plainly, in process ----------------------------------------------------------------


class PlainOpenAIAgents:
    """One session is ``TURNS`` ``Runner.run`` calls over one growing input list."""

    def __init__(self) -> None:
        self._config = RunConfig(tracing_disabled=True)

    async def session(self, session_id: str) -> None:
        history: list[Any] = []
        for turn in range(1, TURNS + 1):
            history.append({"role": "user", "content": f"turn {turn}"})
            result = await Runner.run(agent, history, run_config=self._config)
            if result.final_output != FINAL_TEXT:
                raise RuntimeError(f"turn {turn} answered {result.final_output!r}")
            history = result.to_input_list()


@asynccontextmanager
async def open_system(workdir: Path, variant: str) -> AsyncIterator[PlainOpenAIAgents]:
    yield PlainOpenAIAgents()


# -- durably, through the adapter -------------------------------------------------------


def session_flow() -> Any:
    """The agent's session Flow: tools ``read`` by policy (no approval), the default
    tool Step options (pooled executors), as ``dex:session-shared-ray``."""
    from dex_agents_ray import AgentSessionOptions, ToolEffect, ToolPolicy
    from dex_agents_ray.openai_agents import openai_agents_session_flow

    options = AgentSessionOptions(
        tool_policies={name: ToolPolicy(ToolEffect.READ) for name in TOOL_NAMES}
    )
    return openai_agents_session_flow(agent, flow_type="BenchOpenAIAgents", options=options)


def run_state_bytes(turns: int = TURNS) -> dict[str, dict[str, Any]]:
    """Bytes per ``RunModel`` of this agent's runner on the scripted workload, measured
    and of the built-in loop's runner, as ``pydantic_ai_peer.run_state_bytes`` measures
    (see the module)."""
    from dex_agents_ray.openai_agents import OpenAIAgentsRunner

    from .run_state import builtin_bytes, drive

    mine = asyncio.run(drive(OpenAIAgentsRunner(agent), turns, TOOL_NAMES))
    return {"dex:openai-agents": mine, "dex:session-shared-ray": builtin_bytes(turns)}
