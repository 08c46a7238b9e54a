"""Turns end to end on real Ray and SQLite: answers, messages, events, usage."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from dex_agents_ray import (
    AgentEventType,
    AgentSessionClient,
    AgentSessionOptions,
    AgentStatus,
    MessageRole,
    ToolEffect,
    ToolPolicy,
)
from dex_agents_ray.media import build_image_reference
from dex_agents_ray.session._messages import MAX_CHUNK_BYTES
from dex_agents_ray.session._turns import NEW_MESSAGES_WITHOUT_BUILDER
from dex_agents_ray.testing import InvocationLog
from tests.media.media_images import png
from tests.session.agents import Call, ContinuingRunner, ImageRunner, Reply, build_flow
from tests.session.polling import read_events, snapshot_when, turn_done


async def test_a_turn_answers_stores_messages_and_writes_events(
    engine_factory: Any, state_dir: Path
) -> None:
    flow = build_flow(state_dir, {"hello": [Reply()]})
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)

    await sessions.start_session("s-1", "hello")
    snapshot = await snapshot_when(sessions, "s-1", turn_done(1))

    assert snapshot.state is not None
    assert snapshot.state.status is AgentStatus.WAITING_FOR_USER_MESSAGE
    assert snapshot.state.last_turn_error is None
    assert [(m.sequence, m.role.value, m.text) for m in snapshot.messages] == [
        (1, "user", "hello"),
        (2, "assistant", "no tools"),
    ]
    assert snapshot.usage.model_calls == 1 and snapshot.usage.input_tokens == 10
    events = await read_events(sessions, "s-1", until_type=AgentEventType.TURN_COMPLETED)
    assert [e.type.value for e in events] == [
        "turn_started",
        "text_delta",
        "usage_recorded",
        "turn_completed",
    ]
    assert events[0].payload == {"sequence": 1}
    assert {e.turn_id for e in events} == {"turn-1"}
    assert events[0].step_execution_id == "StartAgentSession-1"
    assert events[1].step_execution_id == "RunModel-1" and events[1].attempt == 1
    assert events[2].payload["session"]["model_calls"] == 1
    assert events[3].payload == {"message_count": 2}


async def test_a_failed_turn_after_tools_stores_the_note_and_the_next_turn_runs(
    engine_factory: Any, state_dir: Path
) -> None:
    script = {
        "look": [Reply(calls=[Call("c1", "lookup", {"id": 1})]), Reply(raise_error="model down")],
        "again": [Reply()],
        "limit": [Reply(turn_error="limit reached")],
        "continue": [Reply(continue_with="go on")],
    }
    options = AgentSessionOptions(tool_policies={"lookup": ToolPolicy(ToolEffect.READ)})
    flow = build_flow(state_dir, script, options=options)
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("s-2", "look")
    failed = await snapshot_when(sessions, "s-2", turn_done(1))

    assert failed.state is not None
    assert failed.state.last_turn_error == "RuntimeError: model down"
    assert failed.tool_calls == ()
    assert failed.messages[-1].role is MessageRole.USER
    assert failed.messages[-1].text == (
        "[Dex] The previous turn failed after these tool calls ran:\n"
        '- lookup {"id": 1} -> succeeded: echo {"id": 1}\n'
        "Do not repeat these tool calls unless the user asks again."
    )
    assert InvocationLog(state_dir / "model.log").entries() == [
        "turn-1/0/1",
        "turn-1/1/1",
        "turn-1/1/2",
        "turn-1/1/3",
    ]
    events = await read_events(sessions, "s-2", until_type=AgentEventType.TURN_FAILED)
    assert events[-1].payload == {"error": "RuntimeError: model down"}
    assert events[-1].step_execution_id == "RecordTurnFailure-1"

    assert await sessions.send_user_message("s-2", "again")
    later = await snapshot_when(sessions, "s-2", turn_done(2))
    assert later.state is not None and later.state.last_turn_error is None

    # A runner-enforced limit ends the turn as failed, without a retry.
    assert await sessions.send_user_message("s-2", "limit")
    limited = await snapshot_when(sessions, "s-2", turn_done(3))
    assert limited.state is not None and limited.state.last_turn_error == "limit reached"
    assert limited.messages[-1].text == "no tools"
    # TurnContinued stores messages, which needs build_unfinished_turn_messages.
    assert await sessions.send_user_message("s-2", "continue")
    continued = await snapshot_when(sessions, "s-2", turn_done(4))
    assert continued.state is not None
    assert continued.state.last_turn_error == NEW_MESSAGES_WITHOUT_BUILDER
    assert continued.messages[-1].text == "go on"
    assert InvocationLog(state_dir / "model.log").entries()[-1] == "turn-4/0/1"


async def test_a_continued_turn_calls_the_model_again_and_images_need_a_builder(
    engine_factory: Any, state_dir: Path
) -> None:
    script = {"think": [Reply(continue_with="keep going"), Reply()]}
    flow = build_flow(state_dir, script, runner_class=ContinuingRunner)
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("s-4", "think")
    done = await snapshot_when(sessions, "s-4", turn_done(1))

    assert [(m.role.value, m.text) for m in done.messages] == [
        ("user", "think"),
        ("user", "keep going"),
        ("assistant", "no tools"),
    ]
    assert {m.turn_id for m in done.messages} == {"turn-1"}
    assert done.usage.model_calls == 2
    image = build_image_reference(png(), "file:///tmp/session-images")
    assert not await sessions.send_user_message("s-4", "look", images=[image])
    assert await sessions.get_agent_snapshot("s-4") == done


async def test_user_images_reach_an_image_runner_and_are_stored_as_references(
    engine_factory: Any, state_dir: Path
) -> None:
    flow = build_flow(state_dir, {}, runner_class=ImageRunner)
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    image = build_image_reference(png(), "file:///tmp/session-images")
    await sessions.start_session("s-5", "see", images=[image])
    done = await snapshot_when(sessions, "s-5", turn_done(1))

    assert done.messages[0].images == (image,)
    assert image.sha256 in done.messages[0].framework_item


def _stored_keys(store_path: Path, flow_id: str) -> list[str]:
    with sqlite3.connect(store_path) as db:
        rows = db.execute("SELECT key FROM attributes WHERE flow_id = ?", (flow_id,)).fetchall()
    return sorted(row[0] for row in rows)


async def test_blank_messages_start_no_turn_and_messages_page_across_chunks(
    engine_factory: Any, state_dir: Path, store_path: Path
) -> None:
    options = AgentSessionOptions(message_window_size=3, message_chunk_size=2)
    flow = build_flow(state_dir, {}, options=options)
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("s-3", "  ")
    idle = await snapshot_when(sessions, "s-3", lambda s: s.state is not None)
    assert idle.state is not None and idle.state.turn_count == 0 and idle.messages == ()

    assert not await sessions.send_user_message("s-3", "")
    assert not await sessions.send_user_message("s-3", " \n")
    assert not await sessions.send_user_message("s-3", "plan", plan_mode=True)
    assert await sessions.get_agent_snapshot("s-3") == idle
    for turn in range(1, 5):
        assert await sessions.send_user_message("s-3", f"message {turn}")
        await snapshot_when(sessions, "s-3", turn_done(turn))

    snapshot = await sessions.get_agent_snapshot("s-3")
    assert [m.sequence for m in snapshot.messages] == list(range(1, 9))
    keys = _stored_keys(store_path, "s-3")
    window = [k for k in keys if k.startswith("AgentMessages/")]
    chunks = [k for k in keys if k.startswith("AgentMessageChunks/")]
    assert window == ["AgentMessages/000000000007", "AgentMessages/000000000008"]
    assert chunks == [f"AgentMessageChunks/{n:012d}" for n in (1, 3, 5)]
    assert "AgentMessageIndex" in keys
    newest = await sessions.list_agent_messages("s-3", limit=3)
    assert [m.sequence for m in newest.messages] == [6, 7, 8]
    assert newest.next_before_sequence == 6 and newest.deleted_before_sequence is None
    older = await sessions.list_agent_messages("s-3", before_sequence=6, limit=500)
    assert [m.sequence for m in older.messages] == [1, 2, 3, 4, 5]
    assert older.next_before_sequence is None
    clamped = await sessions.list_agent_messages("s-3", limit=0)
    assert [m.sequence for m in clamped.messages] == [8]
    assert [m.text for m in snapshot.messages[:2]] == ["message 1", "no tools"]


async def test_a_message_larger_than_a_chunk_gets_a_chunk_of_its_own(
    engine_factory: Any, state_dir: Path, store_path: Path
) -> None:
    options = AgentSessionOptions(message_window_size=10, message_chunk_max_bytes=1024)
    flow = build_flow(state_dir, {}, options=options)
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    big = "x" * 2000
    await sessions.start_session("s-big", "small")
    await snapshot_when(sessions, "s-big", turn_done(1))
    assert await sessions.send_user_message("s-big", big)
    await snapshot_when(sessions, "s-big", turn_done(2))

    snapshot = await sessions.get_agent_snapshot("s-big")
    assert [(m.sequence, m.text) for m in snapshot.messages] == [
        (1, "small"),
        (2, "no tools"),
        (3, big),
        (4, "no tools"),
    ]
    keys = _stored_keys(store_path, "s-big")
    # The window moved out first (chunks hold consecutive messages), then the big one.
    assert [k for k in keys if k.startswith("AgentMessages/")] == ["AgentMessages/000000000004"]
    chunks = [k for k in keys if k.startswith("AgentMessageChunks/")]
    assert chunks == ["AgentMessageChunks/000000000001", "AgentMessageChunks/000000000003"]


async def test_a_message_too_large_to_store_fails_its_turn_at_once(
    engine_factory: Any, state_dir: Path
) -> None:
    """The spec: a message too large for the Server fails that Step's turn at once;
    the model is not called again for it, and the session goes on."""
    script = {"huge": [Reply(pad_answer_bytes=MAX_CHUNK_BYTES + 1)], "small": [Reply()]}
    flow = build_flow(state_dir, script)
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)

    await sessions.start_session("s-huge", "huge")
    failed = await snapshot_when(sessions, "s-huge", turn_done(1), timeout=120)
    assert failed.state is not None
    error = failed.state.last_turn_error or ""
    assert "bytes of JSON" in error and f"at most {MAX_CHUNK_BYTES}" in error
    assert InvocationLog(state_dir / "model.log").entries() == ["turn-1/0/1"]
    assert [(m.role.value, m.text) for m in failed.messages] == [("user", "huge")]
    events = await read_events(sessions, "s-huge", until_type=AgentEventType.TURN_FAILED)
    assert events[-1].payload == {"error": error}

    # A user message too large to store fails its turn at once too, and is consumed.
    assert await sessions.send_user_message("s-huge", "u" * (MAX_CHUNK_BYTES + 1))
    refused = await snapshot_when(sessions, "s-huge", turn_done(2), timeout=120)
    assert refused.state is not None and refused.queued_messages == ()
    assert (refused.state.last_turn_error or "").startswith("the user message: ")
    assert len(InvocationLog(state_dir / "model.log").entries()) == 1

    assert await sessions.send_user_message("s-huge", "small")
    done = await snapshot_when(sessions, "s-huge", turn_done(3), timeout=120)
    assert done.state is not None and done.state.last_turn_error is None
    assert [m.text for m in done.messages] == ["huge", "small", "no tools"]
    events = await read_events(sessions, "s-huge", until_type=AgentEventType.TURN_COMPLETED)
    ends = [(e.type.value, e.turn_id) for e in events if e.type.value.startswith("turn_")]
    assert ends == [
        ("turn_started", "turn-1"),
        ("turn_failed", "turn-1"),
        ("turn_started", "turn-2"),
        ("turn_failed", "turn-2"),
        ("turn_started", "turn-3"),
        ("turn_completed", "turn-3"),
    ]
