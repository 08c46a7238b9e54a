"""MCP servers' tools as durable agent tools (the ``mcp`` extra).

:class:`McpToolSource` lists the tools of MCP servers, stdio
(:class:`McpStdioServerConfig`) or Streamable HTTP
(:class:`McpStreamableHttpServerConfig`), and runs every call in its own tool
Step, with an effect class from the tool's annotations or the Dex MCP
conventions, so a crash never repeats a write silently. Long-running MCP tasks
become session tool tasks, and their elicitations become session questions.

Install the MCP SDK with ``pip install "dex-agents-ray[mcp]"``; the SDK itself
is imported only when a request is sent.

Errors::

    Exception
    ├── McpToolCallInterruptedError   a sent tools/call broke off (a Step failure)
    └── McpConnectionError            no connection after every attempt (nothing sent)
"""

import importlib.util

from dex_agents_ray.mcp._errors import MISSING_EXTRA_MESSAGE

if importlib.util.find_spec("mcp") is None:
    try:
        import mcp  # noqa: F401 - fails fast: the spec lookup found nothing
    except ImportError as error:
        raise ImportError(MISSING_EXTRA_MESSAGE) from error

from dex_agents_ray.mcp._config import (  # noqa: E402
    EnvironmentSecret,
    McpServerConfig,
    McpStdioServerConfig,
    McpStreamableHttpServerConfig,
)
from dex_agents_ray.mcp._conventions import (  # noqa: E402
    IDEMPOTENCY_KEY_META_KEY,
    TOOL_APPROVAL_META_KEY,
    TOOL_EFFECT_META_KEY,
    TOOL_OUTCOME_META_KEY,
    tool_effect_from_mcp_tool_annotations,
)
from dex_agents_ray.mcp._errors import (  # noqa: E402
    McpConnectionError,
    McpToolCallInterruptedError,
)
from dex_agents_ray.mcp._source import DeferredToolHandler, McpToolSource  # noqa: E402
from dex_agents_ray.mcp._tools import (  # noqa: E402
    MCP_GET_PROMPT_TOOL_NAME,
    MCP_LIST_RESOURCES_AND_PROMPTS_TOOL_NAME,
    MCP_READ_RESOURCE_TOOL_NAME,
    McpTool,
)
from dex_agents_ray.session import OUTCOME_UNKNOWN_TOOL_RESULT  # noqa: E402

__all__ = [
    "IDEMPOTENCY_KEY_META_KEY",
    "MCP_GET_PROMPT_TOOL_NAME",
    "MCP_LIST_RESOURCES_AND_PROMPTS_TOOL_NAME",
    "MCP_READ_RESOURCE_TOOL_NAME",
    "OUTCOME_UNKNOWN_TOOL_RESULT",
    "TOOL_APPROVAL_META_KEY",
    "TOOL_EFFECT_META_KEY",
    "TOOL_OUTCOME_META_KEY",
    "DeferredToolHandler",
    "EnvironmentSecret",
    "McpConnectionError",
    "McpServerConfig",
    "McpStdioServerConfig",
    "McpStreamableHttpServerConfig",
    "McpTool",
    "McpToolCallInterruptedError",
    "McpToolSource",
    "tool_effect_from_mcp_tool_annotations",
]
