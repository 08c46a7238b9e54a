"""The support desk written in the OpenAI Agents SDK: an unchanged ``agents.Agent``.

``agent`` is the Agents SDK agent (``--agent actors.openai_support:agent`` wraps it
on the spot) and ``flow`` its session Flow (``--agent actors.openai_support:flow``),
run by ``dex_agents_ray.openai_agents``. Tools:

- ``lookup_order``: an order's item and status (``read`` by the session's policy);
- ``refund_order``: declared ``needs_approval=True`` in the SDK, a
  ``non_idempotent_write`` by policy: waits for a person, runs at most once.

The model is an Agents SDK ``Model`` scripted like ``actors.support``'s (an order ID
``A1``..``A9`` in the last user message; "refund" asks for a refund) unless
``DEX_AGENTS_MODEL`` names one: ``openai/<name>`` runs on the SDK's OpenAI model,
any other LiteLLM name on its ``LitellmModel`` (the provider's key comes from the
environment).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import AsyncIterator
from typing import Any

from agents import Agent, function_tool
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.testing import ScriptedModel as SdkScriptedModel
from agents.testing import assistant_message, function_call
from agents.usage import Usage

from actors._models import MODEL_ENV
from actors.support import INSTRUCTIONS, ORDERS, refund
from dex_agents_ray import AgentSessionOptions, ToolEffect, ToolPolicy
from dex_agents_ray.openai_agents import openai_agents_session_flow

_ORDER_ID = re.compile(r"\bA\d\b", re.IGNORECASE)
_AMOUNT = re.compile(r"\b(\d{2,6})\b")


def _data(item: Any) -> dict[str, Any]:
    return item if isinstance(item, dict) else dict(item.model_dump())


class ScriptedSupportModel(Model):
    """The scripted support model (deterministic: a rerun ``RunModel`` replies the same)."""

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else input
        data = [_data(item) for item in items]
        usage = Usage(requests=1)
        last = data[-1] if data else {}
        if last.get("type") == "function_call_output":
            name = next(
                (d.get("name") for d in data if d.get("call_id") == last.get("call_id")), ""
            )
            label = "Refund" if name == "refund_order" else "Order status"
            reply = assistant_message(f"{label}: {last.get('output')}")
            return ModelResponse(output=[reply], usage=usage, response_id=None)
        prompts = [str(d.get("content")) for d in data if d.get("role") == "user"]
        text = prompts[-1] if prompts else ""
        turn = len(prompts)
        found = _ORDER_ID.search(text)
        if found is None:
            ask = assistant_message("Which order is it about (for example A1)?")
            return ModelResponse(output=[ask], usage=usage, response_id=None)
        order_id = found.group(0).upper()
        if "refund" in text.lower():
            amount = _AMOUNT.search(text.replace(found.group(0), ""))
            cents = int(amount.group(1)) if amount else 500
            refund = json.dumps({"order_id": order_id, "amount_cents": cents})
            call = function_call("refund_order", refund, call_id=f"refund-{turn}")
        else:
            lookup = json.dumps({"order_id": order_id})
            call = function_call("lookup_order", lookup, call_id=f"lookup-{turn}")
        return ModelResponse(output=[call], usage=usage, response_id=None)

    async def stream_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> AsyncIterator[Any]:
        """The same reply as stream events (through a one-step SDK ``ScriptedModel``)."""
        response = await self.get_response(system_instructions, input, *args, **kwargs)
        replay = SdkScriptedModel([response])
        async for event in replay.stream_response(system_instructions, input, *args, **kwargs):
            yield event


def _model() -> Model | str:
    name = os.environ.get(MODEL_ENV, "").strip()
    if not name:
        return ScriptedSupportModel()
    if name.startswith("openai/"):
        return name.removeprefix("openai/")
    from agents.extensions.models.litellm_model import LitellmModel

    return LitellmModel(model=name)


@function_tool
def lookup_order(order_id: str) -> str:
    """Look up an order by its ID (such as A1): its item, status and amount paid."""
    return json.dumps(ORDERS.get(order_id.upper(), {"status": "unknown order"}))


@function_tool(needs_approval=True)
def refund_order(order_id: str, amount_cents: int) -> str:
    """Refund part of an order, in cents (sends money: asks for approval first)."""
    return refund(order_id, amount_cents)


agent = Agent(
    name="openai_support",
    instructions=INSTRUCTIONS,
    model=_model(),
    tools=[lookup_order, refund_order],
)

OPTIONS = AgentSessionOptions(
    tool_policies={
        "lookup_order": ToolPolicy(ToolEffect.READ),
        "refund_order": ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE),
    }
)
"""The session's policies: lookups are reads; a refund runs at most once, after approval."""

flow = openai_agents_session_flow(agent, flow_type="OpenAISupportDesk", options=OPTIONS)
