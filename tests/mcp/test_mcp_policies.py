"""Effects and approvals: annotations, the Dex MCP conventions, and the policy merge."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator

import pytest

from dex_agents_ray import ToolEffect, ToolPolicy
from dex_agents_ray.mcp import (
    MCP_READ_RESOURCE_TOOL_NAME,
    TOOL_APPROVAL_META_KEY,
    TOOL_EFFECT_META_KEY,
    McpStreamableHttpServerConfig,
    McpToolSource,
    tool_effect_from_mcp_tool_annotations,
)
from dex_agents_ray.mcp._conventions import classify_tool
from tests.mcp.mcp_server import HttpMcpServer
from tests.mcp.support import source, turn

R, W, N, U = (
    ToolEffect.READ,
    ToolEffect.IDEMPOTENT_WRITE,
    ToolEffect.NON_IDEMPOTENT_WRITE,
    ToolEffect.UNCLASSIFIED,
)

# (tool, session policy, session default) -> (effect, requires approval)
CASES = [
    ("echo", None, U, R, False),  # readOnlyHint
    ("add_note", None, U, W, False),  # idempotentHint wins over destructiveHint
    ("send_email", None, U, U, True),  # no hints: the session default
    ("send_email", None, R, R, False),
    ("echo", ToolPolicy(N), U, N, True),  # a policy wins over annotations
    ("echo", ToolPolicy(R, requires_approval=True), U, R, True),
    ("declared_read", None, U, R, False),  # declared wins over destructiveHint
    ("declared_write", None, U, W, True),  # approval: recommended
    ("declared_once", None, U, N, False),  # no approval key: no approval
    ("declared_odd_approval", None, U, R, True),  # any approval value asks
    ("declared_bogus", None, W, W, False),  # bad effect: default, annotations ignored
    ("approval_only", None, U, R, False),  # approval without effect is ignored
    ("declared_read", ToolPolicy(N), U, N, True),  # raised; N asks by default
    ("declared_once", ToolPolicy(R), U, N, False),  # never lowered
    ("declared_write", ToolPolicy(R), U, W, True),  # the tool still recommends approval
    ("declared_write", ToolPolicy(R, requires_approval=False), U, W, False),  # explicit wins
    ("declared_read", ToolPolicy(U, requires_approval=True), U, U, True),
    ("declared_once", ToolPolicy(W), U, N, False),
]


@pytest.fixture(scope="module")
async def tools() -> AsyncIterator[McpToolSource]:
    server = HttpMcpServer()
    server.start()
    try:
        listed = source([McpStreamableHttpServerConfig(name="t", url=server.url)])
        await listed.list_tools()
        yield listed
    finally:
        server.stop()


@pytest.mark.parametrize(("tool", "policy", "default", "effect", "approval"), CASES)
def test_deferred_calls_get_the_spec_effect_and_approval(
    tools: McpToolSource,
    tool: str,
    policy: ToolPolicy | None,
    default: ToolEffect,
    effect: ToolEffect,
    approval: bool,
) -> None:
    name = f"t__{tool}"
    policies = {name: policy} if policy else {}

    call = tools.deferred_tool_call(
        turn(policies, default), tool_call_id="c1", tool_name=name, arguments="{}"
    )

    assert (call.policy.effect, call.policy.approval_required) == (effect, approval)
    assert json.loads(call.tool_source_reference or "") == {"server": "t", "tool": tool}
    merged = tools.merge_tool_policies(policies)
    if tool != "declared_bogus" and (policy is not None or tool != "send_email"):
        assert (merged[name].effect, merged[name].approval_required) == (effect, approval)


def test_own_policies_and_merging(tools: McpToolSource) -> None:
    own = tools.tool_policies()
    mine = {"t__declared_once": ToolPolicy(R), "t__echo": ToolPolicy(N), "other": ToolPolicy(R)}

    merged = tools.merge_tool_policies(mine)

    assert own["t__echo"] == ToolPolicy(R)
    assert own["t__declared_once"] == ToolPolicy(N, requires_approval=False)
    assert "t__send_email" not in own and "t__declared_bogus" not in own
    assert merged["t__declared_once"] == ToolPolicy(N, requires_approval=False)
    assert merged["t__echo"] == ToolPolicy(N) and merged["other"] == ToolPolicy(R)
    assert merged["t__add_note"] == ToolPolicy(W)
    # Spreading yours after tool_policies() would lower the declaration:
    assert {**own, **mine}["t__declared_once"].effect is R


async def test_bad_declarations_are_logged_and_untrusted_servers_ignore_the_keys(
    mcp_http: HttpMcpServer, caplog: pytest.LogCaptureFixture
) -> None:
    untrusted = source(
        [McpStreamableHttpServerConfig(name="t", url=mcp_http.url)],
        trusts_tool_annotations=False,
        resource_and_prompt_tools_enabled=True,
    )
    with caplog.at_level(logging.WARNING, logger="dex_agents_ray.mcp"):
        trusted = source([McpStreamableHttpServerConfig(name="t", url=mcp_http.url)])
        await trusted.list_tools()
        await untrusted.list_tools()

    bogus = [r for r in caplog.records if "declared_bogus" in r.getMessage()]
    assert len(bogus) == 1 and "'sometimes'" in bogus[0].getMessage()
    for tool in ("t__declared_once", "t__echo"):
        call = untrusted.deferred_tool_call(turn(), tool_call_id="c1", tool_name=tool, arguments="")
        assert call.policy == ToolPolicy(U)
    resource = untrusted.deferred_tool_call(
        turn(), tool_call_id="c2", tool_name=MCP_READ_RESOURCE_TOOL_NAME, arguments=""
    )
    assert resource.policy == ToolPolicy(R)
    assert untrusted.tool_policies() == {MCP_READ_RESOURCE_TOOL_NAME: ToolPolicy(R)} | {
        name: ToolPolicy(R) for name in untrusted.declared_tool_names()
    }


def test_a_null_approval_asks_and_a_bad_effect_is_the_default() -> None:
    null = classify_tool(
        "s", "t", None, {TOOL_EFFECT_META_KEY: "read", TOOL_APPROVAL_META_KEY: None}, trusted=True
    )
    bad = classify_tool("s", "t", {"readOnlyHint": True}, {TOOL_EFFECT_META_KEY: 3}, trusted=True)

    assert (null.effect, null.declared, null.approval_requested) == (R, True, True)
    assert (bad.effect, bad.declared) == (None, False)


def test_annotation_effects() -> None:
    assert tool_effect_from_mcp_tool_annotations(None) is None
    assert tool_effect_from_mcp_tool_annotations({"readOnlyHint": True}) is R
    assert tool_effect_from_mcp_tool_annotations({"idempotentHint": True}) is W
    hints = {"idempotentHint": True, "destructiveHint": True}
    assert tool_effect_from_mcp_tool_annotations(hints) is W
    assert tool_effect_from_mcp_tool_annotations({"destructiveHint": False}) is None
