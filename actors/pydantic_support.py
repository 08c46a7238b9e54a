"""The support desk written in Pydantic AI: an unchanged ``pydantic_ai.Agent``.

``agent`` is the Pydantic AI agent (``--agent actors.pydantic_support:agent`` wraps
it on the spot) and ``flow`` its session Flow (``--agent
actors.pydantic_support:flow``), run by ``dex_agents_ray.pydantic_ai``. Tools:

- ``lookup_order``: an order's item and status (``read`` by the session's policy);
- ``refund_order``: declared ``requires_approval=True`` in Pydantic AI, a
  ``non_idempotent_write`` by policy: waits for a person, runs at most once.

The model is Pydantic AI's ``FunctionModel`` scripted like ``actors.support``'s
(an order ID ``A1``..``A9`` in the last user message; "refund" asks for a refund)
unless ``DEX_AGENTS_MODEL`` names one (``openai/gpt-5-mini`` becomes Pydantic AI's
``openai:gpt-5-mini``; the provider's key comes from the environment).
"""

from __future__ import annotations

import os
import re

from pydantic_ai import Agent
from pydantic_ai import messages as pai
from pydantic_ai.models import Model
from pydantic_ai.models.function import AgentInfo, FunctionModel

from actors._models import MODEL_ENV
from actors.support import INSTRUCTIONS, ORDERS, refund
from dex_agents_ray import AgentSessionOptions, ToolEffect, ToolPolicy
from dex_agents_ray.pydantic_ai import pydantic_ai_session_flow

_ORDER_ID = re.compile(r"\bA\d\b", re.IGNORECASE)
_AMOUNT = re.compile(r"\b(\d{2,6})\b")


def scripted_model(messages: list[pai.ModelMessage], info: AgentInfo) -> pai.ModelResponse:
    """The scripted support model (deterministic: a rerun ``RunModel`` replies the same)."""
    returns = [p for p in messages[-1].parts if isinstance(p, pai.ToolReturnPart)]
    if returns:
        label = "Refund" if returns[-1].tool_name == "refund_order" else "Order status"
        return pai.ModelResponse(
            parts=[pai.TextPart(f"{label}: {returns[-1].model_response_str()}")]
        )
    prompts = [
        p.content
        for m in messages
        for p in m.parts
        if isinstance(p, pai.UserPromptPart) and isinstance(p.content, str)
    ]
    text = prompts[-1] if prompts else ""
    found = _ORDER_ID.search(text)
    if found is None:
        return pai.ModelResponse(parts=[pai.TextPart("Which order is it about (for example A1)?")])
    order_id = found.group(0).upper()
    if "refund" in text.lower():
        amount = _AMOUNT.search(text.replace(found.group(0), ""))
        args = {"order_id": order_id, "amount_cents": int(amount.group(1)) if amount else 500}
        return pai.ModelResponse(
            parts=[pai.ToolCallPart("refund_order", args, tool_call_id="refund")]
        )
    lookup = pai.ToolCallPart("lookup_order", {"order_id": order_id}, tool_call_id="lookup")
    return pai.ModelResponse(parts=[lookup])


def _model() -> Model | str:
    name = os.environ.get(MODEL_ENV, "").strip()
    if name:
        return name.replace("/", ":", 1)
    return FunctionModel(scripted_model)


agent = Agent(_model(), instructions=INSTRUCTIONS, name="pydantic_support")


@agent.tool_plain
def lookup_order(order_id: str) -> dict[str, str]:
    """Look up an order by its ID (such as A1): its item, status and amount paid."""
    return ORDERS.get(order_id.upper(), {"status": "unknown order"})


@agent.tool_plain(requires_approval=True)
def refund_order(order_id: str, amount_cents: int) -> str:
    """Refund part of an order, in cents (sends money: asks for approval first)."""
    return refund(order_id, amount_cents)


OPTIONS = AgentSessionOptions(
    tool_policies={
        "lookup_order": ToolPolicy(ToolEffect.READ),
        "refund_order": ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE),
    }
)
"""The session's policies: lookups are reads; a refund runs at most once, after approval."""

flow = pydantic_ai_session_flow(agent, flow_type="PydanticSupportDesk", options=OPTIONS)
