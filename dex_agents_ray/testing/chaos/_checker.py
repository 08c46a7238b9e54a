"""The invariant checker: DESIGN.md's six invariants and the campaign's own promises.

It reads a :class:`CampaignRecord` only, so a test can hand it a record with a
deliberately broken transcript, tool record or invocation log and see each
violation reported.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from dex_agents_ray.engine import EXECUTE_COMPLETED_EVENT
from dex_agents_ray.session import (
    TOOL_CALL_NOT_RUN_ERROR_PREFIX,
    AgentEventType,
    AgentToolCall,
    InterruptKind,
    MessageRole,
)
from dex_agents_ray.testing.chaos._record import CampaignRecord, SessionRecord, Violation

__all__ = ["check_invariants", "failed_attempts", "repeated_events", "uncommitted_results"]

I1 = "1 at most once"
I2 = "2 not run"
I3_MESSAGE = "3 user message"
I3_RESOLUTION = "3 approval/answer"
I4_RESULT = "4 one result"
I4_FINAL = "4 final record changed"
I5 = "5 one commit per step"
I6 = "6 comes back"
TURN_END = "turn end event"
STUCK = "stuck"

_END_EVENTS = frozenset(
    {
        AgentEventType.TURN_COMPLETED,
        AgentEventType.TURN_FAILED,
        AgentEventType.TURN_CANCELLED,
        AgentEventType.TURN_STEERED,
    }
)
CALLER = "caller error"


def check_invariants(record: CampaignRecord) -> list[Violation]:
    """Every violation in ``record``; an empty list when every promise held."""
    violations = [
        Violation(invariant=CALLER, session_id=None, detail=e) for e in record.caller_errors
    ]
    runs = Counter((i.session_id, i.turn_id, i.tool_call_id) for i in record.invocations)
    for session in record.sessions.values():
        violations += _check_session(record, session, runs)
    return violations


def _check_session(
    record: CampaignRecord, session: SessionRecord, runs: Counter[tuple[str, str, str]]
) -> list[Violation]:
    found: list[Violation] = []
    sid = session.session_id

    def add(invariant: str, detail: str) -> None:
        found.append(Violation(invariant=invariant, session_id=sid, detail=detail))

    if session.stuck is not None:
        add(STUCK, session.stuck)
    elif session.turns_completed < session.turns_expected:
        add(STUCK, f"{session.turns_completed} of {session.turns_expected} turns completed")
    if not session.answered_after:
        add(I6, "did not answer a client call after the campaign")
    for invariant, detail in _check_calls(record, session, runs):
        add(invariant, detail)
    for key, first in session.first_final.items():
        later = session.tool_calls.get(key, first)
        if _final_form(first) != _final_form(later):
            add(I4_FINAL, f"{key[0]}/{key[1]}: {_final_form(first)} became {_final_form(later)}")
    for invariant, detail in _check_messages(session):
        add(invariant, detail)
    for invariant, detail in _check_events(session):
        add(invariant, detail)
    completed = Counter(
        h.step_execution_id for h in session.history if h.event_type == EXECUTE_COMPLETED_EVENT
    )
    for exec_id, count in sorted(completed.items()):
        if count > 1:
            add(I5, f"{exec_id} committed {count} completions")
    return found


def _final_form(call: AgentToolCall) -> tuple[str, str | None, str | None]:
    return (str(call.status), call.output, call.error)


def _check_calls(
    record: CampaignRecord, session: SessionRecord, runs: Counter[tuple[str, str, str]]
) -> Iterator[tuple[str, str]]:
    """Invariants 1, 2 and 4 for every deferred (or observed) tool call."""
    effects: dict[tuple[str, str], str] = {
        key: str(call.effect) for key, call in session.tool_calls.items()
    }
    finished: dict[tuple[str, str], list[tuple[str, str, int]]] = {}
    failed = failed_attempts(session)
    for event in session.events:
        key = (event.turn_id or "", str(event.payload.get("tool_call_id")))
        if event.type is AgentEventType.TOOL_CALL_DEFERRED:
            effects[key] = str(event.payload.get("effect"))
        elif event.type is AgentEventType.TOOL_CALL_FINISHED:
            if (event.step_execution_id, event.attempt) in failed:
                continue  # an attempt that never committed (see uncommitted_results)
            finished.setdefault(key, []).append(
                (str(event.payload.get("status")), event.step_execution_id, event.attempt)
            )
    sid = session.session_id
    ran_keys = {(t, c) for (s, t, c) in runs if s == sid}
    for key in sorted(effects.keys() | ran_keys):
        name = f"{key[0]}/{key[1]}"
        ran = runs[(sid, *key)]
        if key not in effects:
            yield I4_RESULT, f"{name} ran {ran} time(s) but was never deferred"
            continue
        results = finished.get(key, [])
        # Streams are best effort (the spec's words): an attempt whose commit
        # failed may have written its events already. Those of attempts the
        # history shows failed are left out above; one Step execution may still
        # repeat its result event. Two Step executions, or two statuses, may not.
        if not results or len({(status, execution) for status, execution, _ in results}) > 1:
            shown = [f"{status}@{execution}#{attempt}" for status, execution, attempt in results]
            yield I4_RESULT, f"{name} published {len(results)} results {shown}"
        single = effects[key] in record.single_attempt_effects
        if single and ran > 1:
            yield I1, f"{name}: a single-attempt tool ran {ran} times"
        seen = session.first_final.get(key) or session.tool_calls.get(key)
        not_run = seen is not None and (seen.error or "").startswith(TOOL_CALL_NOT_RUN_ERROR_PREFIX)
        if single and not_run and ran > 0:
            yield I2, f"{name}: recorded as never run, but the tool ran {ran} time(s)"


def _check_messages(session: SessionRecord) -> Iterator[tuple[str, str]]:
    stored = Counter(m.text or "" for m in session.messages if m.role is MessageRole.USER)
    sent = Counter(text for text, _ in session.user_messages)
    for text, accepted in session.user_messages:
        count = stored[text]
        if sent[text] > 1:
            continue  # the same text sent twice cannot be told apart; scripts use distinct texts
        if accepted is True and count == 0:
            yield I3_MESSAGE, f"accepted user message {text!r} was lost"
        if count > 1:
            yield I3_MESSAGE, f"user message {text!r} is stored {count} times"
        if accepted is False and count:
            yield I3_MESSAGE, f"refused user message {text!r} was stored"
    for text in stored:
        if text not in sent:
            yield I3_MESSAGE, f"user message {text!r} is stored but was never sent"
    tool_results = Counter(
        (m.turn_id, m.tool_call_id) for m in session.messages if m.role is MessageRole.TOOL
    )
    for (turn_id, call_id), count in sorted(tool_results.items(), key=str):
        if count > 1:
            yield I4_RESULT, f"{turn_id}/{call_id} has {count} tool result messages"


def _check_events(session: SessionRecord) -> Iterator[tuple[str, str]]:
    resolved = Counter(
        (e.turn_id, str(e.payload.get("interrupt_id")))
        for e in session.events
        if e.type is AgentEventType.INTERRUPT_RESOLVED
    )
    seen: set[tuple[str, str]] = set()
    for resolution in session.resolutions:
        key = (resolution.turn_id, resolution.interrupt_id)
        if resolution.accepted is not True or key in seen:
            continue
        seen.add(key)
        name = f"{key[0]}/{key[1]}"
        if resolved[key] == 0:
            yield I3_RESOLUTION, f"accepted {resolution.kind} {name} was never applied"
        approved = resolution.kind is InterruptKind.APPROVAL and resolution.approved
        for call in session.tool_calls.values():
            same = (call.turn_id, call.interrupt_id) == key
            if (
                same
                and approved
                and str(call.status) == "rejected"
                and not call.cancellation_reason
            ):
                yield I3_RESOLUTION, f"approved {name} ended rejected"
    for (turn_id, iid), count in sorted(resolved.items()):
        if count > 1:
            yield I3_RESOLUTION, f"interrupt {turn_id}/{iid} was resolved {count} times"
    yield from _check_turn_ends(session)


def _check_turn_ends(session: SessionRecord) -> Iterator[tuple[str, str]]:
    """Every turn the session's state ended has exactly one end event
    (completed, failed, cancelled or steered) from an attempt that committed: a
    client that waits for it would otherwise wait for ever, or see the turn end
    twice. End events of attempts the history shows failed are left out (Streams
    are best effort for attempts that never commit)."""
    failed = failed_attempts(session)
    ends = Counter(
        e.turn_id
        for e in session.events
        if e.type in _END_EVENTS and (e.step_execution_id, e.attempt) not in failed
    )
    for number in range(1, session.turn_count + 1):
        turn_id = f"turn-{number}"  # the session numbers its turns so
        if turn_id == session.active_turn_id:
            continue
        count = ends[turn_id]
        if count == 0:
            yield TURN_END, f"{turn_id} ended, but the stream has no end event for it"
        elif count > 1:
            yield TURN_END, f"{turn_id} has {count} end events"


def repeated_events(record: CampaignRecord) -> list[str]:
    """Events written more than once by one Step execution (same type, payload and
    attempt): allowed, since Streams are best effort, but worth counting."""
    found: list[str] = []
    for session in record.sessions.values():
        seen = Counter(
            (e.type, e.turn_id, e.step_execution_id, e.attempt, repr(sorted(e.payload.items())))
            for e in session.events
            if e.type is not AgentEventType.TEXT_DELTA
        )
        found += [
            f"{session.session_id}: {kind} of {execution}#{attempt} ({turn}) x{count}"
            for (kind, turn, execution, attempt, _), count in seen.items()
            if count > 1
        ]
    return found


def failed_attempts(session: SessionRecord) -> set[tuple[str, int]]:
    """``(step_execution_id, attempt)`` of every ``execute`` attempt the Step
    history shows failed. A failed ``wait_for`` is left out: it counts its own
    attempts, and its attempt 1 is not ``execute``'s (whose events carry the
    ``execute`` attempt)."""
    found: set[tuple[str, int]] = set()
    for entry in session.history:
        if entry.event_type == "attempt_failed" and entry.detail.get("method") != "wait_for":
            attempt = entry.final_attempt or entry.detail.get("attempt")
            if isinstance(attempt, int):
                found.add((entry.step_execution_id, attempt))
    return found


def uncommitted_results(record: CampaignRecord) -> list[str]:
    """``tool_call_finished`` events written by attempts that then failed: the
    stream announced a result the store never committed (allowed, since Streams
    are best effort, but a UI that trusts events would show it)."""
    found: list[str] = []
    for session in record.sessions.values():
        failed = failed_attempts(session)
        found += [
            f"{session.session_id}: {e.turn_id}/{e.payload.get('tool_call_id')} "
            f"{e.payload.get('status')} from failed attempt {e.step_execution_id}#{e.attempt}"
            for e in session.events
            if e.type is AgentEventType.TOOL_CALL_FINISHED
            and (e.step_execution_id, e.attempt) in failed
        ]
    return found
