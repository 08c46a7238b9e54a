"""A support-desk agent: looks orders up, refunds with approval, asks when unsure.

``flow`` is the session Flow (``--agent actors.support:flow``). Tools:

- ``lookup_order`` (``read``): an order's item and status;
- ``search_orders`` (``read``): the IDs of the orders whose item names a word;
- ``refund_order`` (``non_idempotent_write``): asks for approval, runs at most
  once (a crash while it runs records ``outcome_unknown``);
- ``ask_user`` (built in): when a message names no order.

The scripted model (used unless a model is named, see ``actors._models``) reads
the order ID (``A1``..``A9``) from the last user message: "refund" in it asks for
a refund of ``amount_cents`` (500 unless a number is given), otherwise it looks
the order up; without an ID, "find my desk orders" searches, anything else asks
which order (the open orders as choices, any answer naming an order accepted).

The same desk runs every demo (``dex-agents-ray demo`` and ``control-demo``, the
inspector's example): ``support_flow(before_tool=...)`` gives them a hook that
runs at the start of each tool call, where a demo holds a call at a gate or
counts its invocations.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

from actors._models import SettingsModelResolver, default_model
from dex_agents_ray import OUTCOME_UNKNOWN_TOOL_RESULT, AgentSessionFlow, BuiltInTool, ToolEffect
from dex_agents_ray.builtin_loop import (
    AgentDefinition,
    ModelClient,
    ModelRequest,
    ScriptedModelClient,
    ScriptedModelReply,
    ScriptedToolCall,
    ToolCallContext,
    ToolResultItem,
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
    "amount the customer asks for. Find orders by item with search_orders. If the "
    "customer names no order, ask which one with ask_user."
)

_ORDER_ID = re.compile(r"\bA\d\b", re.IGNORECASE)
_AMOUNT = re.compile(r"\b(\d{2,6})\b")
_SEARCH = re.compile(r"\b(?:find|search)\b(?: for)?(?: my)? (\w+)", re.IGNORECASE)

ToolHook = Callable[[str, ToolCallContext], Awaitable[None]]
"""Runs at the start of each tool call with the tool's name and the call's context."""


def support_tools(before_tool: ToolHook | None = None) -> list[Any]:
    """The desk's tools; ``before_tool`` runs at the start of each call."""

    async def enter(tool_name: str, context: ToolCallContext) -> None:
        if before_tool is not None:
            await before_tool(tool_name, context)

    @function_tool(effect=ToolEffect.READ)
    async def lookup_order(order_id: str, context: ToolCallContext) -> dict[str, str]:
        """Look up an order by its ID (such as A1): its item, status and amount paid."""
        await enter("lookup_order", context)
        return ORDERS.get(order_id.upper(), {"status": "unknown order"})

    @function_tool(effect=ToolEffect.READ)
    async def search_orders(query: str, context: ToolCallContext) -> list[str]:
        """The IDs of the orders whose item names ``query`` (such as "lamp")."""
        await enter("search_orders", context)
        word = query.lower()
        return [order_id for order_id, order in ORDERS.items() if word in order["item"]]

    @function_tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
    async def refund_order(order_id: str, amount_cents: int, context: ToolCallContext) -> str:
        """Refund part of an order, in cents (sends money: asks for approval first)."""
        await enter("refund_order", context)
        return refund(order_id, amount_cents)

    return [lookup_order, search_orders, refund_order]


def refund(order_id: str, amount_cents: int) -> str:
    """The refund every version of the desk makes (built-in, Pydantic AI, Agents SDK)."""
    order = ORDERS.get(order_id.upper())
    if order is None:
        return f"no order {order_id}"
    if not 0 < amount_cents <= int(order["paid_cents"]):
        return f"refused: {amount_cents} cents is not between 1 and {order['paid_cents']}"
    return f"refunded {amount_cents} cents on {order_id.upper()}"


def open_orders() -> list[str]:
    """The orders not delivered yet, as ``ask_user`` choices ("A2: office chair, shipped")."""
    return [
        f"{order_id}: {order['item']}, {order['status']}"
        for order_id, order in ORDERS.items()
        if order["status"] in {"processing", "shipped"}
    ]


def scripted_support_model(request: ModelRequest) -> ScriptedModelReply:
    """The scripted support model (deterministic: a rerun ``RunModel`` replies the same)."""
    results = ScriptedModelClient.tool_results(request)
    # Tool results answer the model's calls only while no user message follows them
    # (a steered turn's messages come after the results of the turn they stopped).
    if results and isinstance(request.input[-1], ToolResultItem):
        result = results[-1]
        if result.tool_name == "ask_user":
            # The answer names the order: continue with it (and the first request).
            if _ORDER_ID.search(result.output) is None:
                return ScriptedModelReply(text="I need an order ID (such as A1) to help.")
            texts = ScriptedModelClient.user_texts(request)
            return _act(f"{texts[-1] if texts else ''} {result.output}", call_suffix="-answered")
        if result.tool_name == "refund_order":
            if result.output.startswith(OUTCOME_UNKNOWN_TOOL_RESULT):
                return ScriptedModelReply(
                    text="I could not confirm the refund: it may or may not have gone "
                    "through. I will not retry it on my own; please check the payment "
                    "provider before asking me again."
                )
            return ScriptedModelReply(text=f"Refund: {result.output}")
        if result.tool_name == "search_orders":
            return ScriptedModelReply(text=f"Orders found: {result.output}")
        return ScriptedModelReply(text=f"Order status: {result.output}")
    texts = ScriptedModelClient.user_texts(request)
    return _act(texts[-1] if texts else "")


def _act(text: str, *, call_suffix: str = "") -> ScriptedModelReply:
    found = _ORDER_ID.search(text)
    search = _SEARCH.search(text)
    if found is None and search is not None:
        return ScriptedModelReply(
            tool_calls=[
                ScriptedToolCall(
                    tool_call_id="call-search" + call_suffix,
                    tool_name="search_orders",
                    arguments={"query": search.group(1)},
                )
            ]
        )
    if found is None:
        return ScriptedModelReply(
            tool_calls=[
                ScriptedToolCall(
                    tool_call_id="call-ask" + call_suffix,
                    tool_name="ask_user",
                    arguments={
                        "question": "Which order is it about (for example A1)?",
                        "choices": open_orders(),
                        "allows_free_text": True,
                    },
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
    model: ModelClient | None = None,
    *,
    flow_type: str = "SupportDesk",
    before_tool: ToolHook | None = None,
) -> AgentSessionFlow:
    """The support-desk session Flow (``model`` overrides the default choice;
    ``before_tool`` runs at the start of each tool call)."""
    chosen = model if model is not None else default_model(scripted_support_model)
    agent = AgentDefinition(
        name="support-desk",
        instructions=INSTRUCTIONS,
        model=chosen,
        tools=support_tools(before_tool),
        built_in_tools=frozenset({BuiltInTool.ASK_USER}),
        resolve_model=SettingsModelResolver(chosen),
    )
    return builtin_agent_session_flow(agent, flow_type=flow_type)


flow = support_flow()
