"""A built-in loop agent on LiteLLMModelClient, pointed at the loopback provider server.

Ray workers import this module by name to unpickle the Flow.
"""

from __future__ import annotations

from dex_agents_ray import AgentSessionFlow, ToolEffect
from dex_agents_ray.builtin_loop import AgentDefinition, builtin_agent_session_flow, function_tool
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
