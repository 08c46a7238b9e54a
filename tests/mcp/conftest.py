"""MCP test fixtures: the test server over Streamable HTTP, in this process, per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.mcp.mcp_server import HttpMcpServer


@pytest.fixture
def mcp_http() -> Iterator[HttpMcpServer]:
    server = HttpMcpServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()
