"""Listing: names, collisions, pages, the per-Worker cache, TTL refresh and failure backoff."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

import pytest

from dex_agents_ray.mcp import (
    MCP_GET_PROMPT_TOOL_NAME,
    MCP_LIST_RESOURCES_AND_PROMPTS_TOOL_NAME,
    MCP_READ_RESOURCE_TOOL_NAME,
    McpStreamableHttpServerConfig,
)
from tests.mcp.mcp_server import TOOLS, HttpMcpServer
from tests.mcp.support import FakeClock, eventually, source

RESOURCE_TOOLS = [
    MCP_LIST_RESOURCES_AND_PROMPTS_TOOL_NAME,
    MCP_READ_RESOURCE_TOOL_NAME,
    MCP_GET_PROMPT_TOOL_NAME,
]


async def test_tools_are_named_per_server_across_pages_with_collisions_left_out(
    mcp_http: HttpMcpServer, caplog: pytest.LogCaptureFixture
) -> None:
    long_name = "a-very-long-server-name-" * 3
    tools = source(
        [
            McpStreamableHttpServerConfig(name="t.1", url=mcp_http.url),
            McpStreamableHttpServerConfig(name="t_1", url=mcp_http.url),
            McpStreamableHttpServerConfig(name=long_name, url=mcp_http.url),
        ],
        resource_and_prompt_tools_enabled=True,
    )

    with caplog.at_level(logging.WARNING, logger="dex_agents_ray.mcp"):
        listed = await tools.list_tools()

    names = [tool.name for tool in listed]
    first = [f"t_1__{tool.name}" for tool in TOOLS]
    assert names[: len(TOOLS)] == first  # both pages, in server order
    assert names[-3:] == RESOURCE_TOOLS
    long_names = names[len(TOOLS) : -3]
    assert len(long_names) == len(TOOLS)
    assert all(len(name) == 64 and name.startswith("a-very-long-") for name in long_names)
    assert len(set(long_names)) == len(TOOLS)  # hashes keep them apart
    collisions = [r for r in caplog.records if "is left out: its name" in r.getMessage()]
    assert len(collisions) == len(TOOLS)
    assert "server t_1" in collisions[0].getMessage() and "server t.1" in collisions[0].getMessage()
    echo = listed[0]
    assert (echo.server_name, echo.mcp_name) == ("t.1", "echo")
    assert echo.input_schema == {"type": "object", "properties": {"text": {"type": "string"}}}
    assert echo.annotations == {"readOnlyHint": True}
    assert tools.declared_tool_names() == RESOURCE_TOOLS
    read_resource = listed[-2]
    assert read_resource.input_schema["properties"]["server"]["enum"] == ["t.1", "t_1", long_name]


async def test_the_cache_refreshes_after_the_ttl_and_backs_off_a_server_that_is_down(
    mcp_http: HttpMcpServer, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    tools = source(
        [McpStreamableHttpServerConfig(name="t", url=mcp_http.url)],
        clock=clock,
        listing_ttl=timedelta(minutes=5),
        listing_failure_backoff=timedelta(seconds=30),
        connection_timeout=timedelta(seconds=2),
        connection_attempts=1,
    )
    state = mcp_http.state
    assert tools.cached_tools() == []

    first = await tools.list_tools()
    again = await tools.list_tools()
    assert len(first) == len(TOOLS) and again == first and tools.cached_tools() == first
    assert state.listings == 1  # within the TTL: no request

    mcp_http.stop()
    clock.advance(300)
    with caplog.at_level(logging.WARNING, logger="dex_agents_ray.mcp"):
        stale = await tools.list_tools()  # the earlier tools, while a refresh runs
        assert stale == first
        await eventually(tools.list_tools, lambda listed: listed == [], description="left out")
        clock.advance(29)
        assert await tools.list_tools() == []  # backing off: nothing is tried
    failures = [r for r in caplog.records if "could not be listed" in r.getMessage()]
    assert len(failures) == 1

    mcp_http.start()
    clock.advance(1)
    assert await tools.list_tools() == []  # the retry runs in the background
    back = await eventually(tools.list_tools, description="listed again")
    assert [tool.name for tool in back] == [tool.name for tool in first]
    assert state.listings == 2

    refreshed = await tools.list_tools(refresh=True)
    assert refreshed == first and state.listings == 3


async def test_one_listing_per_server_at_a_time_and_a_down_server_never_hides_the_others(
    mcp_http: HttpMcpServer,
) -> None:
    down = HttpMcpServer()
    down.start()
    down.stop()
    tools = source(
        [
            McpStreamableHttpServerConfig(name="down", url=down.url),
            McpStreamableHttpServerConfig(name="up", url=mcp_http.url),
        ],
        connection_timeout=timedelta(seconds=2),
    )

    listings = await asyncio.gather(*(tools.list_tools() for _ in range(5)))

    assert all(len(listed) == len(TOOLS) for listed in listings)
    assert {tool.server_name for tool in listings[0]} == {"up"}
    assert mcp_http.state.listings == 1


async def test_untrusted_servers_keep_the_session_default(mcp_http: HttpMcpServer) -> None:
    tools = source(
        [
            McpStreamableHttpServerConfig(name="a", url=mcp_http.url),
            McpStreamableHttpServerConfig(name="b", url=mcp_http.url, trusts_tool_annotations=True),
        ],
        trusts_tool_annotations=False,
    )

    listed = {tool.name: tool for tool in await tools.list_tools()}

    assert listed["a__echo"].effect is None and listed["a__declared_read"].effect is None
    assert listed["b__echo"].effect == "read" and listed["b__declared_read"].effect_declared
