"""OpenAI Agents SDK agents for the adapter's tests, in an importable module (they
travel by reference). The model is an ``agents`` ``Model`` scripted by the turn's
user prompt (its replies built with ``agents.testing``'s ``function_call`` and
``assistant_message``), so a rerun ``RunModel`` in any process replies the same.

Tools log each real run (``InvocationLog``: ``<tool>/<pid>/<key>``) under the
state directory in the run context; ``gate`` stops a tool at a ``FileGate``.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents import (
    Agent,
    GuardrailFunctionOutput,
    RunContextWrapper,
    StopAtTools,
    function_tool,
    handoff,
    input_guardrail,
    output_guardrail,
)
from agents.items import ModelResponse, TResponseInputItem, TResponseOutputItem
from agents.models.interface import Model
from agents.testing import ScriptedModel, assistant_message, function_call
from agents.usage import Usage

from dex_agents_ray.openai_agents import get_current_deferred_tool_execution
from dex_agents_ray.testing import FileGate, InvocationLog


@dataclass(frozen=True)
class Context:
    """The run context every tool reads: where to log and where its gates are."""

    state_dir: str


Step = list[TResponseOutputItem]


def call(name: str, call_id: str, **args: Any) -> TResponseOutputItem:
    return function_call(name, args, call_id=call_id)


def say(text: str) -> TResponseOutputItem:
    return assistant_message(text, item_id=f"msg-{abs(hash(text)) % 10_000}")


SCRIPTS: dict[str, list[Step]] = {
    "sum": [[call("add", "c1", a=2, b=3), call("multiply", "c2", a=4, b=5)], [say("5 and 20")]],
    "write": [[call("work", "w3")], [say("wrote")]],
    "write gated": [[call("work", "w1", gate="work-1")], [say("wrote")]],
    "refund A1": [[call("refund", "r1", order="A1")], [say("refunded")]],
    "refund big": [[call("refund", "r2", order="A9", cents=90_000)], [say("big refund done")]],
    "bill me": [[call("transfer_to_billing", "h1")], [call("invoice", "i1")], [say("{agent}")]],
    "bill me gated": [
        [call("transfer_to_billing", "h1")],
        [call("invoice", "i1", gate="invoice-1")],
        [say("{agent}")],
    ],
    "stop at add": [[call("add", "c1", a=40, b=2)], [say("never reached")]],
    "forbidden": [[say("never")]],
    "shout": [[say("LOUD")]],
    "slashes": [[call("add", "x/1", a=1, b=1)], [say("ok")]],
    "mcp echo": [[call("t__echo", "m1", text="hi")], [say("echoed")]],
}
"""Replies by the turn's user prompt, in order within the turn; past the end, the
model answers with the outputs it was shown."""


def _prompt_and_index(items: list[TResponseInputItem]) -> tuple[str, int, list[str]]:
    prompt, start = "", 0
    for position, item in enumerate(items):
        if isinstance(item, dict) and item.get("role") == "user":
            content = item.get("content")
            prompt, start = (content if isinstance(content, str) else str(content)), position
    responses, outputs, in_response = 0, [], False
    for item in items[start + 1 :]:
        data = item if isinstance(item, dict) else item.model_dump()  # type: ignore[union-attr]
        produced = (
            data.get("type") in ("function_call", "reasoning") or data.get("role") == "assistant"
        )
        if produced and not in_response:
            responses += 1
        in_response = produced
        if data.get("type") == "function_call_output":
            outputs.append(str(data.get("output")))
    return prompt, responses, outputs


def _is_agent(item: TResponseOutputItem) -> bool:
    """A scripted reply that answers with the answering agent's instructions."""
    content = getattr(item, "content", None) or []
    return any(getattr(part, "text", None) == "{agent}" for part in content)


