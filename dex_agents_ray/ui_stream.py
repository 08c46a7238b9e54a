"""Browser streams: render a live session from its ``AgentEvents`` Stream and recover
after a reconnect (the spec's "Browser streams"). No web framework is needed.

An application mounts two endpoints: the **snapshot**
(``read_agent_event_stream_snapshot(...).to_json()``: the session's snapshot in
the wire format plus the resume token to open the event stream from; while a
turn is active the token replays that turn's events, and a turn that starts
while the two are read is replayed, never lost) and the **events**
(``stream_agent_event_frames``: Server-Sent Event frames whose ``id`` is the
event's resume token and whose ``data`` is the ``AgentEvent`` wire JSON with
``payload`` as JSON text; ``KEEP_ALIVE_FRAME`` after each empty long poll).
A token the engine rejects, such as one of another session, raises
``InvalidAgentEventResumeTokenError`` before the response starts: answer 400.
The ``_sync`` variants take a ``SyncEngineClient`` (``engine.sync_client()``) for
WSGI servers, the others an ``EngineClient`` (``engine.client``); a ``dex.Client``
or ``dex.AsyncClient`` fits as well (``SyncFlowClient``, ``FlowClient``).
**Authorize every route**: the session ID and the token come from the browser.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from dex import StreamMessage, StreamMessagesPage
from dex.runtime_errors import LongPollTimeoutError

from dex_agents_ray.engine import InvalidStreamTokenError
from dex_agents_ray.errors import DexAgentsError
from dex_agents_ray.session import (
    AgentEvent,
    AgentEventType,
    AgentSessionFlow,
    AgentSnapshot,
    FlowClient,
    SyncFlowClient,
    json_ready,
)

__all__ = [
    "AGENT_EVENT_STREAM_HEADERS",
    "KEEP_ALIVE_FRAME",
    "AgentEventStreamSnapshot",
    "InvalidAgentEventResumeTokenError",
    "agent_event_frame",
    "read_agent_event_stream_snapshot",
    "read_agent_event_stream_snapshot_sync",
    "stream_agent_event_frames",
    "stream_agent_event_frames_sync",
]

AGENT_EVENT_STREAM_HEADERS: Mapping[str, str] = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache, no-transform",
    "Connection": "keep-alive",
    "X-Accel-Buffering": "no",
}
"""Headers of the events response."""
KEEP_ALIVE_FRAME = ": keep-alive\n\n"
"""The SSE comment sent after each empty long poll."""
DEFAULT_POLL_TIMEOUT = timedelta(seconds=15)
"""How long one long poll waits before a keep-alive."""
_TOKEN_CHECK_TIMEOUT = timedelta(milliseconds=1)
_HIDDEN_MESSAGE_FIELDS = ("framework_item",)
_HIDDEN_TOOL_CALL_FIELDS = (
    "tool_source_reference",
    "trace_context",
    "input_continuation",
    "input_answers",
    "task_answer_pending",
    "runner_tool_state",
)


class InvalidAgentEventResumeTokenError(DexAgentsError, ValueError):
    """The engine rejected the resume token (malformed, or of another session or
    Stream); raised before the response starts. Answer 400 and let the browser
    load the snapshot again."""


@dataclass(frozen=True)
class AgentEventStreamSnapshot:
    """A session's snapshot and the token to open its event stream from."""

    snapshot: AgentSnapshot
    """What ``get_agent_snapshot`` returned."""
    resume_token: str
    """Open the event stream here; while a turn is active it replays that turn."""

    def to_json(self) -> dict[str, Any]:
        """``{"snapshot": ..., "resume_token": ...}`` in the wire format, without
        the fields only the session's Steps use."""
        return {"snapshot": snapshot_wire(self.snapshot), "resume_token": self.resume_token}


