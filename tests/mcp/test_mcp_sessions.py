"""MCP tools in whole sessions on the engine: retries by effect, a task across a host
kill, an elicitation answered by the user, and an MCP server from PyPI."""

from __future__ import annotations

import base64
import json
import sqlite3
from pathlib import Path
from typing import Any

from dex.dexpb import dex_pb2 as pb

from dex_agents_ray import AgentSessionClient, AgentSnapshot, ToolEffect, ToolPolicy
from dex_agents_ray.mcp import (
    OUTCOME_UNKNOWN_TOOL_RESULT,
    McpStreamableHttpServerConfig,
    McpToolSource,
)
from dex_agents_ray.testing import FileGate, kill_flow_actor
from tests.mcp.agents import CheckpointGatedSource, mcp_flow, time_server
from tests.mcp.mcp_server import HttpMcpServer
from tests.mcp.support import eventually
from tests.session.polling import has_interrupt, read_events, snapshot_when, turn_done


async def _answer(sessions: AgentSessionClient, session_id: str) -> AgentSnapshot:
    done = await snapshot_when(sessions, session_id, turn_done(1), timeout=120)
    assert done.state is not None and done.state.last_turn_error is None
    return done


async def test_interrupted_calls_are_sent_again_only_when_their_effect_allows(
    engine_factory: Any, mcp_http: HttpMcpServer
) -> None:
    tools = McpToolSource([McpStreamableHttpServerConfig(name="t", url=mcp_http.url)])
    flow = mcp_flow(
        "McpRetries",
        tools,
        [
            ("c1", "t__echo", {"text": "hi"}),
            ("c2", "t__internal_error", {}),
            ("c3", "t__internal_error_write", {}),
        ],
        tool_policies={"t__internal_error_write": ToolPolicy(ToolEffect.UNCLASSIFIED, False)},
    )
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)

    await sessions.start_session("retries", "go")
    done = await _answer(sessions, "retries")

    answer = done.messages[-1].text or ""
    assert 't__echo: {"arguments": {"text": "hi"}' in answer
    assert "t__internal_error: The tool call failed: " in answer
    assert "t__internal_error_write: The tool call's outcome is unknown" in answer
    keys = [
        meta["io.superdurable.dex/idempotencyKey"]
        for _, meta in mcp_http.state.called("internal_error")
    ]
    assert keys == ["retries/turn-1/c2"] * 3  # a read: 3 attempts, one key
    assert len(mcp_http.state.called("internal_error_write")) == 1  # never sent again


def _checkpoint_stored(store: Path, session_id: str) -> bool:
    """Whether the store holds a heartbeat checkpoint of the session's ``CallTool``
    (a text value: the null value each attempt starts with is not one)."""
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        docs = [
            json.loads(doc)
            for (doc,) in db.execute("SELECT doc FROM executions WHERE flow_id = ?", (session_id,))
        ]
    return any(
        d["step_type"] == "CallTool"
        and d.get("heartbeat")
        and pb.Value.FromString(base64.b64decode(d["heartbeat"])).HasField("string_value")
        for d in docs
    )


async def test_a_task_runs_across_a_host_kill_and_resumes_from_its_checkpoint(
    engine_factory: Any, mcp_http: HttpMcpServer, state_dir: Path, store_path: Path
) -> None:
    tools = CheckpointGatedSource(
        [McpStreamableHttpServerConfig(name="t", url=mcp_http.url)], state_dir=str(state_dir)
    )
    flow = mcp_flow("McpTaskKill", tools, [("c1", "t__task_write", {})])
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    gate = FileGate(state_dir, "checkpoint-1")

    await sessions.start_session("task-kill", "go")
    await gate.wait_until_reached(timeout=120)

    async def stored() -> bool:
        return _checkpoint_stored(store_path, "task-kill")

    await eventually(stored, timeout=60, description="the task checkpoint in the store")
    await kill_flow_actor(engine, "task-kill")
    try:
        done = await _answer(sessions, "task-kill")
    finally:
        gate.release()

    assert done.messages[-1].text == "t__task_write: task_write done"
    assert len(mcp_http.state.called("task_write")) == 1  # resumed, never sent again
    assert len(mcp_http.state.tasks) == 1
    events = await read_events(sessions, "task-kill", until_type="turn_completed")
    kinds = [e.type.value for e in events]
    assert "tool_task_started" in kinds and kinds.count("mcp.task_status") >= 2


