"""The session Flow of an ``AgentDefinition``, and the session options it derives."""

from __future__ import annotations

from dex_agents_ray.builtin_loop._definition import AgentDefinition
from dex_agents_ray.builtin_loop._runner import BuiltinLoopAgentRunner
from dex_agents_ray.media import MediaStore
from dex_agents_ray.session import AgentSessionFlow, AgentSessionOptions

__all__ = ["builtin_agent_session_flow", "builtin_agent_session_options"]


def builtin_agent_session_options(definition: AgentDefinition) -> AgentSessionOptions:
    """The ``AgentSessionOptions`` an agent's session Flow runs with.

    Takes the definition's tool policies, default tool effect, built-in
    tools, interrupt deadline, event stream capacity, plan mode and compaction.
    """
    return AgentSessionOptions(
        tool_policies=dict(definition.tool_policies),
        default_tool_effect=definition.default_tool_effect,
        event_stream_capacity_bytes=definition.event_stream_capacity_bytes,
        interrupt_deadline=definition.interrupt_deadline,
        built_in_tools=definition.built_in_tools,
        plan_mode_enabled=definition.plan_mode_enabled,
        compaction=definition.compaction,
    )


def builtin_agent_session_flow(
    definition: AgentDefinition, *, flow_type: str, media_store: MediaStore | None = None
) -> AgentSessionFlow:
    """The session Flow that runs ``definition`` with ``BuiltinLoopAgentRunner``.

    Register one per agent, each with its own ``flow_type``. The Flow is
    stored by value and unpickled where its Steps run, so define the agent
    (its tools, model client and sources) in an importable module.

    Example::

        flow = builtin_agent_session_flow(support_agent, flow_type="SupportAgent")
        engine = await FlowEngine.start([flow])
        sessions = AgentSessionClient(engine.client, flow)

    Args:
        definition: The agent.
        flow_type: The Flow type.
        media_store: Where images live; ``None`` refuses images (see
            ``BuiltinLoopAgentRunner``).
    """
    runner = BuiltinLoopAgentRunner(definition, media_store=media_store)
    return AgentSessionFlow(
        runner, flow_type=flow_type, options=builtin_agent_session_options(definition)
    )
