"""A built-in loop agent whose model is chosen by session settings (``resolve_model``).

Model ``a`` asks for an approved ``refund`` and then answers ``a: <result>``;
model ``b`` answers ``b: <user text>`` at once. Ray workers import this module by name.
"""

from __future__ import annotations

from typing import Any

from dex_agents_ray import AgentSessionFlow, ToolEffect
from dex_agents_ray.builtin_loop import (
    AgentDefinition,
    ModelRequest,
    ScriptedModelClient,
    ScriptedModelReply,
    ScriptedToolCall,
    builtin_agent_session_flow,
    function_tool,
)


@function_tool(effect=ToolEffect.IDEMPOTENT_WRITE, requires_approval=True)
async def refund(order_id: str) -> str:
    """Refund an order."""
    return f"refunded {order_id}"


def _reply_a(request: ModelRequest) -> ScriptedModelReply:
    results = ScriptedModelClient.tool_results(request)
    if results:
        return ScriptedModelReply(text="a: " + results[-1].output)
    return ScriptedModelReply(
        tool_calls=[
            ScriptedToolCall(tool_call_id="r1", tool_name="refund", arguments={"order_id": "A1"})
        ]
    )


def _reply_b(request: ModelRequest) -> ScriptedModelReply:
    return ScriptedModelReply(text="b: answered")


MODELS = {"a": ScriptedModelClient(_reply_a), "b": ScriptedModelClient(_reply_b)}


def _resolve(settings: Any) -> ScriptedModelClient:
    name = settings.get("model", "a")
    if name not in MODELS:
        raise LookupError("no such model is configured")
    return MODELS[name]


def build_flow() -> AgentSessionFlow:
    agent = AgentDefinition(
        name="settings",
        instructions="You answer.",
        model=MODELS["a"],
        tools=[refund],
        resolve_model=_resolve,
    )
    return builtin_agent_session_flow(agent, flow_type="SettingsAgent")
