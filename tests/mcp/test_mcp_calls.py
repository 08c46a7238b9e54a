"""What a call records: every row of the outcome table, on real servers."""

from __future__ import annotations

import json
import logging
import pickle
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from dex_agents_ray import ToolExecutionError, ToolExecutionResult, ToolOutcomeUnknownError
from dex_agents_ray.mcp import (
    IDEMPOTENCY_KEY_META_KEY,
    McpStreamableHttpServerConfig,
    McpToolCallInterruptedError,
    McpToolSource,
)
from dex_agents_ray.media import InMemoryMediaStore
from tests.mcp.mcp_server import HttpMcpServer, b64, png
from tests.mcp.support import Recorded, deferred, record, source, stdio_server

KEY = "flow-1/turn-1/c1"
FAILED, UNKNOWN, INTERRUPTED = (
    ToolExecutionError,
    ToolOutcomeUnknownError,
    McpToolCallInterruptedError,
)
LOCKED = "the record is locked"
NO_INPUT = "the MCP server asked for input that this agent session cannot provide yet"

# tool -> (what it raises, or None for a result; the recorded text)
TABLE = {
    "fail_tool": (FAILED, LOCKED),
    "rpc_error": (FAILED, "MCP error -32602: bad input"),
    "internal_error": (
        INTERRUPTED,
        "was interrupted after it was sent: MCP error -32603: internal",
    ),
    "gateway_500": (INTERRUPTED, "HTTP 500"),
    "gateway_html": (INTERRUPTED, "HTTP 200 with content type 'text/html'"),
    "repeat_forever": (INTERRUPTED, "the MCP server kept asking to repeat the call"),
    "repeat_once": (None, "repeated after round-2"),
    "regional": (None, "served eu"),  # refused without Mcp-Param-Region, then sent again
    "ask_direct": (FAILED, f"{NO_INPUT} (an answer to 'Which account?')"),
    "outcome_unknown": (UNKNOWN, "the provider timed out"),
    "outcome_rejected": (FAILED, "the account is frozen"),
    "outcome_unknown_rpc": (UNKNOWN, "MCP error -32603: gateway lost it"),
    "outcome_rejected_rpc": (FAILED, "MCP error -32050: not allowed"),
    "outcome_reserved": (None, "fine"),
    "outcome_empty": (UNKNOWN, "the MCP server could not tell whether the call took effect"),
    "image_error": (FAILED, "before\n[image 1 omitted]\nafter"),
    "too_many_images": (FAILED, "the MCP result has 21 images; the limit is 20"),
    "bad_base64": (FAILED, "image 1 of the MCP result is not valid base64"),
    "noncanonical_base64": (FAILED, "image 1 of the MCP result is not canonical base64"),
    "not_an_image": (FAILED, "image 1 of the MCP result is not a supported image"),
}


@pytest.fixture
async def tools(mcp_http: HttpMcpServer) -> McpToolSource:
    listed = source(
        [McpStreamableHttpServerConfig(name="t", url=mcp_http.url)],
        media_store=InMemoryMediaStore(),
    )
    await listed.list_tools()
    return listed


async def test_the_outcome_table(
    tools: McpToolSource, mcp_http: HttpMcpServer, caplog: pytest.LogCaptureFixture
) -> None:
    seen: dict[str, tuple[type[Exception] | None, str]] = {}
    details: dict[str, tuple[bool, bool, str]] = {}
    with caplog.at_level(logging.WARNING, logger="dex_agents_ray.mcp"):
        for tool in TABLE:
            try:
                arguments = '{"region": "eu"}' if tool == "regional" else "{}"
                call = deferred(tools, f"t__{tool}", arguments)
                result = await tools.execute_deferred_tool_call(call)
            except (FAILED, UNKNOWN, INTERRUPTED) as error:
                seen[tool] = (type(error), error.message)
                if isinstance(error, UNKNOWN):  # the model reads the constant, not the text
                    copied = pickle.loads(pickle.dumps(error))
                    details[tool] = (error.show_detail, copied.show_detail, copied.message)
            else:
                assert isinstance(result, ToolExecutionResult)
                seen[tool] = (None, result.output)

    for tool, (raised, text) in TABLE.items():
        assert seen[tool][0] is raised, tool
        assert text in seen[tool][1], (tool, seen[tool][1])
    assert details == {
        tool: (False, False, seen[tool][1])
        for tool, (raised, _) in TABLE.items()
        if raised is UNKNOWN
    }
    assert [meta[IDEMPOTENCY_KEY_META_KEY] for _, meta in mcp_http.state.called("repeat_once")] == [
        KEY,
        KEY,
    ]
    assert any("'maybe'" in r.getMessage() for r in caplog.records)


