"""A research agent over MCP servers.

``flow`` is the session Flow (``--agent actors.research:flow``) with one MCP
server, ``mcp-server-time`` from PyPI (stdio, started by the tool Step that
lists or calls it). ``research_flow(servers)`` builds the same agent over any
MCP servers (stdio or Streamable HTTP), offered in order.

The scripted model (used unless a model is named, see ``actors._models``) asks
the first tool whose name ends with ``get_current_time`` for the time in the
zone the user names (UTC by default) and, given ``servers`` with other tools,
calls the tool named in a message as ``use <tool name>`` with no arguments.
It then answers with what the tools returned.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from datetime import timedelta

from actors._models import SettingsModelResolver, default_model
from dex_agents_ray import AgentSessionFlow
from dex_agents_ray.builtin_loop import (
    AgentDefinition,
    ModelClient,
    ModelRequest,
    ScriptedModelClient,
    ScriptedModelReply,
    ScriptedToolCall,
    builtin_agent_session_flow,
)
from dex_agents_ray.mcp import McpServerConfig, McpStdioServerConfig, McpToolSource

INSTRUCTIONS = (
    "You are a research assistant. Use the MCP tools to find facts; cite the tool "
    "results you used in your answer."
)

_ZONE = re.compile(r"\b([A-Z][a-z]+/[A-Z][A-Za-z_]+|UTC)\b")
_USE = re.compile(r"\buse ([A-Za-z0-9_\-]+)")


def time_server() -> McpStdioServerConfig:
    """``mcp-server-time`` (PyPI) over stdio, run by this interpreter."""
    return McpStdioServerConfig(
        name="time",
        command=sys.executable,
        args=["-m", "mcp_server_time", "--local-timezone", "UTC"],
    )


def scripted_research_model(request: ModelRequest) -> ScriptedModelReply:
    """The scripted research model: one round of tool calls, then the answer."""
    results = ScriptedModelClient.tool_results(request)
    if results:
        return ScriptedModelReply(
            text="Findings: " + " | ".join(f"{r.tool_name} -> {r.output}" for r in results)
        )
    texts = ScriptedModelClient.user_texts(request)
    text = texts[-1] if texts else ""
    names = [tool.name for tool in request.tools]
    wanted = _USE.search(text)
    if wanted is not None and wanted.group(1) in names:
        call = ScriptedToolCall(tool_call_id="call-use", tool_name=wanted.group(1), arguments={})
        return ScriptedModelReply(tool_calls=[call])
    clock = next((name for name in names if name.endswith("get_current_time")), None)
    if clock is None:
        return ScriptedModelReply(text="I have no tool that can answer that.")
    zone = _ZONE.search(text)
    call = ScriptedToolCall(
        tool_call_id="call-time",
        tool_name=clock,
        arguments={"timezone": zone.group(1) if zone else "UTC"},
    )
    return ScriptedModelReply(tool_calls=[call])


def research_flow(
    servers: Sequence[McpServerConfig] | None = None,
    model: ModelClient | None = None,
    *,
    flow_type: str = "ResearchAgent",
) -> AgentSessionFlow:
    """The research session Flow over ``servers`` (``mcp-server-time`` when ``None``)."""
    chosen = model if model is not None else default_model(scripted_research_model)
    agent = AgentDefinition(
        name="research",
        instructions=INSTRUCTIONS,
        model=chosen,
        tool_sources=[McpToolSource(list(servers) if servers is not None else [time_server()])],
        resolve_model=SettingsModelResolver(chosen),
        # A stdio server's first listing starts a process that imports the MCP SDK.
        tool_source_listing_timeout=timedelta(seconds=60),
    )
    return builtin_agent_session_flow(agent, flow_type=flow_type)


flow = research_flow()
