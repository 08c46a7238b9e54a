"""Driving one session through a case's turns, from the session's durable state.

The driver never trusts its own memory across a restart: each step reads the
session's snapshot and derives what to do next. A session that is idle with
nothing queued and ``turn_count`` turns started has had its first
``turn_count`` user messages; the next is ``turns[turn_count]``. A message
whose send committed just before a kill shows as queued (or as a started
turn), so it is never sent twice; one that ``AwaitUserMessage`` took and
whose turn has not started yet shows in the Step history (read before the
state, so the two together leave no gap). Approvals and questions are answered by
the case's scripted answers, then by the policy; the index of a question
among the case's ``answers`` is its place among the session's questions in
the ``AgentEvents`` Stream (durable too).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dex import IdReusePolicy, StartFlowOptions
from dex.runtime_errors import (
    FlowAlreadyStartedError,
    LongPollTimeoutError,
)

from dex_agents_ray.engine import EngineClient
from dex_agents_ray.evals._cases import EvalCase
from dex_agents_ray.evals._policies import (
    Answer,
    Approve,
    InterruptDecision,
    InterruptPolicy,
    Reject,
    decide,
)
from dex_agents_ray.session import (
    SNAPSHOT_MESSAGE_LIMIT,
    AgentEventType,
    AgentInterrupt,
    AgentMessage,
    AgentSessionClient,
    AgentSnapshot,
    InterruptKind,
    MessageRole,
)

WAKE_EVENTS = frozenset(
    {
        AgentEventType.TURN_COMPLETED,
        AgentEventType.TURN_FAILED,
        AgentEventType.TURN_STEERED,
        AgentEventType.TURN_CANCELLED,
        AgentEventType.INTERRUPT_RAISED,
    }
)
"""Events after which the driver reads the snapshot again."""
TURN_END_EVENTS = WAKE_EVENTS - {AgentEventType.INTERRUPT_RAISED}
TURN_START_EVENTS = WAKE_EVENTS | {AgentEventType.TURN_STARTED}
POLL_SECONDS = 10.0
"""The longest a driver waits on the event Stream before reading the snapshot anyway."""
COMMIT_WAIT_SECONDS = 0.02
COMMIT_WAIT_MAX_SECONDS = 1.0
"""How long a driver waits before it reads the state again when the Stream is ahead
of it (doubling from the first to the second)."""


@dataclass(frozen=True, kw_only=True)
class SessionOutcome:
    """Where a driven session ended up."""

    status: str
    """``done``, ``failed`` or ``needs_person``."""
    snapshot: AgentSnapshot | None
    messages: tuple[AgentMessage, ...] = ()
    error: str | None = None
    interrupts_answered: int = 0


class _Events:
    """The session's ``AgentEvents``, read from the start: wake-ups and question order."""

    def __init__(self, sessions: AgentSessionClient, session_id: str) -> None:
        self.sessions = sessions
        self.session_id = session_id
        self.token = ""
        self.questions: list[str] = []
        self.ended = 0
        """Turns ended so far (completed, failed, cancelled or steered)."""
        self.last_end: AgentEventType | None = None
        self.raised = 0
        """Interrupts raised so far."""

    def _see(self, value: Any, wake: frozenset[AgentEventType]) -> bool:
        kind = value.type
        if kind in TURN_END_EVENTS:
            self.ended += 1
            self.last_end = kind
        if kind is AgentEventType.INTERRUPT_RAISED:
            self.raised += 1
            payload = value.payload or {}
            if payload.get("kind") == InterruptKind.QUESTION.value:
                interrupt_id = str(payload.get("interrupt_id"))
                if interrupt_id not in self.questions:
                    self.questions.append(interrupt_id)
        return kind in wake

    async def read(self, timeout: float, *, wake: frozenset[AgentEventType] = WAKE_EVENTS) -> bool:
        """Read up to the next ``wake`` event (waiting up to ``timeout`` for it); whether
        one came."""
        while True:
            try:
                message = await self.sessions.read_event(self.session_id, self.token, timeout)
            except LongPollTimeoutError:
                return False
            self.token = message.resume_token
            if self._see(message.value, wake):
                return True

    async def drain(self) -> None:
        """Read everything the Stream holds now."""
        await self.read(0.0, wake=frozenset())


def _idle_at(snapshot: AgentSnapshot, turn_count: int) -> bool:
    state = snapshot.state
    return (
        state is not None
        and state.active_turn_id is None
        and state.turn_count == turn_count
        and snapshot.queued_message_count == 0
        and not snapshot.steered_messages
    )


