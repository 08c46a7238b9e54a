"""A built-in loop agent for tracing tests: two reads in one turn, a refund that
needs approval, and a model call that fails once. Stored by value with the
engine and unpickled in Ray workers, which import this module by name."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

from dex_agents_ray import (
    CONTEXT_SUMMARY_INSTRUCTIONS,
    AgentSessionFlow,
    AgentTracingOptions,
    CompactionPolicy,
    GenAISemanticConventionsVersion,
    ToolEffect,
)
from dex_agents_ray.builtin_loop import (
    AgentDefinition,
    BuiltinLoopAgentRunner,
    ModelRequest,
    ModelUsage,
    ScriptedModelClient,
    ScriptedModelReply,
    ScriptedToolCall,
    builtin_agent_session_options,
    function_tool,
)
from dex_agents_ray.engine import RayTaskOptions, RemoteExecution
from dex_agents_ray.testing import FileGate
from tests.tracing.support import SinkFactory

FLOW_TYPE = "TracedSupport"
AGENT_NAME = "Support"


@function_tool(effect=ToolEffect.READ)
async def lookup_order(order_id: str) -> dict[str, str]:
    """Look up an order by its ID."""
    return {"order_id": order_id, "status": "shipped"}


@function_tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
async def refund_order(order_id: str) -> dict[str, str]:
    """Refund an order."""
    return {"order_id": order_id, "refunded": "yes"}


def _call(tool_call_id: str, tool_name: str, order_id: str) -> ScriptedToolCall:
    return ScriptedToolCall(
        tool_call_id=tool_call_id, tool_name=tool_name, arguments={"order_id": order_id}
    )


@function_tool(effect=ToolEffect.READ)
async def loaded_telemetry() -> dict[str, object]:
    """The OpenTelemetry modules this process has imported."""
    import sys

    otel = sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")
    return {"pid": os.getpid(), "otel": otel}


@dataclass(frozen=True)
class Script:
    """The model: what it does depends on the turn's user text."""

    state_dir: str

    def __call__(self, request: ModelRequest) -> Any:
        if request.instructions == CONTEXT_SUMMARY_INSTRUCTIONS:
            return ScriptedModelReply(text="The user looked up orders.")
        text = ScriptedModelClient.user_texts(request)[-1]
        results = ScriptedModelClient.tool_results(request)
        if results:
            return ScriptedModelReply(text="; ".join(r.output for r in results))
        if text == "slow lookup":
            return self._slow()
        if text == "two lookups":
            return ScriptedModelReply(
                tool_calls=[
                    _call("call-a", "lookup_order", "A1"),
                    _call("call-b", "lookup_order", "B2"),
                ]
            )
        if text == "refund":
            return ScriptedModelReply(tool_calls=[_call("call-r", "refund_order", "A1")])
        if text == "probe modules":
            return ScriptedModelReply(tool_calls=[ScriptedToolCall(tool_name="loaded_telemetry")])
        if text == "cached":
            usage = ModelUsage(
                input_tokens=40, output_tokens=9, cached_input_tokens=30, reasoning_tokens=5
            )
            return ScriptedModelReply(text="from the cache", usage=usage)
        if text == "flaky":
            marker = os.path.join(self.state_dir, "flaky-failed")
            if not os.path.exists(marker):
                open(marker, "w").close()
                raise RuntimeError("the model is down once")
        return ScriptedModelReply(text=f"echo: {text}")

    async def _slow(self) -> ScriptedModelReply:
        """Waits at gate ``model`` (so a test can steer meanwhile), then calls a tool."""
        await FileGate(self.state_dir, "model").wait_for_release()
        return ScriptedModelReply(tool_calls=[_call("call-s", "lookup_order", "S1")])


def build_flow(
    namespace: str,
    state_dir: str,
    *,
    capture: bool = False,
    version: GenAISemanticConventionsVersion = GenAISemanticConventionsVersion.V1_42_0_DEV,
    sampled: bool = True,
    raising: bool = False,
    enabled: bool = True,
    model_on_executor: bool = False,
    factory: object | None = None,
    flow_type: str = FLOW_TYPE,
    inline_probe: bool = False,
    compaction_window: int | None = None,
    tools_as_tasks: bool = False,
    tracing: AgentTracingOptions | None = None,
) -> AgentSessionFlow:
    """The agent's Flow, its tracing set the spec's way (``dataclasses.replace``):
    ``tracing`` as given, or from the other arguments with a provider factory."""
    agent = AgentDefinition(
        name="support",
        instructions="You help customers with their orders.",
        model=ScriptedModelClient(Script(state_dir)),
        tools=[lookup_order, refund_order, loaded_telemetry],
        compaction=None
        if compaction_window is None
        else CompactionPolicy(context_window_tokens=compaction_window),
    )
    tracing = tracing or AgentTracingOptions(
        is_enabled=enabled,
        agent_name=AGENT_NAME,
        should_capture_message_content=capture,
        semantic_conventions_version=version,
        tracer_provider_factory=factory or SinkFactory(namespace, sampled=sampled, raising=raising),  # type: ignore[arg-type]
    )
    options = dataclasses.replace(builtin_agent_session_options(agent), tracing=tracing)
    if inline_probe:  # the probe runs in the host, beside the turn Steps
        options = dataclasses.replace(options, inline_tools=frozenset({"loaded_telemetry"}))
    if tools_as_tasks:  # a Ray task per tool attempt instead of the pooled executors
        tasks = RayTaskOptions(execution=RemoteExecution.TASK)
        options = dataclasses.replace(options, tool_ray_options=tasks)
    if model_on_executor:
        options = dataclasses.replace(options, model_ray_options=RayTaskOptions())
    return AgentSessionFlow(BuiltinLoopAgentRunner(agent), flow_type=flow_type, options=options)
