"""Other servers: an older protocol through the handshake fallback, resources and prompts."""

from __future__ import annotations

import json
import sys
from datetime import timedelta

import pytest

from dex_agents_ray import ToolExecutionError, ToolExecutionResult
from dex_agents_ray.mcp import (
    MCP_GET_PROMPT_TOOL_NAME,
    MCP_LIST_RESOURCES_AND_PROMPTS_TOOL_NAME,
    MCP_READ_RESOURCE_TOOL_NAME,
    McpStdioServerConfig,
    McpStreamableHttpServerConfig,
    McpToolSource,
)
from tests.mcp.mcp_server import HttpMcpServer
from tests.mcp.support import ROOT, deferred, source

LEGACY = McpStdioServerConfig(
    name="old",
    command=sys.executable,
    args=["-m", "tests.mcp.legacy_server"],
    env={"PYTHONPATH": ROOT},
)


async def test_an_older_server_is_reached_through_the_initialize_handshake() -> None:
    tools = source([LEGACY])

    [add] = await tools.list_tools()
    result = await tools.execute_deferred_tool_call(deferred(tools, "old__add", '{"a": 2, "b": 3}'))
    called = await tools.call_tool("old__add", {"a": 1, "b": 1}, idempotency_key="adapter-key")

    assert (add.name, add.effect) == ("old__add", "read")
    assert isinstance(result, ToolExecutionResult)
    assert json.loads(result.output) == {
        "sum": 5,
        "protocol": ["2025-06-18"],
        "key": "flow-1/turn-1/c1",
    }
    assert json.loads(called.output)["key"] == "adapter-key"


@pytest.fixture
async def tools(mcp_http: HttpMcpServer) -> McpToolSource:
    down = HttpMcpServer()
    down.start()
    down.stop()
    listed = source(
        [
            McpStreamableHttpServerConfig(name="t", url=mcp_http.url),
            LEGACY,
            McpStreamableHttpServerConfig(name="down", url=down.url),
        ],
        resource_and_prompt_tools_enabled=True,
        connection_timeout=timedelta(seconds=2),
        connection_attempts=2,
    )
    await listed.list_tools()
    return listed


async def _run(tools: McpToolSource, name: str, arguments: object) -> str:
    result = await tools.execute_deferred_tool_call(deferred(tools, name, json.dumps(arguments)))
    assert isinstance(result, ToolExecutionResult)
    return result.output


async def test_resource_and_prompt_tools(tools: McpToolSource) -> None:
    listed = await _run(tools, MCP_LIST_RESOURCES_AND_PROMPTS_TOOL_NAME, {"server": "t"})
    read = await _run(tools, MCP_READ_RESOURCE_TOOL_NAME, {"server": "t", "uri": "memo://readme"})
    prompt = await _run(
        tools,
        MCP_GET_PROMPT_TOOL_NAME,
        {"server": "t", "name": "greet", "arguments": {"name": "Ann"}},
    )
    none = await _run(tools, MCP_LIST_RESOURCES_AND_PROMPTS_TOOL_NAME, {"server": "old"})

    assert listed == json.dumps(
        {
            "prompts": [{"arguments": [{"name": "name", "required": True}], "name": "greet"}],
            "resource_templates": [{"name": "memo", "uriTemplate": "memo://{name}"}],
            "resources": [
                {"mimeType": "text/plain", "name": "readme", "uri": "memo://readme"},
                {"name": "changelog", "uri": "memo://changelog"},
            ],
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    assert json.loads(read) == {
        "contents": [{"mimeType": "text/plain", "text": "hello", "uri": "memo://readme"}]
    }
    assert json.loads(prompt) == {
        "description": "A greeting",
        "messages": [{"content": {"text": "Say hi to Ann", "type": "text"}, "role": "user"}],
    }
    assert json.loads(none) == {"prompts": [], "resource_templates": [], "resources": []}


@pytest.mark.parametrize(
    ("name", "arguments", "message"),
    [
        (MCP_READ_RESOURCE_TOOL_NAME, {"server": "t", "uri": "memo://nope"}, "MCP error -32602"),
        (MCP_READ_RESOURCE_TOOL_NAME, {"server": "nope", "uri": "x"}, "'nope' is not configured"),
        (MCP_LIST_RESOURCES_AND_PROMPTS_TOOL_NAME, {"server": "down"}, "in 2 attempts"),
        (MCP_GET_PROMPT_TOOL_NAME, {"server": "t"}, "argument 'name' must be"),
    ],
)
async def test_resource_tool_failures(
    tools: McpToolSource, name: str, arguments: object, message: str
) -> None:
    with pytest.raises(ToolExecutionError, match=message):
        await _run(tools, name, arguments)