async def message_in_flight(sessions: AgentSessionClient, session_id: str) -> bool:
    """Whether ``AwaitUserMessage`` took a message whose turn has not started yet.

    Between the commit that hands a queued message to ``AwaitUserMessage`` and
    the commit that starts its turn, the message is neither queued nor a turn;
    the Step history (durable) shows that execution satisfied but not completed.
    """
    client = sessions.client
    if not isinstance(client, EngineClient):  # the runner's sessions use FlowEngine.client
        raise TypeError("evals drive sessions over the engine's EngineClient")
    last: dict[str, str] = {}
    for entry in await client.read_step_history(session_id):
        if entry.step_type == "AwaitUserMessage":
            last[entry.step_execution_id] = entry.event_type
    return any(
        event in ("wait_satisfied", "attempt_started", "attempt_failed") for event in last.values()
    )


async def all_messages(
    sessions: AgentSessionClient, session_id: str, snapshot: AgentSnapshot
) -> tuple[AgentMessage, ...]:
    """Every stored message (the snapshot's when it holds them all)."""
    if len(snapshot.messages) < SNAPSHOT_MESSAGE_LIMIT:
        return snapshot.messages
    pages: list[tuple[AgentMessage, ...]] = []
    before: int | None = None
    while True:
        page = await sessions.list_agent_messages(session_id, before_sequence=before, limit=200)
        pages.append(tuple(page.messages))
        if page.next_before_sequence is None:
            break
        before = page.next_before_sequence
    return tuple(m for p in reversed(pages) for m in p)


def last_answer(messages: tuple[AgentMessage, ...]) -> str:
    """The newest assistant text."""
    for message in reversed(messages):
        if message.role is MessageRole.ASSISTANT and message.text:
            return message.text
    return ""


def latency_seconds(snapshot: AgentSnapshot, messages: tuple[AgentMessage, ...]) -> float | None:
    if snapshot.state is None or not messages:
        return None
    end: datetime = messages[-1].created_at
    return max(0.0, (end - snapshot.state.started_at).total_seconds())


def tool_call_count(messages: tuple[AgentMessage, ...]) -> int:
    return len({m.tool_call_id for m in messages if m.role is MessageRole.TOOL and m.tool_call_id})


async def drive_session(
    sessions: AgentSessionClient,
    session_id: str,
    case: EvalCase,
    policy: InterruptPolicy | Sequence[InterruptPolicy] | None,
    *,
    turns: tuple[str, ...] | None = None,
    settings: dict[str, Any] | None = None,
) -> SessionOutcome:
    """Start (or resume) ``session_id`` and run ``turns`` (default: the case's)."""
    drive = _Drive(sessions, session_id, case, policy, case.turns if turns is None else turns)
    return await drive.run(dict(case.session_settings) if settings is None else settings)


