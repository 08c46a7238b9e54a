"""A function tool's call in its tool Step: the user's own ``FunctionTool``, once.

The call runs through the SDK's public invocation (``invoke_function_tool``:
argument parsing, the tool's timeout, its failure function), between the
tool's own input and output guardrails, as a run would run it. Inside the tool,
:func:`get_current_deferred_tool_execution` gives the Step's
``DeferredToolExecution`` (its ``idempotency_key`` is the same on every retry).
"""

from __future__ import annotations

import contextvars
import json
from typing import Any

from agents import Agent, FunctionTool
from agents.tool import invoke_function_tool
from agents.tool_context import ToolContext
from agents.tool_guardrails import ToolInputGuardrailData, ToolOutputGuardrailData
from agents.usage import Usage

from dex_agents_ray.session import DeferredToolExecution, ToolExecutionError, ToolExecutionResult

__all__ = ["get_current_deferred_tool_execution", "run_function_tool"]

_CURRENT: contextvars.ContextVar[DeferredToolExecution | None] = contextvars.ContextVar(
    "dex_agents_ray_openai_agents_execution", default=None
)


def get_current_deferred_tool_execution() -> DeferredToolExecution:
    """The ``DeferredToolExecution`` of the tool Step that runs this function tool.

    Call it inside a function tool (sync or async). Its ``idempotency_key``
    (``"<flow_id>/<turn_id>/<tool_call_id>"``) is the same on every retry of the
    Step; ``heartbeat`` and ``save_heartbeat_checkpoint`` work as in any tool Step.

    Raises:
        RuntimeError: Outside a tool Step of an Agents SDK session (for example
            when the agent is run plainly with ``Runner.run``).
    """
    execution = _CURRENT.get()
    if execution is None:
        raise RuntimeError(
            "get_current_deferred_tool_execution() was called outside a tool Step of a "
            "durable OpenAI Agents session: it only has an execution inside a tool the "
            "session runs"
        )
    return execution


def _output_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value)
    except TypeError:
        return str(value)


async def _input_guardrails(
    tool: FunctionTool, context: ToolContext[Any], agent: Agent[Any]
) -> str | None:
    for guardrail in tool.tool_input_guardrails or ():
        verdict = await guardrail.run(ToolInputGuardrailData(context=context, agent=agent))
        behavior = verdict.behavior
        if behavior["type"] == "raise_exception":
            raise ToolExecutionError(f"tool input guardrail {guardrail.get_name()} tripped")
        if behavior["type"] == "reject_content":
            return str(behavior["message"])
    return None


async def _output_guardrails(
    tool: FunctionTool, context: ToolContext[Any], agent: Agent[Any], output: Any
) -> Any:
    for guardrail in tool.tool_output_guardrails or ():
        data = ToolOutputGuardrailData(context=context, agent=agent, output=output)
        verdict = await guardrail.run(data)
        behavior = verdict.behavior
        if behavior["type"] == "raise_exception":
            raise ToolExecutionError(f"tool output guardrail {guardrail.get_name()} tripped")
        if behavior["type"] == "reject_content":
            return str(behavior["message"])
    return output


async def run_function_tool(
    agent: Agent[Any],
    tool: FunctionTool,
    execution: DeferredToolExecution,
    *,
    tool_call_id: str,
    context: Any,
) -> ToolExecutionResult:
    """Run ``tool`` of ``agent`` once for the Step's call.

    Raises:
        ToolExecutionError: A tool guardrail raised.
    """
    record = execution.tool_call
    tool_context: ToolContext[Any] = ToolContext(
        context=context,
        usage=Usage(),
        tool_name=tool.name,
        tool_call_id=tool_call_id,
        tool_arguments=record.arguments,
        agent=agent,
    )
    token = _CURRENT.set(execution)
    try:
        rejected = await _input_guardrails(tool, tool_context, agent)
        if rejected is not None:
            return ToolExecutionResult(output=rejected)
        output = await invoke_function_tool(
            function_tool=tool, context=tool_context, arguments=record.arguments
        )
        output = await _output_guardrails(tool, tool_context, agent, output)
    finally:
        _CURRENT.reset(token)
    return ToolExecutionResult(output=_output_text(output))