async def test_results_carry_the_key_and_request_meta_and_report_progress(
    tools: McpToolSource,
) -> None:
    recorded = Recorded()
    meta = {"com.example/caller": "u-1", IDEMPOTENCY_KEY_META_KEY: "spoofed"}
    call = deferred(tools, "t__echo", '{"text": "hi"}')

    echoed = await tools.execute_deferred_tool_call(call, request_meta=meta)
    progressed = await tools.execute_deferred_tool_call(
        deferred(tools, "t__progress", recorded=recorded)
    )

    assert isinstance(echoed, ToolExecutionResult)
    assert json.loads(echoed.output) == {
        "arguments": {"text": "hi"},
        "meta": {"com.example/caller": "u-1", IDEMPOTENCY_KEY_META_KEY: KEY},
    }
    assert isinstance(progressed, ToolExecutionResult) and progressed.output == "progressed"
    assert recorded.of_type("mcp.tool_progress") == [
        {
            "tool_call_id": "c1",
            "tool_name": "t__progress",
            "progress": float(step),
            "total": 3.0,
            "message": f"step {step}",
        }
        for step in (1, 2, 3)
    ]


async def test_images_are_uploaded_to_the_media_store(
    tools: McpToolSource, mcp_http: HttpMcpServer
) -> None:
    store = InMemoryMediaStore()
    with_store = source(
        [McpStreamableHttpServerConfig(name="t", url=mcp_http.url)], media_store=store
    )
    without = source([McpStreamableHttpServerConfig(name="t", url=mcp_http.url)])
    await with_store.list_tools()
    await without.list_tools()

    uploaded = await with_store.execute_deferred_tool_call(deferred(with_store, "t__image"))
    kept = await without.execute_deferred_tool_call(deferred(without, "t__image"))

    assert isinstance(uploaded, ToolExecutionResult) and isinstance(kept, ToolExecutionResult)
    assert uploaded.output == "before\n[image 1]\n[image 2]\nafter"
    assert len(uploaded.images) == 2 and uploaded.images[0].mime_type == "image/png"
    assert await store.get_image(uploaded.images[0]) == png()
    image = {"data": b64(png()), "mimeType": "image/png", "type": "image"}
    block = json.dumps(image, sort_keys=True, separators=(",", ":"))
    assert kept.output == f"before\n{block}\n{block}\nafter" and kept.images == ()


async def test_calls_never_sent_fail_and_broken_calls_are_interrupted(
    tools: McpToolSource, mcp_http: HttpMcpServer
) -> None:
    down = HttpMcpServer()
    down.start()
    down.stop()
    unreachable = source(
        [McpStreamableHttpServerConfig(name="down", url=down.url)],
        connection_timeout=timedelta(seconds=2),
    )
    gone = json.dumps({"server": "gone", "tool": "echo"})
    call = deferred(tools, "t__echo")

    with pytest.raises(ToolExecutionError, match="MCP server gone is not configured"):
        await tools.execute_deferred_tool_call(replace(call, tool_call=record("t__echo", gone)))
    offline = record("down__echo", json.dumps({"server": "down", "tool": "echo"}))
    with pytest.raises(
        ToolExecutionError, match="could not connect to MCP server down in 3 attempts"
    ):
        await unreachable.execute_deferred_tool_call(replace(call, tool_call=offline))
    impatient = source(
        [McpStreamableHttpServerConfig(name="t", url=mcp_http.url)],
        request_timeout=timedelta(seconds=1),  # the slow tool takes 30 s
    )
    await impatient.list_tools()
    with pytest.raises(McpToolCallInterruptedError, match="MCP error -32001"):
        await impatient.execute_deferred_tool_call(deferred(impatient, "t__slow"))
    assert mcp_http.state.called("slow")


async def test_a_stdio_server_that_exits_mid_call_interrupts_it(tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    tools = source([stdio_server("s", log=log)])
    await tools.list_tools()

    echoed = await tools.execute_deferred_tool_call(deferred(tools, "s__echo", '{"text": "x"}'))
    with pytest.raises(McpToolCallInterruptedError, match="MCP error -32000: Connection closed"):
        await tools.execute_deferred_tool_call(deferred(tools, "s__crash"))

    assert isinstance(echoed, ToolExecutionResult) and '"text": "x"' in echoed.output
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(c["tool"], c["key"]) for c in calls] == [("echo", KEY), ("crash", KEY)]
    assert calls[0]["pid"] != calls[1]["pid"]  # a new process per request
