"""A built-in loop agent for session tests on the engine.

The Flow is stored by value with the engine and unpickled in Ray workers,
which import this module by name.
"""

from __future__ import annotations

from dex_agents_ray import AgentSessionFlow, ToolEffect
from dex_agents_ray.builtin_loop import (
    AgentDefinition,
    ModelRequest,
    ScriptedModelClient,
    ScriptedModelReply,
    ScriptedToolCall,
    ToolCallContext,
    builtin_agent_session_flow,
    function_tool,
)


@function_tool(effect=ToolEffect.READ)
async def lookup_order(order_id: str, context: ToolCallContext) -> dict[str, str]:
    """Look up an order by its ID."""
    return {"order_id": order_id, "status": "shipped", "key": context.idempotency_key}


def reply(request: ModelRequest) -> ScriptedModelReply:
    results = ScriptedModelClient.tool_results(request)
    if results:
        return ScriptedModelReply(text="; ".join(result.output for result in results))
    return ScriptedModelReply(
        tool_calls=[
            ScriptedToolCall(
                tool_call_id="call-1", tool_name="lookup_order", arguments={"order_id": "A1"}
            )
        ]
    )


def build_flow() -> AgentSessionFlow:
    support_agent = AgentDefinition(
        name="support",
        instructions="You help customers with their orders.",
        model=ScriptedModelClient(reply),
        tools=[lookup_order],
    )
    return builtin_agent_session_flow(support_agent, flow_type="BuiltinSupportAgent")
