"""Built-in loop agents with MCP tools, for session tests on the engine.

Flows built here are stored by value with the engine and unpickled in Ray
workers, which import this module by name.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from dex_agents_ray import AgentSessionFlow, DeferredToolExecution, DeferredToolOutcome, ToolPolicy
from dex_agents_ray.builtin_loop import (
    AgentDefinition,
    ModelRequest,
    ScriptedModelClient,
    ScriptedModelReply,
    ScriptedToolCall,
    builtin_agent_session_flow,
)
from dex_agents_ray.mcp import McpServerConfig, McpStdioServerConfig, McpToolSource
from dex_agents_ray.testing import FileGate


class CallOnce:
    """A scripted model: call the given tools, then answer with their outputs."""

    def __init__(self, calls: Sequence[tuple[str, str, Mapping[str, Any]]]) -> None:
        self.calls = list(calls)

    def __call__(self, request: ModelRequest) -> ScriptedModelReply:
        results = ScriptedModelClient.tool_results(request)
        if results:
            return ScriptedModelReply(
                text=" | ".join(f"{r.tool_name}: {r.output}" for r in results)
            )
        return ScriptedModelReply(
            tool_calls=[
                ScriptedToolCall(tool_call_id=call_id, tool_name=name, arguments=dict(arguments))
                for call_id, name, arguments in self.calls
            ]
        )


class CheckpointGatedSource(McpToolSource):
    """An ``McpToolSource`` whose first attempt waits at a gate once its task checkpoint
    is saved, so a test can kill the session's host right there."""

    def __init__(
        self, servers: Sequence[McpServerConfig], *, state_dir: str, **kwargs: Any
    ) -> None:
        super().__init__(servers, **kwargs)
        self.state_dir = state_dir

    async def execute_deferred_tool_call(
        self, call: DeferredToolExecution, *, request_meta: Mapping[str, Any] | None = None
    ) -> DeferredToolOutcome:
        async def save_then_wait(text: str) -> None:
            await call.save_heartbeat_checkpoint(text)
            await FileGate(self.state_dir, f"checkpoint-{call.attempt}").wait_for_release()

        gated = dataclasses.replace(call, save_heartbeat_checkpoint=save_then_wait)
        return await super().execute_deferred_tool_call(gated, request_meta=request_meta)


def mcp_flow(
    flow_type: str,
    tools: McpToolSource,
    calls: Sequence[tuple[str, str, Mapping[str, Any]]],
    *,
    tool_policies: Mapping[str, ToolPolicy] | None = None,
) -> AgentSessionFlow:
    agent = AgentDefinition(
        name=flow_type,
        instructions="You use MCP tools.",
        model=ScriptedModelClient(CallOnce(calls)),
        tool_sources=[tools],
        tool_policies=dict(tool_policies or {}),
        # A stdio server's first listing starts a process that imports the MCP SDK.
        tool_source_listing_timeout=timedelta(seconds=60),
    )
    return builtin_agent_session_flow(agent, flow_type=flow_type)


def time_server() -> McpStdioServerConfig:
    """``mcp-server-time`` from PyPI, an MCP server we did not write."""
    return McpStdioServerConfig(
        name="time",
        command=sys.executable,
        args=["-m", "mcp_server_time", "--local-timezone", "UTC"],
    )
