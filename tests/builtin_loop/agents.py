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


def plan_reply(request: ModelRequest) -> ScriptedModelReply:
    """Plan mode: write a draft with write_todos, then say what the model saw."""
    offered = sorted(tool.name for tool in request.tools)
    notes = [text for text in ScriptedModelClient.user_texts(request) if text.startswith("[Dex]")]
    if ScriptedModelClient.tool_results(request):
        return ScriptedModelReply(text=f"offered={offered}; note={notes[0].splitlines()[0]}")
    if "write_todos" not in offered:
        return ScriptedModelReply(text=f"offered={offered}; notes={len(notes)}")
    todos = {"todos": [{"content": "back up", "status": "pending"}]}
    return ScriptedModelReply(
        tool_calls=[ScriptedToolCall(tool_call_id="t1", tool_name="write_todos", arguments=todos)]
    )


def build_plan_flow() -> AgentSessionFlow:
    from dex_agents_ray import BuiltInTool

    agent = AgentDefinition(
        name="planner",
        instructions="You plan.",
        model=ScriptedModelClient(plan_reply),
        tools=[lookup_order],
        built_in_tools=frozenset({BuiltInTool.WRITE_TODOS}),
        plan_mode_enabled=True,
    )
    return builtin_agent_session_flow(agent, flow_type="BuiltinPlanner")
