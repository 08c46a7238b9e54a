"""A scripted support agent for the session inspector (``dex-agents-ray serve``).

    python -m examples.inspector_agent          # start three sessions in the default store
    dex-agents-ray serve --agent examples.inspector_agent:flow

The first command starts ``refund-7`` (waits for approval of a
``non_idempotent_write``), ``account-question`` (waits for an answer to an
``ask_user`` question) and ``order-status`` (answered), then exits: the sessions
wait in the store, holding no process. The second serves them to a browser.
The model is scripted (``ScriptedModelClient``), so no key is needed.
"""

from __future__ import annotations

import asyncio
import sys

from dex.runtime_errors import FlowNotFoundError

from dex_agents_ray import AgentSessionClient, BuiltInTool, ToolEffect
from dex_agents_ray.builtin_loop import (
    AgentDefinition,
    ModelRequest,
    ScriptedModelClient,
    ScriptedModelReply,
    ScriptedToolCall,
    ToolResultItem,
    builtin_agent_session_flow,
    function_tool,
)
from dex_agents_ray.engine import FlowEngine

FLOW_TYPE = "InspectorSupportAgent"


@function_tool(effect=ToolEffect.READ)
async def lookup_order(order_id: str) -> dict[str, str]:
    """Look up an order by its ID."""
    return {"order_id": order_id, "item": "desk lamp", "status": "delivered"}


@function_tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
async def refund_order(order_id: str, amount_cents: int) -> str:
    """Refund part of an order (sends money: needs approval, runs at most once)."""
    return f"refunded {amount_cents} cents on order {order_id}"


def support_model(request: ModelRequest) -> ScriptedModelReply:
    """Refunds need approval, account questions ask the user, the rest is echoed."""
    # Tool results answer the model's last call only while no user message follows.
    results = ScriptedModelClient.tool_results(request)
    if results and isinstance(request.input[-1], ToolResultItem):
        result = results[-1]
        if result.tool_name == "refund_order":
            return ScriptedModelReply(text=f"Done: {result.output}.")
        if result.tool_name == "ask_user":
            return ScriptedModelReply(text=f"I will use the {result.output} account.")
        return ScriptedModelReply(text=f"Order status: {result.output}")
    last = ScriptedModelClient.user_texts(request)[-1]
    lowered = last.lower()
    if "refund" in lowered:
        call = ScriptedToolCall(
            tool_call_id="call-refund",
            tool_name="refund_order",
            arguments={"order_id": "7", "amount_cents": 500},
        )
    elif "account" in lowered:
        call = ScriptedToolCall(
            tool_call_id="call-ask",
            tool_name="ask_user",
            arguments={
                "question": "Which account should I use?",
                "choices": ["checking", "savings"],
            },
        )
    elif "order" in lowered:
        call = ScriptedToolCall(
            tool_call_id="call-lookup", tool_name="lookup_order", arguments={"order_id": "7"}
        )
    else:
        return ScriptedModelReply(text=f"You said: {last}")
    return ScriptedModelReply(tool_calls=[call])


agent = AgentDefinition(
    name="support",
    instructions="You help customers with their orders.",
    model=ScriptedModelClient(support_model),
    tools=[lookup_order, refund_order],
    built_in_tools=frozenset({BuiltInTool.ASK_USER}),
)
flow = builtin_agent_session_flow(agent, flow_type=FLOW_TYPE)

SESSIONS = {
    "order-status": "Where is order 7?",
    "refund-7": "Please refund 5 EUR on order 7.",
    "account-question": "Send the money to my account.",
}


async def _until_waiting(sessions: AgentSessionClient, session_id: str) -> None:
    for _ in range(600):
        snapshot = await sessions.get_agent_snapshot(session_id)
        state = snapshot.state
        if snapshot.pending_interrupts or (
            state is not None and state.turn_count >= 1 and state.active_turn_id is None
        ):
            return
        await asyncio.sleep(0.1)
    raise TimeoutError(f"session {session_id} did not settle")


async def main(store: str | None = None) -> int:
    """Start the example sessions (idempotent: existing ones are left alone)."""
    engine = await FlowEngine.start([flow], store=store)
    try:
        sessions = AgentSessionClient(engine.client, flow)
        for session_id, text in SESSIONS.items():
            try:
                await engine.client.describe_flow(session_id)
                print(f"{session_id}: already there")
                continue
            except FlowNotFoundError:
                pass
            await sessions.start_session(session_id, text)
            await _until_waiting(sessions, session_id)
            print(f"{session_id}: started ({text!r})")
    finally:
        await engine.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(*sys.argv[1:2])))