async def test_an_elicitation_is_answered_through_answer_question(
    engine_factory: Any, mcp_http: HttpMcpServer
) -> None:
    tools = McpToolSource([McpStreamableHttpServerConfig(name="t", url=mcp_http.url)])
    flow = mcp_flow("McpQuestion", tools, [("c1", "t__task_ask", {"kind": "enum"})])
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)

    await sessions.start_session("question", "paint it")
    asked = await snapshot_when(sessions, "question", has_interrupt, timeout=120)
    [interrupt] = asked.pending_interrupts
    assert (interrupt.interrupt_id, interrupt.question) == ("c1-input-1", "Which colour?")
    assert interrupt.choices == ("red", "blue") and not interrupt.allows_free_text
    assert not await sessions.answer_question("question", "c1-input-1", "green")
    assert await sessions.answer_question("question", "c1-input-1", "blue")
    done = await _answer(sessions, "question")

    assert done.messages[-1].text == 't__task_ask: painted {"answer": "blue"}'
    [(task_id, responses)] = mcp_http.state.updates
    assert responses == {"ask-1": {"action": "accept", "content": {"answer": "blue"}}}
    events = await read_events(sessions, "question", until_type="turn_completed")
    statuses = [e.payload["status"] for e in events if e.type.value == "mcp.task_status"]
    assert statuses[0] == "input_required" and statuses[-1] == "completed"
    assert all(e.payload["task_id"] == task_id for e in events if e.type.value == "mcp.task_status")


async def test_an_mcp_server_from_pypi_in_a_session(engine_factory: Any) -> None:
    flow = mcp_flow(
        "McpTime",
        McpToolSource([time_server()]),
        [("c1", "time__get_current_time", {"timezone": "UTC"})],
    )
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)

    await sessions.start_session("time", "What time is it?")
    done = await _answer(sessions, "time")

    answer = done.messages[-1].text or ""
    assert answer.startswith("time__get_current_time: ")
    result = json.loads(answer.removeprefix("time__get_current_time: "))
    assert result["timezone"] == "UTC" and "day_of_week" in result
    events = await read_events(sessions, "time", until_type="turn_completed")
    deferred = next(e for e in events if e.type.value == "tool_call_deferred")
    assert deferred.payload["effect"] == "read" and deferred.payload["requires_approval"] is False


async def test_cancel_turn_sends_tasks_cancel_for_a_task_that_asked_a_question(
    engine_factory: Any, mcp_http: HttpMcpServer
) -> None:
    tools = McpToolSource([McpStreamableHttpServerConfig(name="t", url=mcp_http.url)])
    flow = mcp_flow("McpCancel", tools, [("c1", "t__task_ask", {"kind": "enum"})])
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)

    await sessions.start_session("cancel", "paint it")
    await snapshot_when(sessions, "cancel", has_interrupt, timeout=120)
    [task_id] = list(mcp_http.state.tasks)
    assert await sessions.cancel_turn("cancel", "turn-1")
    assert not await sessions.answer_question("cancel", "c1-input-1", "blue")
    done = await snapshot_when(
        sessions,
        "cancel",
        lambda s: s.state is not None and s.state.active_turn_id is None,
        timeout=120,
    )

    assert done.state is not None and done.state.last_turn_error is None
    assert mcp_http.state.cancels == [task_id]  # tasks/cancel reached the server, once
    assert mcp_http.state.tasks[task_id].status == "cancelled"
    assert mcp_http.state.updates == []  # the question was never answered
    events = await read_events(sessions, "cancel", until_type="turn_cancelled")
    finished = [e.payload for e in events if e.type.value == "tool_call_finished"]
    assert [p["status"] for p in finished] == ["outcome_unknown"]


