"""The package's public names, its lazy import, configuration checks and pickling."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from datetime import timedelta

import pytest

import dex_agents_ray.mcp as package
from dex_agents_ray.builtin_loop import AgentDefinition, ScriptedModelClient, ScriptedModelReply
from dex_agents_ray.mcp import (
    McpStdioServerConfig,
    McpStreamableHttpServerConfig,
    McpToolSource,
)
from tests.mcp.mcp_server import HttpMcpServer
from tests.mcp.support import ROOT, source

EXPORTS = [
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


def test_exports() -> None:
    assert package.__all__ == EXPORTS
    assert all(hasattr(package, name) for name in EXPORTS)
    assert package.TOOL_EFFECT_META_KEY == "io.superdurable.dex/effect"
    assert package.TOOL_APPROVAL_META_KEY == "io.superdurable.dex/approval"
    assert package.TOOL_OUTCOME_META_KEY == "io.superdurable.dex/outcome"
    assert package.IDEMPOTENCY_KEY_META_KEY == "io.superdurable.dex/idempotencyKey"


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_sdk_loads_only_with_the_first_request_and_its_absence_names_the_extra() -> None:
    lazy = _python(
        "import sys\n"
        "from dex_agents_ray.mcp import McpToolSource, McpStdioServerConfig\n"
        "McpToolSource([McpStdioServerConfig(name='s', command='x')]).cached_tools()\n"
        "print('mcp' in sys.modules, 'mcp_types' in sys.modules)\n"
        "sys.modules['mcp'] = None\n"
        "for name in [m for m in sys.modules if m.startswith('dex_agents_ray.mcp')]:\n"
        "    del sys.modules[name]\n"
        "import dex_agents_ray.mcp\n"
    )

    assert lazy.stdout.split() == ["False", "False"], lazy.stderr
    assert (
        'ImportError: dex_agents_ray.mcp needs the MCP SDK: pip install "dex-agents-ray[mcp]"'
        in (lazy.stderr)
    )
    assert "The above exception was the direct cause" in lazy.stderr


def test_configurations_are_checked() -> None:
    http = McpStreamableHttpServerConfig(
        name="t", url="https://x.example/mcp", headers={"Authorization": "Bearer secret"}
    )
    stdio = McpStdioServerConfig(name="s", command="srv", args=["a", "b"])

    assert "secret" not in repr(http) and http.transport == "streamable_http"
    assert stdio.args == ("a", "b") and stdio.transport == "stdio"
    with pytest.raises(ValueError, match="name must be a non-empty string"):
        McpStdioServerConfig(name="", command="srv")
    with pytest.raises(ValueError, match="url must start with http"):
        McpStreamableHttpServerConfig(name="t", url="ftp://x")
    with pytest.raises(TypeError, match="args must be a sequence of str"):
        McpStdioServerConfig(name="s", command="srv", args="a b")
    with pytest.raises(ValueError, match="two MCP servers are named t"):
        McpToolSource([http, http])
    with pytest.raises(ValueError, match="connection_attempts must be at least 1"):
        McpToolSource([http], connection_attempts=0)
    with pytest.raises(ValueError, match="listing_ttl must be a positive timedelta"):
        McpToolSource([http], listing_ttl=timedelta(0))
    with pytest.raises(ValueError, match="source_name must be a non-empty string"):
        McpToolSource([http], source_name="")


def test_one_agent_takes_the_resource_and_prompt_tools_from_one_source_only() -> None:
    http = McpStreamableHttpServerConfig(name="t", url="https://x.example/mcp")

    def sources(*names: str) -> list[McpToolSource]:
        return [
            McpToolSource([http], source_name=name, resource_and_prompt_tools_enabled=True)
            for name in names
        ]

    def agent(tool_sources: list[McpToolSource]) -> AgentDefinition:
        model = ScriptedModelClient(lambda request: ScriptedModelReply(text="ok"))
        return AgentDefinition(name="a", instructions="", model=model, tool_sources=tool_sources)

    assert agent(sources("one")).tool_sources
    with pytest.raises(ValueError, match="two tool sources are named mcp"):
        agent([McpToolSource([http]), McpToolSource([http])])
    with pytest.raises(ValueError, match="two tool sources list a tool named mcp_list_resources"):
        agent(sources("one", "two"))


async def test_a_pickled_source_starts_with_an_empty_cache(mcp_http: HttpMcpServer) -> None:
    tools = source([McpStreamableHttpServerConfig(name="t", url=mcp_http.url)], source_name="crm")
    await tools.list_tools()

    copy = pickle.loads(pickle.dumps(tools))

    assert tools.cached_tools() and copy.cached_tools() == []
    assert copy.source_name == "crm" and copy.servers == tools.servers
    assert [t.name for t in await copy.list_tools()] == [t.name for t in tools.cached_tools()]
