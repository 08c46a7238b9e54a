"""The resource and prompt tools: ``mcp_list_resources_and_prompts``,
``mcp_read_resource`` and ``mcp_get_prompt``.

Each opens a new connection to the named server and returns the server's items
as it sent them, in JSON with sorted keys. An MCP error answer, a server that
stays unreachable, and an unconfigured server raise ``ToolExecutionError``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from dex_agents_ray.mcp._content import canonical_json
from dex_agents_ray.mcp._errors import McpConnectionError
from dex_agents_ray.mcp._inputs import unsupported_input_message
from dex_agents_ray.mcp._tools import (
    MCP_GET_PROMPT_TOOL_NAME,
    MCP_LIST_RESOURCES_AND_PROMPTS_TOOL_NAME,
    MCP_READ_RESOURCE_TOOL_NAME,
)
from dex_agents_ray.session import ToolExecutionError

if TYPE_CHECKING:
    from dex_agents_ray.mcp._config import McpServerConfig
    from dex_agents_ray.mcp._connection import ConnectionSettings, McpConnection

__all__ = ["run_resource_tool"]


def _string(arguments: Mapping[str, Any], name: str) -> str:
    value = arguments.get(name)
    if not isinstance(value, str) or not value:
        raise ToolExecutionError(f"argument {name!r} must be a non-empty string")
    return value


def _prompt_arguments(arguments: Mapping[str, Any]) -> dict[str, str] | None:
    value = arguments.get("arguments")
    if value is None:
        return None
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ToolExecutionError("argument 'arguments' must map names to strings")
    return dict(value)


async def _list_everything(connection: McpConnection, timeout: float) -> dict[str, Any]:
    capabilities = connection.capabilities
    listed: dict[str, Any] = {"prompts": [], "resource_templates": [], "resources": []}
    if capabilities.get("resources") is not None:
        listed["resources"] = await connection.list_all("resources", timeout)
        listed["resource_templates"] = await connection.list_all("resource_templates", timeout)
    if capabilities.get("prompts") is not None:
        listed["prompts"] = await connection.list_all("prompts", timeout)
    return listed


def _no_input(answer: Mapping[str, Any]) -> Mapping[str, Any]:
    if answer.get("resultType") == "input_required":
        raise ToolExecutionError(unsupported_input_message(answer.get("inputRequests")))
    return answer


async def run_resource_tool(
    tool_name: str,
    arguments: Mapping[str, Any],
    servers: Mapping[str, McpServerConfig],
    settings: ConnectionSettings,
) -> str:
    """Run one resource and prompt tool; its output text.

    Raises:
        ToolExecutionError: Bad arguments, an unconfigured or unreachable server,
            or an MCP error answer.
    """
    from dex_agents_ray.mcp._connection import MCPError, open_connection

    name = _string(arguments, "server")
    server = servers.get(name)
    if server is None:
        raise ToolExecutionError(f"MCP server {name!r} is not configured")
    uri = _string(arguments, "uri") if tool_name == MCP_READ_RESOURCE_TOOL_NAME else ""
    prompt = _string(arguments, "name") if tool_name == MCP_GET_PROMPT_TOOL_NAME else ""
    prompt_arguments = _prompt_arguments(arguments) if prompt else None
    timeout = settings.request_timeout
    try:
        async with open_connection(server, settings) as connection:
            if tool_name == MCP_LIST_RESOURCES_AND_PROMPTS_TOOL_NAME:
                output: Mapping[str, Any] = await _list_everything(connection, timeout)
            elif tool_name == MCP_READ_RESOURCE_TOOL_NAME:
                answer = _no_input(await connection.read_resource(uri, timeout))
                output = {"contents": answer.get("contents") or []}
            else:
                answer = _no_input(await connection.get_prompt(prompt, prompt_arguments, timeout))
                output = {
                    "description": answer.get("description"),
                    "messages": answer.get("messages") or [],
                }
    except McpConnectionError as error:
        raise ToolExecutionError(str(error)) from error
    except MCPError as error:
        raise ToolExecutionError(f"MCP error {error.code}: {error.message}") from error
    return canonical_json(output)
