"""Pydantic AI agents for the adapter's tests, defined in an importable module so
they travel by reference; the model is Pydantic AI's own ``FunctionModel``,
scripted by the turn's user prompt.

The tools log each real invocation (``InvocationLog``: ``<tool>/<pid>/<key>``)
under the state directory the test passes as ``deps``, and a ``gate`` argument
stops a tool at a ``FileGate`` so a test can kill a process at that point.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel
from pydantic_ai import Agent, ModelRetry, RunContext, ToolFailed
from pydantic_ai import messages as pai
from pydantic_ai.models.function import AgentInfo, FunctionModel

from dex_agents_ray import CONTEXT_SUMMARY_INSTRUCTIONS, CONTEXT_SUMMARY_NOTE_HEADER
from dex_agents_ray.pydantic_ai import deferred_tool_idempotency_key
from dex_agents_ray.testing import FileGate, InvocationLog


@dataclass(frozen=True)
class Deps:
    """What every tool reads: where to log and where its gates are."""

    state_dir: str
    tags: tuple[str, ...] = field(default=())


Reply = list[pai.ModelResponsePart]
"""One scripted model response."""


def call(name: str, call_id: str, **args: object) -> pai.ToolCallPart:
    return pai.ToolCallPart(name, dict(args), tool_call_id=call_id)


def text(value: str) -> pai.TextPart:
    return pai.TextPart(value)


SCRIPTS: dict[str, list[Reply]] = {
    "sum": [[call("add", "c1", a=2, b=3), call("multiply", "c2", a=4, b=5)], [text("5 and 20")]],
    "write": [[call("work", "w1")], [text("wrote")]],
    "write gated": [[call("work", "w1", gate="work-1")], [text("wrote")]],
    "refund A1": [[call("refund", "r1", order="A1")], [text("refunded")]],
    "broken": [[call("broken", "b1")]],
    "gone": [[call("gone", "g1")]],
    "explode": [[call("add", "f1", a=1, b=2)], [text("EXPLODE")]],
    "picky": [[call("picky", "p1", value=3)], [call("picky", "p2", value=12)]],
    "slashes": [[call("add", "x/1", a=1, b=1)], [call("add", "x/1", a=2, b=2)]],
    "order": [[call("final_result", "o1", order_id="A1", status="shipped")]],
    "bad order": [
        [call("final_result", "o1", order_id="A1")],
        [call("final_result", "o2", order_id="A1", status="late")],
    ],
}
"""The model's responses by the turn's user prompt, in order within the turn; past
the end, it reports the tool results and retry prompts it was shown."""


def _prompt_and_index(messages: list[pai.ModelMessage]) -> tuple[str, int]:
    """The turn's user prompt (the last one: adjacent requests arrive merged) and how
    many responses followed it."""
    responses = 0
    for message in reversed(messages):
        if isinstance(message, pai.ModelResponse):
            responses += 1
            continue
        for part in reversed(message.parts):
            if isinstance(part, pai.UserPromptPart):
                content = part.content
                return (content if isinstance(content, str) else str(content[0])), responses
    return "", responses


def scripted_model(messages: list[pai.ModelMessage], info: AgentInfo) -> pai.ModelResponse:
    if info.instructions == CONTEXT_SUMMARY_INSTRUCTIONS:  # a compaction summary request
        return pai.ModelResponse(parts=[pai.TextPart(f"summary of {len(str(messages))} chars")])
    prompt, index = _prompt_and_index(messages)
    summarized = any(
        isinstance(p, pai.UserPromptPart)
        and isinstance(p.content, str)
        and p.content.startswith(CONTEXT_SUMMARY_NOTE_HEADER)
        for m in messages
        for p in m.parts
    )
    if prompt.startswith("Message "):  # ContextWindowSessionScenario's turns
        return pai.ModelResponse(parts=[pai.TextPart(f"noted (summary seen: {summarized})")])
    if prompt.startswith("echo "):
        reply = f"echo: {prompt[5:]} ({len(messages)} messages)"
        return pai.ModelResponse(parts=[pai.TextPart(reply)])
    script = SCRIPTS.get(prompt)
    if script is None or index >= len(script):
        last = messages[-1]
        seen = [p.model_response_str() for p in last.parts if isinstance(p, pai.ToolReturnPart)]
        retries = [p.model_response() for p in last.parts if isinstance(p, pai.RetryPromptPart)]
        return pai.ModelResponse(parts=[pai.TextPart(f"seen {seen} retries {retries}")])
    reply = list(script[index])
    if reply == [text("EXPLODE")]:
        raise RuntimeError("the model service failed")
    return pai.ModelResponse(parts=reply)


def _log(ctx: RunContext[Deps], tool: str) -> None:
    key = deferred_tool_idempotency_key(ctx)
    InvocationLog(Path(ctx.deps.state_dir) / f"{tool}.log").record(f"{tool}/{os.getpid()}/{key}")


async def _maybe_gate(ctx: RunContext[Deps], gate: str | None) -> None:
    if gate:
        await FileGate(ctx.deps.state_dir, gate).wait_for_release()


agent = Agent(FunctionModel(scripted_model), deps_type=Deps, instructions="You help with sums.")


@agent.tool
async def add(ctx: RunContext[Deps], a: int, b: int) -> int:
    """Add two numbers."""
    _log(ctx, "add")
    return a + b


@agent.tool
def multiply(ctx: RunContext[Deps], a: int, b: int) -> int:
    """Multiply two numbers (a sync tool, which Pydantic AI runs in a thread)."""
    _log(ctx, "multiply")
    return a * b


@agent.tool
async def work(ctx: RunContext[Deps], gate: str | None = None) -> str:
    """A write the test classifies by policy; stops at ``gate`` when given."""
    _log(ctx, "work")
    await _maybe_gate(ctx, gate)
    return "worked"


@agent.tool(requires_approval=True)
async def refund(ctx: RunContext[Deps], order: str) -> str:
    """Refund an order (needs a person's approval)."""
    _log(ctx, "refund")
    return f"refunded {order}"


@agent.tool
async def broken(ctx: RunContext[Deps]) -> str:
    """Always raises."""
    _log(ctx, "broken")
    raise RuntimeError("the broken tool broke")


@agent.tool
async def gone(ctx: RunContext[Deps]) -> str:
    """Fails for good: the model should adapt."""
    _log(ctx, "gone")
    raise ToolFailed("the record is gone")


@agent.tool
async def picky(ctx: RunContext[Deps], value: int) -> str:
    """Asks the model to try again below 10."""
    _log(ctx, "picky")
    if value < 10:
        raise ModelRetry("value must be at least 10")
    return f"ok {value}"


class Order(BaseModel):
    order_id: str
    status: str


structured_agent = Agent(
    FunctionModel(scripted_model), deps_type=Deps, output_type=Order, name="structured"
)


CHAOS_TURNS = ("look, save and note", "pay the invoice")
"""One chaos session's user messages, in order."""

CHAOS_SCRIPT: dict[str, list[Reply]] = {
    CHAOS_TURNS[0]: [[call("look", "l1"), call("save", "s1"), call("note", "n1")], [text("ok")]],
    CHAOS_TURNS[1]: [[call("pay", "p1"), call("look", "l2")], [text("paid")]],
}


def chaos_model(messages: list[pai.ModelMessage], info: AgentInfo) -> pai.ModelResponse:
    prompt, index = _prompt_and_index(messages)
    script = CHAOS_SCRIPT.get(prompt, [])
    if index >= len(script):
        return pai.ModelResponse(parts=[text("done")])
    return pai.ModelResponse(parts=list(script[index]))


chaos_agent = Agent(FunctionModel(chaos_model), deps_type=Deps, name="chaos")


def _chaos_log(ctx: RunContext[Deps], tool: str) -> None:
    """``<call>/1/<session>/<turn>/<call>/<pid>``, as the chaos kit's invocations read."""
    key = deferred_tool_idempotency_key(ctx)
    session_id, turn_id, call_id = key.split("/")
    entry = f"{call_id}/1/{session_id}/{turn_id}/{call_id}/{os.getpid()}"
    InvocationLog(Path(ctx.deps.state_dir) / f"{tool}.log").record(entry)


@chaos_agent.tool
async def look(ctx: RunContext[Deps]) -> str:
    """A read."""
    _chaos_log(ctx, "look")
    return "looked"


@chaos_agent.tool
async def save(ctx: RunContext[Deps]) -> str:
    """An idempotent write."""
    _chaos_log(ctx, "save")
    return "saved"


@chaos_agent.tool
def note(ctx: RunContext[Deps]) -> str:
    """An unclassified call (a sync tool)."""
    _chaos_log(ctx, "note")
    return "noted"


@chaos_agent.tool(requires_approval=True)
async def pay(ctx: RunContext[Deps]) -> str:
    """A payment: approval, at most once."""
    _chaos_log(ctx, "pay")
    return "paid"