async def test_declared_writes_run_in_order_and_stop_after_one_that_failed(
    engine_factory: Any, mcp_http: HttpMcpServer
) -> None:
    tools = McpToolSource([McpStreamableHttpServerConfig(name="t", url=mcp_http.url)])
    flow = mcp_flow(
        "McpOrdered",
        tools,
        [
            ("c1", "t__declared_fail", {}),
            ("c2", "t__declared_once", {}),
            ("c3", "t__echo", {"text": "read"}),
        ],
    )
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("ordered", "go")
    done = await _answer(sessions, "ordered")

    answer = done.messages[-1].text or ""
    assert "t__declared_fail: The tool call failed: " in answer
    assert "t__declared_once: The tool call failed: the tool did not run" in answer
    assert mcp_http.state.called("declared_once") == []  # skipped: never sent, never asked
    assert len(mcp_http.state.called("echo")) == 1  # the read ran anyway


async def test_cancel_turn_during_a_task_poll_sends_tasks_cancel(
    engine_factory: Any, mcp_http: HttpMcpServer
) -> None:
    tools = McpToolSource([McpStreamableHttpServerConfig(name="t", url=mcp_http.url)])
    flow = mcp_flow("McpCancelPoll", tools, [("c1", "t__task_gated", {})])
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)

    await sessions.start_session("poll", "go")

    def polling(snapshot: AgentSnapshot) -> bool:
        return any(r.status.value == "waiting_for_task" for r in snapshot.tool_calls)

    await snapshot_when(sessions, "poll", polling, timeout=120, description="the task poll")
    [task_id] = list(mcp_http.state.tasks)
    assert await sessions.cancel_turn("poll", "turn-1")
    done = await snapshot_when(
        sessions,
        "poll",
        lambda s: s.state is not None and s.state.active_turn_id is None,
        timeout=120,
    )
    assert done.state is not None and done.state.last_turn_error is None
    assert mcp_http.state.cancels == [task_id]
    assert mcp_http.state.tasks[task_id].status == "cancelled"
    events = await read_events(sessions, "poll", until_type="turn_cancelled")
    finished = [e.payload for e in events if e.type.value == "tool_call_finished"]
    assert [p["status"] for p in finished] == ["outcome_unknown"]


async def test_an_unknown_outcome_shows_the_model_exactly_the_constant(
    engine_factory: Any, mcp_http: HttpMcpServer
) -> None:
    """The spec's ``unknown`` row: the model reads ``OUTCOME_UNKNOWN_TOOL_RESULT`` and
    nothing else; the server's text goes to the record's ``error``. A call held at
    its approval keeps the turn open, so the snapshot still shows the final records."""
    tools = McpToolSource([McpStreamableHttpServerConfig(name="t", url=mcp_http.url)])
    flow = mcp_flow(
        "McpUnknown",
        tools,
        [
            ("c1", "t__outcome_unknown", {}),
            ("c2", "t__outcome_unknown_rpc", {}),
            ("c3", "t__internal_error_write", {}),
            ("c4", "t__echo", {"text": "held"}),
        ],
        tool_policies={
            "t__internal_error_write": ToolPolicy(ToolEffect.UNCLASSIFIED, False),
            "t__echo": ToolPolicy(ToolEffect.READ, True),
        },
    )
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("unknown", "go")

    def settled(snapshot: AgentSnapshot) -> bool:
        records = {r.tool_call_id: r for r in snapshot.tool_calls}
        return bool(snapshot.pending_interrupts) and all(
            key in records and records[key].is_final for key in ("c1", "c2", "c3")
        )

    held = await snapshot_when(sessions, "unknown", settled, timeout=120)
    records = {r.tool_call_id: r for r in held.tool_calls}
    assert {key: records[key].status.value for key in ("c1", "c2", "c3")} == dict.fromkeys(
        ("c1", "c2", "c3"), "outcome_unknown"
    )
    assert records["c1"].error == "the provider timed out"
    assert records["c2"].error == "MCP error -32603: gateway lost it"
    assert await sessions.resolve_interrupt("unknown", "c4", approved=True)
    done = await _answer(sessions, "unknown")

    seen = dict(part.split(": ", 1) for part in (done.messages[-1].text or "").split(" | "))
    assert seen["t__outcome_unknown"] == OUTCOME_UNKNOWN_TOOL_RESULT
    assert seen["t__outcome_unknown_rpc"] == OUTCOME_UNKNOWN_TOOL_RESULT
    # An interrupted write the server did not report unknown keeps its detail.
    assert seen["t__internal_error_write"].startswith(OUTCOME_UNKNOWN_TOOL_RESULT + " Detail: ")
    assert len(mcp_http.state.called("outcome_unknown")) == 1  # a read, never sent again
