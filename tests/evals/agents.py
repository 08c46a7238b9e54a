"""A scripted eval agent whose every real model and tool call is logged.

``eval_flow(state_dir)`` builds a built-in-loop session Flow over a scripted
model. For a user message the model calls ``lookup(key=<message>)`` (a read),
``refund(key=<message>)`` (a write that asks approval) when the message says
"refund", or ``ask_user`` when it says "ask"; after the tool results it answers
``"done: <output>"``. Each real model call is logged as ``<last user
text>|<tool results seen>`` in ``model.log`` and each tool run as its key in
``<tool>.log``, so a repeated call shows as a key logged twice; ``model-times.log``
has each model call's time and process ID. A message
containing ``GATE`` makes ``lookup`` wait at ``FileGate(state_dir, "lookup")``.
"""

from __future__ import annotations

import os
import time

from dex_agents_ray import AgentSessionFlow, BuiltInTool, ToolEffect
from dex_agents_ray.builtin_loop import (
    AgentDefinition,
    ModelRequest,
    ModelUsage,
    ScriptedModelClient,
    ScriptedModelReply,
    ScriptedToolCall,
    builtin_agent_session_flow,
    function_tool,
)
from dex_agents_ray.evals import RateLimitedModelClient
from dex_agents_ray.testing import FileGate, InvocationLog


class ProviderRateLimited(Exception):
    """What a provider's 429 looks like to a model client (LiteLLM's has these fields)."""

    status_code = 429

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"429 Too Many Requests (Retry-After: {retry_after})")
        self.retry_after = retry_after


def eval_flow(
    state_dir: str,
    *,
    flow_type: str = "EvalAgent",
    storm: int = 0,
    retry_after: float = 1.0,
    wrap: bool = True,
) -> AgentSessionFlow:
    """``storm``: the first that many model calls (across every process) answer 429
    with ``retry_after``, logged as ``<time> <pid> 429`` in ``model-times.log``;
    the model is then wrapped in ``RateLimitedModelClient`` (unless ``wrap`` is
    ``False``: the session reports the 429s itself)."""
    state = str(state_dir)

    def log(name: str) -> InvocationLog:
        return InvocationLog(os.path.join(state, f"{name}.log"))

    async def lookup(key: str) -> str:
        """Look a key up."""
        log("lookup").record(key)
        if "GATE" in key:
            await FileGate(state, "lookup").wait_for_release()
        return f"found {key}"

    async def refund(key: str) -> str:
        """Refund (a write)."""
        log("refund").record(key)
        return f"refunded {key}"

    def script(request: ModelRequest) -> ScriptedModelReply:
        texts = ScriptedModelClient.user_texts(request)
        text = texts[-1] if texts else ""
        results = ScriptedModelClient.tool_results(request)
        seen = sum(1 for item in request.input if type(item).__name__ == "ToolResultItem")
        if storm and len(log("storm").entries()) < storm:
            log("storm").record(text)
            log("model-times").record(f"{time.time()} {os.getpid()} 429")
            raise ProviderRateLimited(retry_after)
        log("model").record(f"{text}|{seen}")
        log("model-times").record(f"{time.time()} {os.getpid()} ok")
        usage = ModelUsage(input_tokens=10, output_tokens=5)
        if results:
            return ScriptedModelReply(text=f"done: {results[-1].output}", usage=usage)
        if "ask" in text:
            call = ScriptedToolCall(tool_name="ask_user", arguments={"question": "Which one?"})
        elif "refund" in text:
            call = ScriptedToolCall(tool_name="refund", arguments={"key": text})
        else:
            call = ScriptedToolCall(tool_name="lookup", arguments={"key": text})
        return ScriptedModelReply(tool_calls=[call], usage=usage)

    agent = AgentDefinition(
        name="eval-agent",
        instructions="Look things up.",
        model=RateLimitedModelClient(ScriptedModelClient(script))
        if storm and wrap
        else ScriptedModelClient(script),
        tools=[
            function_tool(lookup, effect=ToolEffect.READ),
            function_tool(refund, effect=ToolEffect.NON_IDEMPOTENT_WRITE),
        ],
        built_in_tools=frozenset({BuiltInTool.ASK_USER}),
    )
    return builtin_agent_session_flow(agent, flow_type=flow_type)


def provider_api_key() -> str:
    return "sk-test-eval"


def litellm_eval_flow(api_base: str) -> AgentSessionFlow:
    """A tool-less agent on LiteLLM (``openai/gpt-5-mini`` at ``api_base``), its model
    wrapped in ``RateLimitedModelClient``."""
    from dex_agents_ray.litellm import LiteLLMModelClient

    model = LiteLLMModelClient(
        "openai/gpt-5-mini", api_base=api_base, api_key_provider=provider_api_key
    )
    agent = AgentDefinition(
        name="eval-litellm",
        instructions="Answer.",
        model=RateLimitedModelClient(model),
    )
    return builtin_agent_session_flow(agent, flow_type="EvalLiteLLMAgent")
