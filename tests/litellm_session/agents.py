"""A built-in loop agent on LiteLLMModelClient, pointed at the loopback provider server.

Ray workers import this module by name to unpickle the Flow.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace

from dex_agents_ray import AgentSessionFlow, ToolCallStepOptions, ToolEffect
from dex_agents_ray.builtin_loop import (
    AgentDefinition,
    BuiltinLoopAgentRunner,
    builtin_agent_session_flow,
    builtin_agent_session_options,
    function_tool,
)
from dex_agents_ray.engine import RayTaskOptions
from dex_agents_ray.litellm import LiteLLMModelClient


@function_tool(effect=ToolEffect.READ)
async def get_weather(city: str) -> str:
    """Weather for a city."""
    return f"sunny in {city}"


def api_key() -> str:
    return "sk-test-session"


def build_flow(api_base: str) -> AgentSessionFlow:
    agent = AgentDefinition(
        name="weather",
        instructions="You answer weather questions.",
        model=LiteLLMModelClient("openai/gpt-5-mini", api_base=api_base, api_key_provider=api_key),
        tools=[get_weather],
    )
    return builtin_agent_session_flow(agent, flow_type="LiteLLMWeatherAgent")


@function_tool(effect=ToolEffect.READ, step_options=ToolCallStepOptions(run_inline=True))
async def host_report() -> str:
    """What the session's host process has loaded (runs in the host)."""
    return json.dumps({"pid": os.getpid(), "litellm": "litellm" in sys.modules})


def build_reporting_flow(api_base: str, *, model_in_task: bool) -> AgentSessionFlow:
    """An agent whose only tool reports on the host; ``RunModel`` in a Ray task or not."""
    agent = AgentDefinition(
        name="reporter",
        instructions="You report on the host.",
        model=LiteLLMModelClient("openai/gpt-5-mini", api_base=api_base, api_key_provider=api_key),
        tools=[host_report],
    )
    options = replace(
        builtin_agent_session_options(agent),
        model_ray_options=RayTaskOptions(num_cpus=0.1) if model_in_task else None,
    )
    kind = "Task" if model_in_task else "Host"
    return AgentSessionFlow(
        BuiltinLoopAgentRunner(agent), flow_type=f"Reporter{kind}Model", options=options
    )
