"""Built-in loop agents with connector tools, for session tests on the engine.

Flows built here are stored by value with the engine and unpickled in Ray
workers, which import this module, ``tests.mcp.agents`` and the installed test
Connector packages by name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dex_agents_ray import AgentSessionFlow, ToolPolicy
from dex_agents_ray.builtin_loop import (
    AgentDefinition,
    ScriptedModelClient,
    builtin_agent_session_flow,
)
from dex_agents_ray.connectors import ConnectorToolSource
from tests.mcp.agents import CallOnce


def connector_flow(
    flow_type: str,
    source: ConnectorToolSource,
    calls: Sequence[tuple[str, str, Mapping[str, Any]]],
    *,
    tool_policies: Mapping[str, ToolPolicy] | None = None,
) -> AgentSessionFlow:
    """An agent that makes ``calls`` in one response, then answers with the results."""
    agent = AgentDefinition(
        name=flow_type,
        instructions="You use connector tools.",
        model=ScriptedModelClient(CallOnce(calls)),
        tool_sources=[source],
        tool_policies=dict(tool_policies or {}),
    )
    return builtin_agent_session_flow(agent, flow_type=flow_type)
