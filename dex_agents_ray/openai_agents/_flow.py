"""The session Flow of an OpenAI Agents SDK agent."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from agents import Agent, RunConfig

from dex_agents_ray.builtin_loop import ToolSource
from dex_agents_ray.openai_agents._runner import OpenAIAgentsRunner
from dex_agents_ray.session import AgentSessionFlow, AgentSessionOptions

__all__ = ["openai_agents_session_flow"]


def openai_agents_session_flow(
    agent: Agent[Any],
    *,
    flow_type: str,
    options: AgentSessionOptions | None = None,
    tool_sources: Iterable[ToolSource] = (),
    media_store: Any = None,
    context: Any = None,
    context_factory: Callable[[], Any] | None = None,
    run_config: RunConfig | None = None,
) -> AgentSessionFlow:
    """The session Flow that runs an unchanged Agents SDK ``agent``.

    Every model call is one ``RunModel`` Step and every function tool call its own
    tool Step, with the effect from ``options.tool_policies``, else the tool's own
    ``needs_approval`` (evaluated per call), else ``options.default_tool_effect``.

    Example::

        flow = openai_agents_session_flow(triage_agent, flow_type="Triage")
        engine = await FlowEngine.start([flow])
        sessions = AgentSessionClient(engine.client, flow)

    Raises:
        TypeError: See ``OpenAIAgentsRunner`` and ``AgentSessionFlow``.
        ValueError: See ``OpenAIAgentsRunner`` and ``AgentSessionFlow``.
    """
    runner = OpenAIAgentsRunner(
        agent,
        tool_sources=tool_sources,
        media_store=media_store,
        context=context,
        context_factory=context_factory,
        run_config=run_config,
    )
    return AgentSessionFlow(runner, flow_type=flow_type, options=options)
