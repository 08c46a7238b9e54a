"""Sessions in a notebook: rich display, and a live view of a running turn.

    from dex_agents_ray.notebook import SessionView, live_turn

    await sessions.start_session("s1", "Where is order A2?")
    await live_turn(sessions, "s1")          # one output, updated in place as events arrive
    SessionView(await sessions.get_agent_snapshot("s1"), "s1")   # transcript, tools, interrupts

``SessionView`` renders as HTML in Jupyter (``_repr_html_``, every text escaped)
and as plain text anywhere else (``repr``). ``live_turn`` displays a view with a
``display_id`` and updates that one output from the session's ``AgentEvents``
stream until the turn ends or waits for a person; outside IPython it prints one
line per event. Needs IPython only when it displays (the ``notebook`` extra).
"""

from __future__ import annotations

import asyncio
import html
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dex import LongPollTimeoutError

from dex_agents_ray.session import (
    AgentEvent,
    AgentInterrupt,
    AgentSessionClient,
    AgentSnapshot,
    AgentToolCall,
)
from dex_agents_ray.session_listing import message_line

__all__ = ["SessionView", "live_turn"]

_TEXT_LIMIT = 400
_END_EVENTS = frozenset({"turn_completed", "turn_failed", "turn_steered", "turn_cancelled"})

_STYLE = (
    "<style>.dexs{font-family:system-ui,sans-serif;font-size:13px;max-width:860px}"
    ".dexs h4{margin:4px 0}.dexs table{border-collapse:collapse;margin:4px 0}"
    ".dexs td,.dexs th{border-bottom:1px solid #ddd;padding:3px 8px;text-align:left;"
    "vertical-align:top}.dexs .role{color:#666;width:70px}.dexs .pending{background:#fff7e0}"
    ".dexs code{font-size:12px;white-space:pre-wrap;word-break:break-word}"
    ".dexs .muted{color:#777}</style>"
)