def snapshot_wire(snapshot: AgentSnapshot) -> dict[str, Any]:
    """The snapshot's wire JSON, leaving out ``framework_item`` on messages and the
    runner's replay data on tool calls."""
    data: dict[str, Any] = json_ready(snapshot)
    for message in data.get("messages", ()):
        for name in _HIDDEN_MESSAGE_FIELDS:
            message.pop(name, None)
    for record in data.get("tool_calls", ()):
        for name in _HIDDEN_TOOL_CALL_FIELDS:
            record.pop(name, None)
    return data


def agent_event_wire(event: AgentEvent) -> dict[str, Any]:
    """The ``AgentEvent`` wire JSON, with ``payload`` as JSON text."""
    data: dict[str, Any] = json_ready(event)
    data["payload"] = json.dumps(data.get("payload", {}), separators=(",", ":"))
    return data


def agent_event_frame(resume_token: str, event: AgentEvent) -> str:
    """One SSE frame: ``id`` the event's resume token, ``data`` its wire JSON."""
    data = json.dumps(agent_event_wire(event), separators=(",", ":"))
    return f"id: {resume_token}\ndata: {data}\n\n"


# -- async ---------------------------------------------------------------------------------


async def read_agent_event_stream_snapshot(
    client: FlowClient, flow: AgentSessionFlow, session_id: str
) -> AgentEventStreamSnapshot:
    """The snapshot and the resume token (see the module docstring).

    The token is consistent with the snapshot: the Stream's position is read
    first, the snapshot at or after it, and the token never lies past that
    position unless the snapshot shows the events up to it. So a turn that
    starts while the two are read is replayed from its ``turn_started``, never
    lost.
    """
    position = _newest_token(await client.list_stream_messages(session_id, flow.agent_events, 1))
    snapshot: AgentSnapshot = await client.invoke_rpc(flow.get_agent_snapshot, session_id)
    finder = _TokenFinder(snapshot, position)
    page_token = ""
    while not finder.done:
        page = await client.list_stream_messages(session_id, flow.agent_events, 100, page_token)
        finder.feed(page.messages, last_page=not page.next_page_token)
        page_token = page.next_page_token
    return AgentEventStreamSnapshot(snapshot, finder.token)


def _newest_token(page: StreamMessagesPage[AgentEvent]) -> str:
    """The token of a one-message page's message: where the Stream ends now."""
    return str(page.messages[0].resume_token) if page.messages else ""


class _TokenFinder:
    """Finds the token by reading the Stream newest first, given ``position``: its
    newest token when the read began, taken before the snapshot.

    With an active turn the token is the one of the event just before that turn's
    ``turn_started`` (``""`` when that is the oldest the Stream keeps). With none,
    it is ``position``: events after it may belong to a turn that started after
    the snapshot was read, and the browser must get them. ``position`` itself is
    passed over while it belongs to a turn the snapshot does not know yet (its
    events stored before its start committed), so such a turn is replayed whole.
    A snapshot that already shows what came after ``position`` (a turn that ended
    meanwhile) costs the browser a few repeated events and a snapshot reload
    after ``turn_completed``, never a missing event.
    """

    def __init__(self, snapshot: AgentSnapshot, position: str) -> None:
        state = snapshot.state
        self._active = state.active_turn_id if state is not None else None
        self._turns = state.turn_count if state is not None else 0
        self._position = position
        self._reached = not position
        self.token = ""
        self.done = self._active is None and not position  # an empty Stream: from its start
        self._next_is_it = False

    def feed(self, newest_first: Sequence[StreamMessage[AgentEvent]], *, last_page: bool) -> None:
        for message in newest_first:
            if self._active is not None:
                if self._next_is_it:
                    self.token, self.done = message.resume_token, True
                    return
                event = message.value
                if event.type is AgentEventType.TURN_STARTED and event.turn_id == self._active:
                    self._next_is_it = True
                continue
            self._reached = self._reached or message.resume_token == self._position
            if self._reached and self._known(message.value.turn_id):
                self.token, self.done = message.resume_token, True
                return
        if last_page:
            self.done = True  # nothing older: replay from the start ("")

    def _known(self, turn_id: str | None) -> bool:
        """Whether the snapshot knows turn ``turn_id`` (``turn-<n>``): started at most
        ``turn_count`` turns; an event of no turn is known."""
        if turn_id is None:
            return True
        number = turn_id.removeprefix("turn-")
        return not number.isdigit() or int(number) <= self._turns


