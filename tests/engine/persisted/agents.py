"""The support agent behind the persisted-store fixture, the same file in every checkout.

``generate.py`` writes the fixture store with this definition and an older
checkout of the package; ``test_persisted_formats.py`` finishes its sessions
with the current one. The store keeps the Flow pickled, and the pickle names
the functions and classes here by module path (this module is importable), so
this file keeps its names; a worker imports them by name when it loads the
stored Flow.
"""

from __future__ import annotations

import os

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
from dex_agents_ray.testing import InvocationLog

SUPPORT_FLOW_TYPE = "PersistedSupport"
LOG_DIR_ENV = "DEX_PERSISTED_LOG_DIR"
"""The directory ``refund_order`` logs its calls to; Ray workers read it from
their environment, so it is set before Ray starts (``conftest.py`` beside this)."""

REFUND_PROMPT = "Refund order A7"
LOOKUP_PROMPT = "Where is A1?"
GREETING = "Hello"


@function_tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
async def refund_order(order_id: str, context: ToolCallContext) -> dict[str, str]:
    """Refund an order (once: it writes, so a person approves it first)."""
    log_dir = os.environ.get(LOG_DIR_ENV)
    if not log_dir:
        raise RuntimeError(f"refund_order logs its calls to ${LOG_DIR_ENV}, which is not set")
    InvocationLog(os.path.join(log_dir, "refund.log")).record(
        f"{context.idempotency_key}/{context.attempt}"
    )
    return {"order_id": order_id, "refunded": "yes"}


@function_tool(effect=ToolEffect.READ)
async def lookup_order(order_id: str) -> dict[str, str]:
    """Look up an order by its ID."""
    return {"order_id": order_id, "status": "shipped"}


def reply(request: ModelRequest) -> ScriptedModelReply:
    """Answer with the tool results once there are any, else by the last user text."""
    results = ScriptedModelClient.tool_results(request)
    if results:
        return ScriptedModelReply(text="; ".join(result.output for result in results))
    last = ScriptedModelClient.user_texts(request)[-1]
    if last == REFUND_PROMPT:
        call = ScriptedToolCall(
            tool_call_id="refund-1", tool_name="refund_order", arguments={"order_id": "A7"}
        )
        return ScriptedModelReply(tool_calls=[call])
    if last == LOOKUP_PROMPT:
        call = ScriptedToolCall(
            tool_call_id="lookup-1", tool_name="lookup_order", arguments={"order_id": "A1"}
        )
        return ScriptedModelReply(tool_calls=[call])
    return ScriptedModelReply(text=f"You said: {last}")


def support_flow() -> AgentSessionFlow:
    """A built-in loop support agent with a read tool and a tool that needs approval."""
    agent = AgentDefinition(
        name="support",
        instructions="You help customers with their orders.",
        model=ScriptedModelClient(reply),
        tools=[refund_order, lookup_order],
    )
    return builtin_agent_session_flow(agent, flow_type=SUPPORT_FLOW_TYPE)
