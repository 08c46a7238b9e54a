"""Unchanged OpenAI Agents SDK agents as durable sessions (the ``openai-agents`` extra).

Install with ``pip install "dex-agents-ray[openai-agents]"``. The spec's
``dex-agents-openai-agents`` package is this extra; its names are kept.

- :class:`OpenAIAgentsRunner` runs an ``agents.Agent`` (and the agents it hands
  off to) under the session's runner contract: one model call per ``RunModel``
  Step, every function tool call its own tool Step.
- :func:`openai_agents_session_flow` builds the session Flow.
- :func:`get_current_deferred_tool_execution` gives a function tool its Step's
  ``DeferredToolExecution``.

See ``docs/adapters.md``.
"""

import importlib.util

from dex_agents_ray.builtin_loop import AgentTravelError

MISSING_EXTRA_MESSAGE = (
    "dex_agents_ray.openai_agents needs the OpenAI Agents SDK: "
    'pip install "dex-agents-ray[openai-agents]"'
)

if importlib.util.find_spec("agents") is None:
    try:
        import agents  # noqa: F401 - fails fast: the spec lookup found nothing
    except ImportError as _error:
        raise ImportError(MISSING_EXTRA_MESSAGE) from _error

from dex_agents_ray.openai_agents._flow import openai_agents_session_flow  # noqa: E402
from dex_agents_ray.openai_agents._runner import OpenAIAgentsRunner  # noqa: E402
from dex_agents_ray.openai_agents._tools import get_current_deferred_tool_execution  # noqa: E402

__all__ = [
    "MISSING_EXTRA_MESSAGE",
    "AgentTravelError",
    "OpenAIAgentsRunner",
    "get_current_deferred_tool_execution",
    "openai_agents_session_flow",
]
