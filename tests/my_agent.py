"""The agent of the spec's "Testing an adapter" example (``tests.my_agent``).

The test process builds it for its client and the Worker child
(``tests/my_worker.py``) for its hosts. Its tools read ``MY_STATE_DIR`` when
they run, so they work only where the stack's ``worker_env`` reached: in the
Worker child's hosts and executors, never in the test process.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from dex_agents_ray import AgentSessionFlow, ToolEffect
from dex_agents_ray.builtin_loop import (
    AgentDefinition,
    ModelRequest,
    ScriptedModelClient,
    ScriptedModelReply,
    ScriptedToolCall,
    UserTextItem,
    builtin_agent_session_flow,
    function_tool,
)
from dex_agents_ray.testing import FileGate, InvocationLog

LOOKUP_GATE = "lookup"
"""The gate ``lookup_order`` waits at, so a test can kill the Worker mid-call."""


def state_dir() -> Path:
    return Path(os.environ["MY_STATE_DIR"])


@function_tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
def refund_order(order_id: int) -> str:
    """Refund an order (a write: it waits for approval and runs at most once)."""
    InvocationLog(state_dir() / "refund.log").record(f"refund {order_id}")
    return f"refunded order {order_id}"


@function_tool(effect=ToolEffect.READ)
async def lookup_order(order_id: int) -> str:
    """Look up an order (a read: an attempt cut short runs again)."""
    await FileGate(state_dir(), LOOKUP_GATE).wait_for_release()
    return f"order {order_id} has shipped"


def respond(request: ModelRequest) -> ScriptedModelReply:
    """Call the tool the user's message names, then answer with its result."""
    results = ScriptedModelClient.tool_results(request)
    if results:
        return ScriptedModelReply(text="; ".join(result.output for result in results))
    text = next(item.text for item in reversed(request.input) if isinstance(item, UserTextItem))
    match = re.fullmatch(r"(refund|look up) order (\d+)", text)
    if match is None:
        return ScriptedModelReply(text=f"I cannot help with {text!r}.")
    tool = refund_order if match.group(1) == "refund" else lookup_order
    call = ScriptedToolCall(
        tool_call_id="call-1", tool_name=tool.name, arguments={"order_id": int(match.group(2))}
    )
    return ScriptedModelReply(tool_calls=[call])


def build_flow() -> AgentSessionFlow:
    agent = AgentDefinition(
        name="orders",
        instructions="You refund and look up orders.",
        model=ScriptedModelClient(respond),
        tools=[refund_order, lookup_order],
    )
    return builtin_agent_session_flow(agent, flow_type="OrdersAgent")
