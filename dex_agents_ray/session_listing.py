"""Finding and listing sessions: who waits for a person, each session's status and
last activity, and the Steps a session is in. Used by the inspector page
(``dex-agents-ray serve``) and ``dex-agents-ray sessions``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dex import FlowStatus

from dex_agents_ray.engine import StepHistoryEntry
from dex_agents_ray.session import AgentMessage, AgentSessionFlow, AgentSnapshot, FlowClient

__all__ = [
    "WAITING_STEP_TYPES",
    "SessionRow",
    "active_step_types",
    "list_sessions",
    "message_line",
    "waiting_sessions",
]

WAITING_STEP_TYPES: Mapping[str, str] = {
    "AwaitToolApproval": "approval",
    "AwaitQuestionAnswer": "question",
}
"""The Steps in which a session waits for a person, and what it waits for."""
_ENDED_EVENTS = frozenset({"step_completed", "step_failed", "step_canceled"})
_SNAPSHOT_CONCURRENCY = 8
_SEARCH_PAGE = 200
_MAX_SESSIONS = 10_000
"""The most search results one listing reads per Flow type."""


@dataclass(frozen=True, kw_only=True)
class SessionRow:
    """One session in a listing."""

    session_id: str
    agent: str
    flow_status: str
    status: str
    waiting_for: tuple[str, ...]
    turn_count: int
    pending: int
    started_at: datetime
    last_activity: datetime

    def to_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "agent": self.agent,
            "flow_status": self.flow_status,
            "status": self.status,
            "waiting_for": list(self.waiting_for),
            "turn_count": self.turn_count,
            "pending": self.pending,
            "started_at": self.started_at.isoformat(),
            "last_activity": self.last_activity.isoformat(),
        }


async def _search_all(client: FlowClient, query: str, limit: int) -> list[Any]:
    entries: list[Any] = []
    token = ""
    while len(entries) < limit:
        page = await client.search_flows(query, _SEARCH_PAGE, token)
        entries.extend(page.flows)
        token = page.next_page_token
        if not token:
            break
    return entries[:limit]


async def waiting_sessions(
    client: FlowClient, flow_type: str
) -> tuple[dict[str, set[str]], dict[str, Any]]:
    """Session ID -> what it waits for (``approval``, ``question``), by the
    ``ActiveStepTypes`` search, and the search entries by session ID."""
    waiting: dict[str, set[str]] = {}
    entries: dict[str, Any] = {}
    for step_type, what in WAITING_STEP_TYPES.items():
        query = f'FlowType = "{flow_type}" AND ActiveStepTypes = "{step_type}"'
        for entry in await _search_all(client, query, _MAX_SESSIONS):
            waiting.setdefault(entry.flow_id, set()).add(what)
            entries[entry.flow_id] = entry
    return waiting, entries


async def list_sessions(
    client: FlowClient,
    flows: Sequence[AgentSessionFlow],
    *,
    waiting_only: bool,
    limit: int,
    allowed: Callable[[str], Awaitable[bool]] | None = None,
) -> list[SessionRow]:
    """The newest ``limit`` sessions of ``flows`` (only those waiting for a person
    with ``waiting_only``), most recently active first."""
    candidates: list[tuple[Any, AgentSessionFlow, set[str]]] = []
    for flow in flows:
        flow_type = flow.get_flow_type()
        waiting, waiting_entries = await waiting_sessions(client, flow_type)
        if waiting_only:
            entries = list(waiting_entries.values())
        else:
            entries = await _search_all(client, f'FlowType = "{flow_type}"', _MAX_SESSIONS)
        candidates.extend((e, flow, waiting.get(e.flow_id, set())) for e in entries)
    candidates.sort(key=lambda c: c[0].started_at, reverse=True)
    gate = asyncio.Semaphore(_SNAPSHOT_CONCURRENCY)

    async def row(entry: Any, flow: AgentSessionFlow, waits: set[str]) -> SessionRow | None:
        if allowed is not None and not await allowed(entry.flow_id):
            return None
        async with gate:
            snapshot = await client.invoke_rpc(flow.get_agent_snapshot, entry.flow_id)
            newest = await client.list_stream_messages(entry.flow_id, flow.agent_events, 1)
        return _row(entry, flow, snapshot, waits, newest.messages)

    rows = await asyncio.gather(*(row(*c) for c in candidates[: max(limit, 0)]))
    found = [r for r in rows if r is not None]
    found.sort(key=lambda r: r.last_activity, reverse=True)
    return found


def _row(
    entry: Any,
    flow: AgentSessionFlow,
    snapshot: AgentSnapshot,
    waits: set[str],
    newest_events: Sequence[Any],
) -> SessionRow:
    state = snapshot.state
    times: list[datetime] = [entry.started_at]
    if state is not None:
        times.append(state.started_at)
    if snapshot.messages:
        times.append(snapshot.messages[-1].created_at)
    times.extend(m.value.created_at for m in newest_events)
    if entry.closed_at is not None:
        times.append(entry.closed_at)
    flow_status = str(entry.status.value if isinstance(entry.status, FlowStatus) else entry.status)
    return SessionRow(
        session_id=entry.flow_id,
        agent=flow.get_flow_type(),
        flow_status=flow_status,
        status="starting" if state is None else state.status.value,
        waiting_for=tuple(sorted(waits)) if flow_status == "running" else (),
        turn_count=0 if state is None else state.turn_count,
        pending=len(snapshot.pending_interrupts),
        started_at=entry.started_at,
        last_activity=max(times),
    )


def active_step_types(history: Sequence[StepHistoryEntry]) -> list[str]:
    """The Step types a run is in, from its Step history (scheduled, not ended)."""
    active: dict[str, str] = {}
    for entry in history:
        if entry.event_type == "flow_closed":
            active.clear()
        elif entry.event_type == "step_scheduled" and entry.step_execution_id:
            active[entry.step_execution_id] = entry.step_type
        elif entry.event_type in _ENDED_EVENTS:
            active.pop(entry.step_execution_id, None)
    return sorted(set(active.values()))


def message_line(message: AgentMessage, limit: int = 160) -> str:
    """One message as one line of text: its text, a tool result's output, or the
    call an assistant message makes (``(calls tool {...})``), at most ``limit``
    characters, whitespace folded."""
    if message.role.value == "assistant" and message.tool_name:
        text = f"(calls {message.tool_name} {message.tool_arguments or ''})".strip()
    else:
        text = message.text if message.text is not None else message.tool_output or ""
    return " ".join(text.split())[:limit]
