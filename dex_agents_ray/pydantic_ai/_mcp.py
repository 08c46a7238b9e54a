"""A Pydantic AI ``MCPToolset`` call in a tool Step carries the Step's idempotency key.

The Dex MCP conventions send the key in the request's ``_meta``
(``io.superdurable.dex/idempotencyKey``), as ``McpToolSource`` does, so an MCP
server can drop a repeated write. ``MCPToolset``'s public hook for request
metadata is ``process_tool_call``: each ``MCPToolset`` of the agent in a
process that runs tool Steps gets one that adds the key inside a tool Step of
a session and otherwise calls the toolset's own hook (or the tool) unchanged.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from pydantic_ai import Agent, RunContext

__all__ = ["send_idempotency_keys"]

IDEMPOTENCY_KEY_META_KEY = "io.superdurable.dex/idempotencyKey"
"""The Dex MCP conventions' ``_meta`` key (``dex_agents_ray.mcp.IDEMPOTENCY_KEY_META_KEY``)."""

_KEYED_ATTRIBUTE = "_dex_agents_ray_keyed"
_INSTALL_LOCK = threading.Lock()


def _keyed_hook(
    original: Callable[..., Any] | None, key_for: Callable[[RunContext[Any]], str | None]
) -> Callable[..., Any]:
    async def process_tool_call(
        ctx: RunContext[Any], call_tool: Any, name: str, args: dict[str, Any]
    ) -> Any:
        key = key_for(ctx)
        if key is None:
            if original is not None:
                return await original(ctx, call_tool, name, args)
            return await call_tool(name, args)

        async def keyed_call(
            name: str, args: dict[str, Any], *, metadata: dict[str, Any] | None = None
        ) -> Any:
            return await call_tool(
                name, args, metadata={**(metadata or {}), IDEMPOTENCY_KEY_META_KEY: key}
            )

        if original is not None:
            return await original(ctx, keyed_call, name, args)
        return await keyed_call(name, args)

    setattr(process_tool_call, _KEYED_ATTRIBUTE, True)
    return process_tool_call


def send_idempotency_keys(
    agent: Agent[Any, Any], key_for: Callable[[RunContext[Any]], str | None]
) -> None:
    """Give each ``MCPToolset`` of ``agent`` (in this process) the keyed hook, once.

    ``key_for`` returns the idempotency key of the tool Step a run belongs to, or
    ``None`` outside one.
    """
    try:
        from pydantic_ai.mcp import MCPToolset
    except ImportError:  # Pydantic AI without its mcp extra has no MCPToolset
        return

    def install(toolset: Any) -> None:
        if not isinstance(toolset, MCPToolset):
            return
        with _INSTALL_LOCK:
            current = toolset.process_tool_call
            if current is not None and getattr(current, _KEYED_ATTRIBUTE, False):
                return
            toolset.process_tool_call = _keyed_hook(current, key_for)

    for toolset in agent.toolsets:
        toolset.apply(install)