class _Drive:
    """One session driven through its turns.

    ``known`` is how many user messages the session holds, once this process
    knows it for sure (it started the session, or it sent a message after the
    durable check); until then, and after a restart, every decision comes from
    the snapshot and the Step history. With it, a turn that ended
    ``turn_completed`` on the event Stream is followed by the next message
    without reading the snapshot again: a case costs what a plain loop over
    the client costs, plus one snapshot at the end.
    """

    def __init__(
        self,
        sessions: AgentSessionClient,
        session_id: str,
        case: EvalCase,
        policy: InterruptPolicy | Sequence[InterruptPolicy] | None,
        turns: tuple[str, ...],
    ) -> None:
        self.sessions = sessions
        self.session_id = session_id
        self.case = case
        self.policy = policy
        self.turns = turns
        self.events = _Events(sessions, session_id)
        self.answered: set[str] = set()
        self.known: int | None = None
        self.raised_seen = 0
        self.commit_wait = COMMIT_WAIT_SECONDS

    async def run(self, settings: dict[str, Any]) -> SessionOutcome:
        try:
            # DISALLOW: a session ID used before (even by a closed run) is never started
            # again; this start is also the existence check.
            await self.sessions.start_session(
                self.session_id,
                self.turns[0],
                session_settings=settings,
                options=StartFlowOptions(id_reuse_policy=IdReusePolicy.DISALLOW),
            )
            self.known = 1
        except FlowAlreadyStartedError:
            pass  # an earlier driver of the run started it: go on from its state
        while True:
            if await self._from_events():
                continue
            snapshot = await self.sessions.get_agent_snapshot(self.session_id)
            self.raised_seen = self.events.raised
            outcome = await self._from_snapshot(snapshot)
            if outcome is not None:
                return outcome

    async def _from_events(self) -> bool:
        """Go on from the event Stream alone where this process knows enough; whether
        it did (``False``: read the snapshot)."""
        known, events = self.known, self.events
        if known is None or events.raised != self.raised_seen:
            return False
        if events.ended < known:  # the last message's turn still runs
            return await events.read(POLL_SECONDS)
        if (
            events.ended == known
            and events.last_end is AgentEventType.TURN_COMPLETED
            and known < len(self.turns)
        ):
            await self.sessions.send_user_message(self.session_id, self.turns[known])
            self.known = known + 1
            return True
        return False

    async def _from_snapshot(self, snapshot: AgentSnapshot) -> SessionOutcome | None:
        """What ``snapshot`` says to do: the outcome, or ``None`` to look again."""
        state = snapshot.state
        if state is None:
            await self.events.read(1.0)
            return None
        busy = (
            state.active_turn_id is not None
            or snapshot.queued_message_count > 0
            or bool(snapshot.steered_messages)
        )
        if not busy:
            if state.last_turn_error:
                error = f"turn {state.turn_count}: {state.last_turn_error}"
                return await self._outcome("failed", snapshot, error)
            if state.turn_count < len(self.turns):
                await self._send_next(state.turn_count)
                return None
            return await self._outcome("done", snapshot)
        pending = [i for i in snapshot.pending_interrupts if i.interrupt_id not in self.answered]
        if pending:
            acted, waiting = await _answer(
                self.sessions, self.session_id, self.case, self.policy, pending, self.events
            )
            self.answered.update(i.interrupt_id for i in pending if i.interrupt_id not in waiting)
            if waiting and not acted:
                error = "waits for a person: " + ", ".join(waiting.values())
                return SessionOutcome(
                    status="needs_person",
                    snapshot=snapshot,
                    error=error,
                    interrupts_answered=len(self.answered),
                )
            if acted:
                self.raised_seen = self.events.raised
                return None
        if self.known is not None and self.events.ended >= self.known:
            await self._wait_for_commit()
            return None
        await self.events.read(POLL_SECONDS)
        return None

    async def _wait_for_commit(self) -> None:
        """The Stream says every message's turn ended; the state says one runs.

        A turn's last events can reach the Stream before the commit that ends
        the turn (a Stream write waits a moment for its run's commit, then is
        appended alone), and nothing more comes on the Stream after them: so
        look at the state again shortly instead of waiting on the Stream.
        """
        await asyncio.sleep(self.commit_wait)
        self.commit_wait = min(self.commit_wait * 2, COMMIT_WAIT_MAX_SECONDS)

    async def _send_next(self, turn_count: int) -> None:
        """Send message ``turn_count`` unless the session already holds it."""
        # Read the history first, then the state again: a message handed to
        # AwaitUserMessage after the history read shows in the state.
        if await message_in_flight(self.sessions, self.session_id):
            await self.events.read(1.0, wake=TURN_START_EVENTS)
            return
        if _idle_at(await self.sessions.get_agent_snapshot(self.session_id), turn_count):
            await self.sessions.send_user_message(self.session_id, self.turns[turn_count])
            await self.events.drain()  # the Stream up to now, for ``ended``
            self.known = turn_count + 1

    async def _outcome(
        self, status: str, snapshot: AgentSnapshot, error: str | None = None
    ) -> SessionOutcome:
        return SessionOutcome(
            status=status,
            snapshot=snapshot,
            messages=await all_messages(self.sessions, self.session_id, snapshot),
            error=error,
            interrupts_answered=len(self.answered),
        )


async def _answer(
    sessions: AgentSessionClient,
    session_id: str,
    case: EvalCase,
    policy: InterruptPolicy | Sequence[InterruptPolicy] | None,
    pending: Sequence[AgentInterrupt],
    events: _Events,
) -> tuple[bool, dict[str, str]]:
    """Answer what the case's answers and the policy answer: (any answered, the rest)."""
    await events.drain()  # the question order up to now
    acted = False
    waiting: dict[str, str] = {}
    for interrupt in pending:
        decision: InterruptDecision | None = None
        if interrupt.kind is InterruptKind.QUESTION:
            questions = events.questions
            iid = interrupt.interrupt_id
            index = questions.index(iid) if iid in questions else len(questions)
            if index < len(case.answers):
                decision = Answer(text=case.answers[index])
        if decision is None:
            decision = await decide(policy, case, interrupt)
        label = f"{interrupt.kind.value} {interrupt.interrupt_id} ({interrupt.tool_name})"
        if decision is None:
            waiting[interrupt.interrupt_id] = label
        elif await _apply(sessions, session_id, interrupt.interrupt_id, decision):
            acted = True
        else:
            waiting[interrupt.interrupt_id] = (
                f"{label} refused the policy's {type(decision).__name__.lower()}"
            )
    return acted, waiting


async def _apply(
    sessions: AgentSessionClient, session_id: str, interrupt_id: str, decision: Any
) -> bool:
    if isinstance(decision, Approve):
        return await sessions.resolve_interrupt(session_id, interrupt_id, approved=True)
    if isinstance(decision, Reject):
        return await sessions.resolve_interrupt(
            session_id, interrupt_id, approved=False, rejection_message=decision.message
        )
    if isinstance(decision, Answer):
        return await sessions.answer_question(session_id, interrupt_id, decision.text)
    raise TypeError(f"not an interrupt decision: {decision!r}")