async def stream_agent_event_frames(
    client: FlowClient,
    flow: AgentSessionFlow,
    session_id: str,
    *,
    resume_token: str = "",
    poll_timeout: timedelta = DEFAULT_POLL_TIMEOUT,
) -> AsyncIterator[str]:
    """Check ``resume_token`` with one short read, then the SSE frames after it.

    Raises:
        InvalidAgentEventResumeTokenError: The engine rejected the token.
    """
    first = await _first(client, flow, session_id, resume_token)

    async def frames() -> AsyncIterator[str]:
        token = resume_token
        if first is not None:
            token = first.resume_token
            yield agent_event_frame(token, first.value)
        while True:
            try:
                message = await client.read_stream(
                    session_id, flow.agent_events, token, poll_timeout
                )
            except LongPollTimeoutError:
                yield KEEP_ALIVE_FRAME
                continue
            token = message.resume_token
            yield agent_event_frame(token, message.value)

    return frames()


async def _first(
    client: FlowClient, flow: AgentSessionFlow, session_id: str, token: str
) -> StreamMessage[AgentEvent] | None:
    try:
        return await client.read_stream(session_id, flow.agent_events, token, _TOKEN_CHECK_TIMEOUT)
    except LongPollTimeoutError:
        return None
    except (InvalidStreamTokenError, ValueError) as error:
        raise InvalidAgentEventResumeTokenError(str(error)) from None


# -- sync (WSGI) ---------------------------------------------------------------------------


def read_agent_event_stream_snapshot_sync(
    client: SyncFlowClient, flow: AgentSessionFlow, session_id: str
) -> AgentEventStreamSnapshot:
    """``read_agent_event_stream_snapshot`` over a ``SyncEngineClient``."""
    position = _newest_token(client.list_stream_messages(session_id, flow.agent_events, 1))
    snapshot: AgentSnapshot = client.invoke_rpc(flow.get_agent_snapshot, session_id)
    finder = _TokenFinder(snapshot, position)
    page_token = ""
    while not finder.done:
        page = client.list_stream_messages(session_id, flow.agent_events, 100, page_token)
        finder.feed(page.messages, last_page=not page.next_page_token)
        page_token = page.next_page_token
    return AgentEventStreamSnapshot(snapshot, finder.token)


def stream_agent_event_frames_sync(
    client: SyncFlowClient,
    flow: AgentSessionFlow,
    session_id: str,
    *,
    resume_token: str = "",
    poll_timeout: timedelta = DEFAULT_POLL_TIMEOUT,
) -> Iterator[str]:
    """``stream_agent_event_frames`` over a ``SyncEngineClient``; a generator that
    finishes its current long poll (up to ``poll_timeout``) before it stops.

    Raises:
        InvalidAgentEventResumeTokenError: The engine rejected the token.
    """
    try:
        first = client.read_stream(
            session_id, flow.agent_events, resume_token, _TOKEN_CHECK_TIMEOUT
        )
    except LongPollTimeoutError:
        first = None
    except (InvalidStreamTokenError, ValueError) as error:
        raise InvalidAgentEventResumeTokenError(str(error)) from None

    def frames() -> Iterator[str]:
        token = resume_token
        if first is not None:
            token = first.resume_token
            yield agent_event_frame(token, first.value)
        while True:
            try:
                message = client.read_stream(session_id, flow.agent_events, token, poll_timeout)
            except LongPollTimeoutError:
                yield KEEP_ALIVE_FRAME
                continue
            token = message.resume_token
            yield agent_event_frame(token, message.value)

    return frames()