class PromptScriptedModel(Model):
    """Replies from ``SCRIPTS`` by the input's last user prompt (see the module),
    through a one-step ``agents.testing.ScriptedModel`` per call (streamed or not)."""

    def _step(self, system_instructions: Any, input: Any) -> Step:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        prompt, index, outputs = _prompt_and_index(items)
        script = SCRIPTS.get(prompt, [])
        if prompt.startswith("echo "):
            return [say(f"echo: {prompt[5:]} ({len(items)} items, {system_instructions})")]
        if index < len(script):
            return [say(system_instructions) if _is_agent(i) else i for i in script[index]]
        return [say(f"seen {outputs}")]

    def _scripted(self, step: Step) -> ScriptedModel:
        usage = Usage(requests=1, input_tokens=10, output_tokens=5, total_tokens=15)
        return ScriptedModel([step], default_usage=usage)

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        step = self._step(system_instructions, input)
        return await self._scripted(step).get_response(system_instructions, input, *args, **kwargs)

    async def stream_response(  # type: ignore[override]
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> AsyncIterator[Any]:
        step = self._step(system_instructions, input)
        scripted = self._scripted(step)
        async for event in scripted.stream_response(system_instructions, input, *args, **kwargs):
            yield event


MODEL = PromptScriptedModel()


def _log(ctx: RunContextWrapper[Context], tool: str) -> None:
    key = get_current_deferred_tool_execution().idempotency_key
    log = InvocationLog(Path(ctx.context.state_dir) / f"{tool}.log")
    log.record(f"{tool}/{os.getpid()}/{key}")


@function_tool
async def add(ctx: RunContextWrapper[Context], a: int, b: int) -> int:
    """Add two numbers."""
    _log(ctx, "add")
    return a + b


@function_tool
def multiply(ctx: RunContextWrapper[Context], a: int, b: int) -> int:
    """Multiply two numbers (a sync tool)."""
    _log(ctx, "multiply")
    return a * b


@function_tool
async def work(ctx: RunContextWrapper[Context], gate: str | None = None) -> str:
    """A write the test classifies by policy; stops at ``gate`` when given."""
    _log(ctx, "work")
    if gate:
        await FileGate(ctx.context.state_dir, gate).wait_for_release()
    return "worked"


async def _large_refund(ctx: RunContextWrapper[Any], params: dict[str, Any], call_id: str) -> bool:
    return int(params.get("cents", 0)) > 10_000


@function_tool(needs_approval=_large_refund)
async def refund(ctx: RunContextWrapper[Context], order: str, cents: int = 500) -> str:
    """Refund an order (large refunds need a person's approval)."""
    _log(ctx, "refund")
    return f"refunded {cents} on {order}"


@function_tool
async def invoice(ctx: RunContextWrapper[Context], gate: str | None = None) -> str:
    """Billing's tool; stops at ``gate`` when given."""
    _log(ctx, "invoice")
    if gate:
        await FileGate(ctx.context.state_dir, gate).wait_for_release()
    return "invoice sent"


@input_guardrail
async def no_forbidden(ctx: Any, agent: Any, user_input: Any) -> GuardrailFunctionOutput:
    return GuardrailFunctionOutput(
        output_info=None, tripwire_triggered="forbidden" in str(user_input)
    )


@output_guardrail
async def no_shouting(ctx: Any, agent: Any, output: Any) -> GuardrailFunctionOutput:
    return GuardrailFunctionOutput(output_info=None, tripwire_triggered=str(output).isupper())


billing = Agent[Context](name="billing", instructions="You bill.", model=MODEL, tools=[invoice])

triage = Agent[Context](
    name="triage",
    instructions="You triage.",
    model=MODEL,
    tools=[add, multiply, work, refund],
    handoffs=[handoff(billing)],
    input_guardrails=[no_forbidden],
    output_guardrails=[no_shouting],
)

stopper = Agent[Context](
    name="stopper",
    instructions="Tool output is the answer.",
    model=MODEL,
    tools=[add, multiply],
    tool_use_behavior=StopAtTools(stop_at_tool_names=["add"]),
)
