"""The agent under test of the eval-as-a-Ray-job test, as a user ships one: a module
in the job's working directory (the test copies this file there) that
``dex-agents-ray eval --agent eval_job_agent:flow`` loads. It imports only
``dex_agents_ray``.

``flow()`` reads the test's state directory from ``$EVAL_JOB_STATE`` (the job's
``env_vars``). For a user message the scripted model calls ``lookup(key=<message>)``
(a read), or ``refund(key=<message>)`` (a non-idempotent write that asks approval)
when the message says "refund"; after the tool result it answers ``"done:
<output>"``. Each real model call is logged as ``<last user text>|<tool results
seen>`` in ``model.log`` and each tool run as its key in ``<tool>.log``, so a call
that ran twice shows as a key logged twice. A message containing ``TOOLGATE``
makes its tool wait at ``FileGate(state, "tool")``; one containing ``MODELGATE``
makes its first model call wait at ``FileGate(state, "model")`` (after logging).
"""

from __future__ import annotations

import os

from dex_agents_ray import AgentSessionFlow, ToolEffect
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
from dex_agents_ray.testing import FileGate, InvocationLog

STATE_ENV = "EVAL_JOB_STATE"


def flow() -> AgentSessionFlow:
    """The session Flow (``EvalJobAgent``) logging into ``$EVAL_JOB_STATE``."""
    state = os.environ[STATE_ENV]

    def log(name: str) -> InvocationLog:
        return InvocationLog(os.path.join(state, f"{name}.log"))

    async def lookup(key: str) -> str:
        """Look a key up."""
        log("lookup").record(key)
        if "TOOLGATE" in key:
            await FileGate(state, "tool").wait_for_release()
        return f"found {key}"

    async def refund(key: str) -> str:
        """Refund (a write)."""
        log("refund").record(key)
        if "TOOLGATE" in key:
            await FileGate(state, "tool").wait_for_release()
        return f"refunded {key}"

    async def script(request: ModelRequest) -> ScriptedModelReply:
        texts = ScriptedModelClient.user_texts(request)
        text = texts[-1] if texts else ""
        results = ScriptedModelClient.tool_results(request)
        log("model").record(f"{text}|{len(results)}")
        if "MODELGATE" in text and not results:
            await FileGate(state, "model").wait_for_release()
        usage = ModelUsage(input_tokens=10, output_tokens=5)
        if results:
            return ScriptedModelReply(text=f"done: {results[-1].output}", usage=usage)
        name = "refund" if "refund" in text else "lookup"
        call = ScriptedToolCall(tool_name=name, arguments={"key": text})
        return ScriptedModelReply(tool_calls=[call], usage=usage)

    agent = AgentDefinition(
        name="eval-job-agent",
        instructions="Look things up.",
        model=ScriptedModelClient(script),
        tools=[
            function_tool(lookup, effect=ToolEffect.READ),
            function_tool(refund, effect=ToolEffect.NON_IDEMPOTENT_WRITE),
        ],
    )
    return builtin_agent_session_flow(agent, flow_type="EvalJobAgent")
