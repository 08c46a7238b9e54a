"""The session options of an ``AgentDefinition``, and its session Flow."""

from __future__ import annotations

from dex_agents_ray.builtin_loop._definition import AgentDefinition
from dex_agents_ray.session._api import AgentSessionOptions

__all__ = ["builtin_agent_session_options"]


def builtin_agent_session_options(definition: AgentDefinition) -> AgentSessionOptions:
    """The ``AgentSessionOptions`` an agent's session Flow runs with.

    Takes the definition's tool policies, default tool effect, built-in
    tools, interrupt deadline, event stream capacity and plan mode.
    """
    return AgentSessionOptions(
        tool_policies=dict(definition.tool_policies),
        default_tool_effect=definition.default_tool_effect,
        event_stream_capacity_bytes=definition.event_stream_capacity_bytes,
        interrupt_deadline=definition.interrupt_deadline,
        built_in_tools=definition.built_in_tools,
        plan_mode_enabled=definition.plan_mode_enabled,
    )
