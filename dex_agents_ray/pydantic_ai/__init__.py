"""Unchanged Pydantic AI agents as durable sessions (the ``pydantic-ai`` extra).

Install with ``pip install "dex-agents-ray[pydantic-ai]"``. The spec's
``dex-agents-pydantic-ai`` package is this extra; its names are kept.

- :class:`PydanticAIRunner` runs a ``pydantic_ai.Agent`` under the session's
  runner contract: one model request per ``RunModel`` Step, made by the
  framework's own machinery, and every tool call its own tool Step.
- :func:`pydantic_ai_session_flow` builds the session Flow.
- :func:`deferred_tool_idempotency_key` gives a tool its Step's idempotency key.

See ``docs/adapters.md``.
"""

import importlib.util

from dex_agents_ray.builtin_loop import AgentTravelError

MISSING_EXTRA_MESSAGE = (
    'dex_agents_ray.pydantic_ai needs Pydantic AI: pip install "dex-agents-ray[pydantic-ai]"'
)

if importlib.util.find_spec("pydantic_ai") is None:
    try:
        import pydantic_ai  # noqa: F401 - fails fast: the spec lookup found nothing
    except ImportError as _error:
        raise ImportError(MISSING_EXTRA_MESSAGE) from _error

from dex_agents_ray.pydantic_ai._flow import pydantic_ai_session_flow  # noqa: E402
from dex_agents_ray.pydantic_ai._messages import MODEL_RETRY_ERROR_PREFIX  # noqa: E402
from dex_agents_ray.pydantic_ai._runner import PydanticAIRunner  # noqa: E402
from dex_agents_ray.pydantic_ai._tools import deferred_tool_idempotency_key  # noqa: E402

__all__ = [
    "MISSING_EXTRA_MESSAGE",
    "MODEL_RETRY_ERROR_PREFIX",
    "AgentTravelError",
    "PydanticAIRunner",
    "deferred_tool_idempotency_key",
    "pydantic_ai_session_flow",
]