@dataclass
class SessionView:
    """A session as its snapshot shows it, for display.

    Attributes:
        snapshot: What ``get_agent_snapshot`` returned.
        session_id: Shown in the header.
        events: Recent events, shown under the transcript (the live view adds them).
    """

    snapshot: AgentSnapshot
    session_id: str = ""
    events: list[AgentEvent] = field(default_factory=list)

    @property
    def pending(self) -> Sequence[AgentInterrupt]:
        """The interrupts waiting for a person (approve with ``resolve_interrupt``)."""
        return self.snapshot.pending_interrupts

    def _header(self) -> str:
        state = self.snapshot.state
        if state is None:
            return f"session {self.session_id}: not started yet"
        usage = self.snapshot.usage
        tokens = (
            f" · {usage.input_tokens} in / {usage.output_tokens} out tokens, "
            f"{usage.model_calls} model call(s)"
            if usage is not None
            else ""
        )
        active = f" · turn {state.active_turn_id} running" if state.active_turn_id else ""
        turns = f"{state.turn_count} turn(s)"
        return f"session {self.session_id}: {state.status.value} · {turns}{active}{tokens}"

    def __repr__(self) -> str:
        lines = [self._header()]
        for message in self.snapshot.messages:
            text = message_line(message, _TEXT_LIMIT)
            lines.append(f"  {message.sequence:>3} {message.role.value:<9} {text}")
        for record in self.snapshot.tool_calls:
            lines.append(f"  tool {record.tool_name} [{record.effect.value}] {record.status.value}")
        for interrupt in self.snapshot.pending_interrupts:
            lines.append(f"  waiting: {_interrupt_text(interrupt)}")
        for event in self.events[-8:]:
            lines.append(f"  event {event.type.value} {_payload(event)}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        e = html.escape
        parts = [_STYLE, '<div class="dexs">', f"<h4>{e(self._header())}</h4>"]
        if self.snapshot.messages:
            rows = "".join(
                f'<tr><td class="role">{e(m.role.value)}</td>'
                f"<td>{e(message_line(m, _TEXT_LIMIT))}</td></tr>"
                for m in self.snapshot.messages
            )
            parts.append(f"<table>{rows}</table>")
        if self.snapshot.tool_calls:
            parts.append(
                "<h4>Tool calls</h4><table>" + _tool_rows(self.snapshot.tool_calls) + "</table>"
            )
        if self.snapshot.pending_interrupts:
            rows = "".join(
                f'<tr class="pending"><td><code>{e(i.interrupt_id)}</code></td>'
                f"<td>{e(_interrupt_text(i))}</td></tr>"
                for i in self.snapshot.pending_interrupts
            )
            parts.append(f"<h4>Waiting for a person</h4><table>{rows}</table>")
        if self.events:
            rows = "".join(
                f'<tr><td class="muted">{e(ev.type.value)}</td><td><code>{e(_payload(ev))}</code>'
                "</td></tr>"
                for ev in self.events[-8:]
            )
            parts.append(f"<h4>Latest events</h4><table>{rows}</table>")
        parts.append("</div>")
        return "".join(parts)


def _tool_rows(records: Sequence[AgentToolCall]) -> str:
    e = html.escape
    return "".join(
        f"<tr><td>{e(r.tool_name)}</td><td>{e(r.effect.value)}</td><td>{e(r.status.value)}</td>"
        "</tr>"
        for r in records
    )


def _interrupt_text(interrupt: AgentInterrupt) -> str:
    if interrupt.kind.value == "question":
        return f"question: {interrupt.question}"
    return f"approve {interrupt.tool_name}({interrupt.arguments})?"


def _payload(event: AgentEvent) -> str:
    return json.dumps(event.payload, ensure_ascii=False, separators=(",", ":"))[:200]


async def live_turn(
    sessions: AgentSessionClient,
    session_id: str,
    *,
    send: str | None = None,
    timeout: float = 300.0,
) -> SessionView:
    """Follow the session's turn until it ends or waits for a person, updating one
    displayed ``SessionView`` in place; returns the last view.

    With ``send``, the message is sent after the view has its place in the event
    stream, so the turn it starts is followed from its first event. Without it,
    the view follows the active turn from its first event (the browser-stream
    snapshot token, ``dex_agents_ray.ui_stream``), or a new session's first turn;
    for a session that runs nothing it returns at once.
    """
    from dex_agents_ray.ui_stream import read_agent_event_stream_snapshot

    opened = await read_agent_event_stream_snapshot(sessions.client, sessions.flow, session_id)
    view = SessionView(opened.snapshot, session_id)
    token = opened.resume_token
    state = opened.snapshot.state
    expecting = send is not None or state is None or state.turn_count == 0
    if state is None or (state.turn_count == 0 and state.active_turn_id is None):
        token = ""  # a new session: its first turn from the start of its stream
    if send is not None and not await sessions.send_user_message(session_id, send):
        raise ValueError(f"session {session_id!r} did not accept the message")
    shown = _Shown(view)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not _settled(view, expecting) and loop.time() < deadline:
        try:
            remaining = max(0.1, min(deadline - loop.time(), 5.0))
            message = await sessions.read_event(session_id, token, timeout=remaining)
        except LongPollTimeoutError:
            continue
        token = message.resume_token
        view.events.append(message.value)
        if message.value.type.value not in _DELTA_EVENTS:
            view.snapshot = await sessions.get_agent_snapshot(session_id)
        shown.update(view)
    view.snapshot = await sessions.get_agent_snapshot(session_id)
    shown.update(view)
    return view


_DELTA_EVENTS = frozenset({"text_delta", "reasoning_delta", "usage_recorded"})


def _settled(view: SessionView, expecting: bool) -> bool:
    """The followed turn ended or waits for a person; or, with nothing expected,
    no turn runs and none is queued."""
    if view.events and view.events[-1].type.value in _END_EVENTS:
        return True
    if view.snapshot.pending_interrupts and (view.events or not expecting):
        return True
    if expecting:
        return False
    state = view.snapshot.state
    return (
        state is not None
        and state.active_turn_id is None
        and not view.snapshot.queued_messages
        and not view.events
    )


class _Shown:
    """One output updated in place in IPython; elsewhere, a line per new event."""

    def __init__(self, view: SessionView) -> None:
        self._printed = 0
        self._handle: Any = None
        try:
            from IPython import get_ipython
            from IPython.display import display
        except ImportError:
            print(repr(view).splitlines()[0], flush=True)
            return
        if get_ipython() is None:
            print(repr(view).splitlines()[0], flush=True)
            return
        self._handle = display(view, display_id=True)  # type: ignore[no-untyped-call]

    def update(self, view: SessionView) -> None:
        if self._handle is not None:
            self._handle.update(view)
            return
        for event in view.events[self._printed :]:
            print(f"  {event.type.value} {_payload(event)}", flush=True)
        self._printed = len(view.events)
