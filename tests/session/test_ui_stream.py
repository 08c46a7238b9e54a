"""``dex_agents_ray.ui_stream`` on real Ray and SQLite: the snapshot's wire JSON and
its resume token (replaying the active turn), SSE frames that resume after a
reconnect with no repeated or missing event, keep-alives, a rejected token, and
the sync variants."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from dex_agents_ray import AgentSessionClient, AgentSessionOptions, ToolEffect, ToolPolicy
from dex_agents_ray.testing import FileGate
from dex_agents_ray.ui_stream import (
    AGENT_EVENT_STREAM_HEADERS,
    KEEP_ALIVE_FRAME,
    InvalidAgentEventResumeTokenError,
    read_agent_event_stream_snapshot,
    read_agent_event_stream_snapshot_sync,
    stream_agent_event_frames,
    stream_agent_event_frames_sync,
)
from tests.session.agents import Call, Reply, build_flow
from tests.session.polling import snapshot_when, turn_done

OPTIONS = AgentSessionOptions(tool_policies={"slow": ToolPolicy(ToolEffect.READ)})
SHORT = timedelta(milliseconds=200)


def _parse(frame: str) -> tuple[str, dict[str, Any]]:
    lines = dict(line.split(": ", 1) for line in frame.strip().split("\n"))
    return lines["id"], json.loads(lines["data"])


async def _take(frames: Any, count: int) -> list[str]:
    taken = []
    async for frame in frames:
        taken.append(frame)
        if len(taken) == count:
            break
    return taken


async def test_a_browser_rebuilds_a_live_turn_and_resumes_after_a_reconnect(
    engine_factory: Any, state_dir: Path
) -> None:
    script = {"go": [Reply(calls=[Call("c1", "slow")]), Reply()], "next": [Reply()]}
    flow = build_flow(state_dir, script, {"slow": "gate"}, options=OPTIONS)
    engine = await engine_factory([flow])
    client = engine.client
    sessions = AgentSessionClient(client, flow)
    await sessions.start_session("s-1", "go")
    await FileGate(state_dir, "slow-1").wait_until_reached(timeout=120)

    # While the turn runs, the snapshot's token replays that turn from its start.
    live = await read_agent_event_stream_snapshot(client, flow, "s-1")
    wire = live.to_json()
    assert set(wire) == {"snapshot", "resume_token"}
    assert wire["snapshot"]["state"]["active_turn_id"] == "turn-1"
    assert all("framework_item" not in m for m in wire["snapshot"]["messages"])
    assert all("runner_tool_state" not in r for r in wire["snapshot"]["tool_calls"])
    json.dumps(wire)  # plain JSON
    frames = await stream_agent_event_frames(client, flow, "s-1", resume_token=live.resume_token)
    first, second = await _take(frames, 2)
    first_id, first_event = _parse(first)
    assert first_event["type"] == "turn_started" and first_event["turn_id"] == "turn-1"
    assert isinstance(first_event["payload"], str) and json.loads(first_event["payload"])
    await frames.aclose()

    # A reconnect with the last id (Last-Event-ID) continues with the next event.
    FileGate(state_dir, "slow-1").release()
    await snapshot_when(sessions, "s-1", turn_done(1))
    resumed = await stream_agent_event_frames(client, flow, "s-1", resume_token=first_id)
    types = []
    async for frame in resumed:
        _, event = _parse(frame)
        types.append(event["type"])
        if event["type"] == "turn_completed":
            break
    assert types[0] == _parse(second)[1]["type"]  # no event repeated, none missing
    assert types.count("turn_started") == 0 and types[-1] == "turn_completed"

    # With no turn active the token is the newest event: the stream waits, with keep-alives.
    idle = await read_agent_event_stream_snapshot(client, flow, "s-1")
    quiet = await stream_agent_event_frames(
        client, flow, "s-1", resume_token=idle.resume_token, poll_timeout=SHORT
    )
    assert await _take(quiet, 1) == [KEEP_ALIVE_FRAME]
    assert await sessions.send_user_message("s-1", "next")
    keep_alives = 0
    async for frame in quiet:  # keep-alives until the new turn's first event
        keep_alives += frame == KEEP_ALIVE_FRAME
        assert keep_alives < 300, "the new turn never reached the stream"
        if frame != KEEP_ALIVE_FRAME:
            event = _parse(frame)[1]
            assert (event["type"], event["turn_id"]) == ("turn_started", "turn-2")
            break
    await quiet.aclose()

    # A token of another session is refused before any frame.
    await sessions.start_session("s-2", "next")
    with pytest.raises(InvalidAgentEventResumeTokenError):
        await stream_agent_event_frames(client, flow, "s-2", resume_token=first_id)
    with pytest.raises(InvalidAgentEventResumeTokenError):
        await stream_agent_event_frames(client, flow, "s-2", resume_token="12")
    assert AGENT_EVENT_STREAM_HEADERS["Content-Type"].startswith("text/event-stream")


async def test_the_sync_variants_serve_a_wsgi_app(engine_factory: Any, state_dir: Path) -> None:
    flow = build_flow(state_dir, {"hi": [Reply()]}, options=OPTIONS)
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("s-1", "hi")
    await snapshot_when(sessions, "s-1", turn_done(1))
    sync = engine.sync_client()

    def serve() -> tuple[dict[str, Any], list[str]]:
        snapshot = read_agent_event_stream_snapshot_sync(sync, flow, "s-1").to_json()
        frames = stream_agent_event_frames_sync(sync, flow, "s-1", resume_token="")
        return snapshot, [next(frames) for _ in range(2)]

    snapshot, frames = await asyncio.to_thread(serve)
    assert snapshot["snapshot"]["state"]["turn_count"] == 1 and snapshot["resume_token"]
    assert [_parse(f)[1]["type"] for f in frames] == ["turn_started", "text_delta"]
    with pytest.raises(InvalidAgentEventResumeTokenError):
        await asyncio.to_thread(stream_agent_event_frames_sync, sync, flow, "s-1", resume_token="x")
