"""The session Flow of a Pydantic AI agent."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from pydantic_ai import Agent

from dex_agents_ray.builtin_loop import ToolSource
from dex_agents_ray.media import MediaStore
from dex_agents_ray.pydantic_ai._runner import PydanticAIRunner
from dex_agents_ray.session import AgentSessionFlow, AgentSessionOptions

__all__ = ["pydantic_ai_session_flow"]


def pydantic_ai_session_flow(
    agent: Agent[Any, Any],
    *,
    flow_type: str,
    options: AgentSessionOptions | None = None,
    tool_sources: Iterable[ToolSource] = (),
    media_store: MediaStore | None = None,
    deps: Any = None,
    deps_factory: Callable[[], Any] | None = None,
) -> AgentSessionFlow:
    """The session Flow that runs an unchanged Pydantic AI ``agent``.

    Every model request is one ``RunModel`` Step and every tool call the model
    asks for its own tool Step, with the effect from ``options.tool_policies``,
    else the tool's own metadata (``requires_approval=True`` waits for approval;
    MCP annotations), else ``options.default_tool_effect``.

    Example::

        flow = pydantic_ai_session_flow(agent, flow_type="SupportAgent")
        engine = await FlowEngine.start([flow])
        sessions = AgentSessionClient(engine.client, flow)
        await sessions.start_session("session-1", "Where is order A1?")

    Args:
        agent: The agent, unchanged (see ``PydanticAIRunner`` for how it travels).
        flow_type: The Flow type (one per agent).
        options: Session options; ``None`` for the defaults.
        tool_sources: Tool sources offered beside the agent's tools.
        media_store: Where images live; ``None`` refuses images.
        deps: The agent's ``deps`` (must pickle).
        deps_factory: Builds ``deps`` once per process instead.

    Raises:
        TypeError: See ``PydanticAIRunner`` and ``AgentSessionFlow``.
        ValueError: See ``PydanticAIRunner`` and ``AgentSessionFlow``.
    """
    runner = PydanticAIRunner(
        agent,
        tool_sources=tool_sources,
        media_store=media_store,
        deps=deps,
        deps_factory=deps_factory,
    )
    return AgentSessionFlow(runner, flow_type=flow_type, options=options)
