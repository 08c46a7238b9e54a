"""A support-desk agent: looks orders up, refunds with approval, asks when unsure.

``flow`` is the session Flow (``--agent actors.support:flow``). Tools:

- ``lookup_order`` (``read``): an order's item and status;
- ``refund_order`` (``non_idempotent_write``): asks for approval, runs at most
  once (a crash while it runs records ``outcome_unknown``);
- ``ask_user`` (built in): when a message names no order.

The scripted model (used unless a model is named, see ``actors._models``) reads
the order ID (``A1``..``A9``) from the last user message: "refund" in it asks for
a refund of ``amount_cents`` (500 unless a number is given), otherwise it looks
the order up; without an ID it asks which order.
"""

from __future__ import annotations

import re

from actors._models import SettingsModelResolver, default_model
from dex_agents_ray import AgentSessionFlow, BuiltInTool, ToolEffect
from dex_agents_ray.builtin_loop import (
    AgentDefinition,
    ModelClient,
    ModelRequest,
    ScriptedModelClient,
    ScriptedModelReply,
    ScriptedToolCall,
    builtin_agent_session_flow,
    function_tool,
)

ORDERS: dict[str, dict[str, str]] = {
    f"A{i}": {"item": item, "status": status, "paid_cents": str(paid)}
    for i, (item, status, paid) in enumerate(
        [
            ("desk lamp", "delivered", 4200),
            ("office chair", "shipped", 18900),
            ("monitor arm", "processing", 7900),
            ("keyboard", "delivered", 9900),
            ("webcam", "returned", 6500),
            ("headset", "shipped", 12900),
            ("desk mat", "delivered", 2500),
            ("usb hub", "processing", 3900),
            ("notebook stand", "delivered", 4900),
        ],
        start=1,
    )
}

INSTRUCTIONS = (
    "You are a support agent for an office-supplies shop. Look orders up with "
    "lookup_order before answering. Refund only with refund_order, and only the "
    "amount the customer asks for. If the customer names no order, ask which one "
    "with ask_user."
)

_ORDER_ID = re.compile(r"\bA\d\b", re.IGNORECASE)
_AMOUNT = re.compile(r"\b(\d{2,6})\b")


@function_tool(effect=ToolEffect.READ)
async def lookup_order(order_id: str) -> dict[str, str]:
    """Look up an order by its ID (such as A1): its item, status and amount paid."""
    return ORDERS.get(order_id.upper(), {"status": "unknown order"})


@function_tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
async def refund_order(order_id: str, amount_cents: int) -> str:
    """Refund part of an order, in cents (sends money: asks for approval first)."""
    return refund(order_id, amount_cents)


def refund(order_id: str, amount_cents: int) -> str:
    """The refund every version of the desk makes (built-in, Pydantic AI, Agents SDK)."""
    order = ORDERS.get(order_id.upper())
    if order is None:
        return f"no order {order_id}"
    if not 0 < amount_cents <= int(order["paid_cents"]):
        return f"refused: {amount_cents} cents is not between 1 and {order['paid_cents']}"
    return f"refunded {amount_cents} cents on {order_id.upper()}"


def scripted_support_model(request: ModelRequest) -> ScriptedModelReply:
    """The scripted support model (deterministic: a rerun ``RunModel`` replies the same)."""
    results = ScriptedModelClient.tool_results(request)
    if results:
        result = results[-1]
        if result.tool_name == "ask_user":
            # The answer names the order: continue with it (and the first request).
            if _ORDER_ID.search(result.output) is None:
                return ScriptedModelReply(text="I need an order ID (such as A1) to help.")
            texts = ScriptedModelClient.user_texts(request)
            return _act(f"{texts[-1] if texts else ''} {result.output}", call_suffix="-answered")
        if result.tool_name == "refund_order":
            return ScriptedModelReply(text=f"Refund: {result.output}")
        return ScriptedModelReply(text=f"Order status: {result.output}")
    texts = ScriptedModelClient.user_texts(request)
    return _act(texts[-1] if texts else "")


def _act(text: str, *, call_suffix: str = "") -> ScriptedModelReply:
    found = _ORDER_ID.search(text)
    if found is None:
        return ScriptedModelReply(
            tool_calls=[
                ScriptedToolCall(
                    tool_call_id="call-ask" + call_suffix,
                    tool_name="ask_user",
                    arguments={"question": "Which order is it about (for example A1)?"},
                )
            ]
        )
    order_id = found.group(0).upper()
    if "refund" in text.lower():
        amount = _AMOUNT.search(text.replace(found.group(0), ""))
        return ScriptedModelReply(
            tool_calls=[
                ScriptedToolCall(
                    tool_call_id="call-refund" + call_suffix,
                    tool_name="refund_order",
                    arguments={
                        "order_id": order_id,
                        "amount_cents": int(amount.group(1)) if amount else 500,
                    },
                )
            ]
        )
    return ScriptedModelReply(
        tool_calls=[
            ScriptedToolCall(
                tool_call_id="call-lookup" + call_suffix,
                tool_name="lookup_order",
                arguments={"order_id": order_id},
            )
        ]
    )


def support_flow(
    model: ModelClient | None = None, *, flow_type: str = "SupportDesk"
) -> AgentSessionFlow:
    """The support-desk session Flow (``model`` overrides the default choice)."""
    chosen = model if model is not None else default_model(scripted_support_model)
    agent = AgentDefinition(
        name="support-desk",
        instructions=INSTRUCTIONS,
        model=chosen,
        tools=[lookup_order, refund_order],
        built_in_tools=frozenset({BuiltInTool.ASK_USER}),
        resolve_model=SettingsModelResolver(chosen),
    )
    return builtin_agent_session_flow(agent, flow_type=flow_type)


flow = support_flow()
