"""The browser snapshot and its resume token agree however a turn races them.

``read_agent_event_stream_snapshot`` reads the session's snapshot and finds the
token in the ``AgentEvents`` Stream. A turn that starts right after the snapshot
read (the snapshot shows no active turn) must still reach the browser from its
``turn_started`` on. The race is made deterministic with a client that starts
the turn, and waits until its first event is stored, as the snapshot read
returns: the exact moment between the snapshot and the Stream read.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from dex import StreamMessage

from dex_agents_ray import (
    AgentEvent,
    AgentEventType,
    AgentSessionClient,
    AgentSessionFlow,
    AgentSnapshot,
    AgentState,
    AgentStatus,
)
from dex_agents_ray.ui_stream import (
    KEEP_ALIVE_FRAME,
    _TokenFinder,
    read_agent_event_stream_snapshot,
    read_agent_event_stream_snapshot_sync,
    stream_agent_event_frames,
)
from tests.session.agents import Reply, build_flow
from tests.session.polling import eventually, snapshot_when, turn_done

SCRIPT = {"go": [Reply()], "next": [Reply()]}
_SHORT = timedelta(milliseconds=200)


class _TurnAfterSnapshot:
    """The engine client, except that its first ``get_agent_snapshot`` call runs
    ``hook`` after the snapshot is read and before the caller sees it."""

    def __init__(self, client: Any, flow: AgentSessionFlow, hook: Callable[[], Awaitable[None]]):
        self._client = client
        self._flow = flow
        self._hook = hook
        self.fired = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    async def invoke_rpc(self, rpc: Any, flow_id: str, *args: Any, **kwargs: Any) -> Any:
        output = await self._client.invoke_rpc(rpc, flow_id, *args, **kwargs)
        if rpc == self._flow.get_agent_snapshot and not self.fired:
            self.fired = True
            await self._hook()
        return output


class _SyncTurnAfterSnapshot:
    """``_TurnAfterSnapshot`` over a ``SyncEngineClient`` (the hook blocks)."""

    def __init__(self, client: Any, flow: AgentSessionFlow, hook: Callable[[], None]):
        self._client = client
        self._flow = flow
        self._hook = hook
        self.fired = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def invoke_rpc(self, rpc: Any, flow_id: str, *args: Any, **kwargs: Any) -> Any:
        output = self._client.invoke_rpc(rpc, flow_id, *args, **kwargs)
        if rpc == self._flow.get_agent_snapshot and not self.fired:
            self.fired = True
            self._hook()
        return output


async def _second_turn_stored(sessions: AgentSessionClient, session_id: str) -> None:
    """Send the second turn's message and wait until its ``turn_started`` is in the Stream."""
    assert await sessions.send_user_message(session_id, "next")

    async def started() -> bool:
        page = await sessions.client.list_stream_messages(
            session_id, sessions.flow.agent_events, 100
        )
        return any(
            m.value.type is AgentEventType.TURN_STARTED and m.value.turn_id == "turn-2"
            for m in page.messages
        )

    await eventually(started, description="turn-2's turn_started in the Stream")


async def _first_event(
    sessions: AgentSessionClient, flow: AgentSessionFlow, token: str
) -> dict[str, Any] | None:
    """Once turn-2 has ended (every event stored), the first event a browser
    opening the stream at ``token`` gets; ``None`` when it gets only a keep-alive."""
    await snapshot_when(sessions, "s-1", turn_done(2))
    frames: Any = await stream_agent_event_frames(
        sessions.client, flow, "s-1", resume_token=token, poll_timeout=_SHORT
    )
    try:
        frame = await anext(frames)
    finally:
        await frames.aclose()
    if frame == KEEP_ALIVE_FRAME:
        return None
    data = dict(line.split(": ", 1) for line in frame.strip().split("\n"))["data"]
    event: dict[str, Any] = json.loads(data)
    return event


async def test_a_turn_that_starts_between_the_snapshot_and_the_token_reaches_the_browser(
    engine_factory: Any, state_dir: Path
) -> None:
    flow = build_flow(state_dir, SCRIPT)
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("s-1", "go")
    await snapshot_when(sessions, "s-1", turn_done(1))
    racing = _TurnAfterSnapshot(engine.client, flow, lambda: _second_turn_stored(sessions, "s-1"))

    value = await read_agent_event_stream_snapshot(racing, flow, "s-1")

    assert racing.fired
    state = value.snapshot.state
    assert state is not None and state.turn_count == 1 and state.active_turn_id is None
    first = await _first_event(sessions, flow, value.resume_token)
    assert first is not None, "the token is past turn-2: the browser never sees it"
    assert (first["type"], first["turn_id"]) == ("turn_started", "turn-2")


async def test_the_sync_variant_reads_one_consistent_position_too(
    engine_factory: Any, state_dir: Path
) -> None:
    flow = build_flow(state_dir, SCRIPT)
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("s-1", "go")
    await snapshot_when(sessions, "s-1", turn_done(1))
    sync = engine.sync_client()
    racing = _SyncTurnAfterSnapshot(
        sync, flow, lambda: sync.run(_second_turn_stored(sessions, "s-1"))
    )

    value = await asyncio.to_thread(read_agent_event_stream_snapshot_sync, racing, flow, "s-1")

    assert racing.fired
    state = value.snapshot.state
    assert state is not None and state.turn_count == 1
    first = await _first_event(sessions, flow, value.resume_token)
    assert first is not None, "the token is past turn-2: the browser never sees it"
    assert (first["type"], first["turn_id"]) == ("turn_started", "turn-2")


def _message(offset: int, kind: AgentEventType, turn_id: str | None) -> StreamMessage[AgentEvent]:
    event = AgentEvent(
        type=kind, payload={}, turn_id=turn_id, step_execution_id="RunModel-1", attempt=1
    )
    return StreamMessage(event, f"{offset}.tag", datetime.now(UTC), "#RunModel-1")


def test_a_turn_stored_before_its_start_committed_is_replayed_whole() -> None:
    """The Stream can hold a turn's first events before the snapshot shows the turn
    (a write appended alone while its Step's commit waited for the store): the
    token goes back past them to the newest event the snapshot knows."""
    stream = [
        _message(1, AgentEventType.TURN_STARTED, "turn-1"),
        _message(2, AgentEventType.TURN_COMPLETED, "turn-1"),
        _message(3, AgentEventType.TURN_STARTED, "turn-2"),
        _message(4, AgentEventType.TEXT_DELTA, "turn-2"),
    ]
    newest_first = stream[::-1]
    idle = AgentSnapshot(
        state=AgentState(status=AgentStatus.WAITING_FOR_USER_MESSAGE, turn_count=1)
    )

    finder = _TokenFinder(idle, position="4.tag")
    finder.feed(newest_first, last_page=True)
    assert finder.token == "2.tag"

    # Read before turn-2 stored anything: the position stands, turn-2 is after it.
    finder = _TokenFinder(idle, position="2.tag")
    finder.feed(newest_first, last_page=True)
    assert finder.token == "2.tag"

    # The snapshot shows turn-2 ended: everything up to the position is known.
    ended = AgentSnapshot(
        state=AgentState(status=AgentStatus.WAITING_FOR_USER_MESSAGE, turn_count=2)
    )
    finder = _TokenFinder(ended, position="4.tag")
    finder.feed(newest_first, last_page=True)
    assert finder.token == "4.tag"

    # An empty Stream at the position: replay from its start, with no read.
    empty = _TokenFinder(idle, position="")
    assert empty.done and empty.token == ""
