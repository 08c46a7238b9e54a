"""The invariant checker reports each deliberately broken record, and nothing
for a clean one."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from dex_agents_ray import (
    TOOL_CALL_NOT_RUN_ERROR_PREFIX,
    AgentEvent,
    AgentEventType,
    AgentMessage,
    AgentToolCall,
    AgentToolCallStatus,
    InterruptKind,
    MessageRole,
    ToolEffect,
)
from dex_agents_ray.engine import EXECUTE_COMPLETED_EVENT, StepHistoryEntry
from dex_agents_ray.testing.chaos import (
    CampaignRecord,
    ResolutionRecord,
    SessionRecord,
    ToolInvocation,
    Violation,
    check_invariants,
    repeated_events,
    uncommitted_results,
)

SID = "s-1"


def _message(sequence: int, role: MessageRole, text: str, call: str | None = None) -> AgentMessage:
    return AgentMessage(
        sequence=sequence,
        turn_id="turn-1",
        role=role,
        framework_item="{}",
        text=text,
        tool_call_id=call,
    )


def _call(call_id: str, effect: ToolEffect, **changes: object) -> AgentToolCall:
    record = AgentToolCall(
        tool_call_id=call_id,
        turn_id="turn-1",
        tool_name=f"tool-{call_id}",
        arguments="{}",
        effect=effect,
        requires_approval=False,
        status=AgentToolCallStatus.SUCCEEDED,
        deferral_order=0,
        output="done",
    )
    return replace(record, **changes)  # type: ignore[arg-type]


def _event(kind: AgentEventType, **payload: object) -> AgentEvent:
    return AgentEvent(
        type=kind, payload=dict(payload), turn_id="turn-1", step_execution_id="X-1", attempt=1
    )


def _completed(exec_id: str) -> StepHistoryEntry:
    return StepHistoryEntry(
        at=datetime.now(UTC),
        step_execution_id=exec_id,
        event_type=EXECUTE_COMPLETED_EVENT,
        detail={},
        step_type=exec_id.split("-")[0],
    )


def clean_record() -> CampaignRecord:
    """One turn: a user message, an approved write that ran once, a read."""
    pay = _call("p1", ToolEffect.NON_IDEMPOTENT_WRITE, requires_approval=True, interrupt_id="p1")
    look = _call("l1", ToolEffect.READ)
    session = SessionRecord(
        session_id=SID,
        turns_expected=1,
        turns_completed=1,
        user_messages=[("pay", True)],
        resolutions=[
            ResolutionRecord(
                turn_id="turn-1",
                interrupt_id="p1",
                kind=InterruptKind.APPROVAL,
                approved=True,
                accepted=True,
            )
        ],
        messages=[
            _message(1, MessageRole.USER, "pay"),
            _message(2, MessageRole.TOOL, "done", "p1"),
            _message(3, MessageRole.TOOL, "done", "l1"),
            _message(4, MessageRole.ASSISTANT, "paid"),
        ],
        tool_calls={("turn-1", "p1"): pay, ("turn-1", "l1"): look},
        first_final={("turn-1", "p1"): pay},
        events=[
            _event(
                AgentEventType.TOOL_CALL_DEFERRED, tool_call_id="p1", effect="non_idempotent_write"
            ),
            _event(AgentEventType.TOOL_CALL_DEFERRED, tool_call_id="l1", effect="read"),
            _event(AgentEventType.INTERRUPT_RESOLVED, interrupt_id="p1"),
            _event(AgentEventType.TOOL_CALL_FINISHED, tool_call_id="p1", status="succeeded"),
            _event(AgentEventType.TOOL_CALL_FINISHED, tool_call_id="l1", status="succeeded"),
            replace(_event(AgentEventType.TURN_COMPLETED), step_execution_id="RunModel-1"),
        ],
        history=[_completed("RunModel-1"), _completed("CallSingleAttemptTool-1")],
        turn_count=1,
        answered_after=True,
    )
    return CampaignRecord(
        sessions={SID: session},
        invocations=[
            ToolInvocation(session_id=SID, turn_id="turn-1", tool_call_id="p1"),
            ToolInvocation(session_id=SID, turn_id="turn-1", tool_call_id="l1"),
            ToolInvocation(session_id=SID, turn_id="turn-1", tool_call_id="l1", attempt=2),
        ],
    )


def _invariants(violations: list[Violation]) -> list[str]:
    return sorted(v.invariant for v in violations)


def test_a_clean_record_has_no_violation() -> None:
    assert check_invariants(clean_record()) == []


def test_an_event_repeated_by_one_step_execution_is_counted_not_a_violation() -> None:
    record = clean_record()
    record.sessions[SID].events.append(
        _event(AgentEventType.TOOL_CALL_FINISHED, tool_call_id="l1", status="succeeded")
    )

    assert check_invariants(record) == []
    assert repeated_events(record) == [f"{SID}: tool_call_finished of X-1#1 (turn-1) x2"]


def test_a_result_event_of_a_failed_attempt_is_counted_not_a_violation() -> None:
    # The attempt wrote "succeeded", then its host died before it committed; the
    # call was recorded outcome_unknown by another Step.
    record = clean_record()
    session = record.sessions[SID]
    early = _event(AgentEventType.TOOL_CALL_FINISHED, tool_call_id="p1", status="succeeded")
    session.events.insert(0, replace(early, step_execution_id="CallSingleAttemptTool-1"))

    assert _invariants(check_invariants(record)) == ["4 one result"]  # nothing says it failed

    failed = replace(
        _completed("CallSingleAttemptTool-1"), event_type="attempt_failed", detail={"attempt": 1}
    )
    session.history.append(failed)

    assert check_invariants(record) == []
    assert uncommitted_results(record) == [
        f"{SID}: turn-1/p1 succeeded from failed attempt CallSingleAttemptTool-1#1"
    ]


def test_a_failed_wait_for_does_not_make_the_execute_attempt_uncommitted() -> None:
    # PollToolTask's wait_for failed once (its executor died while it ran), then
    # execute attempt 1 committed the result: the history's "attempt_failed" with
    # attempt 1 is wait_for's, and the event of execute attempt 1 is the one result.
    def record_with(method: str) -> CampaignRecord:
        record = clean_record()
        session = record.sessions[SID]
        session.events = [
            replace(e, step_execution_id="PollToolTask-2")
            if e.type is AgentEventType.TOOL_CALL_FINISHED and e.payload["tool_call_id"] == "p1"
            else e
            for e in session.events
        ]
        session.history.append(
            replace(
                _completed("PollToolTask-2"),
                event_type="attempt_failed",
                detail={"method": method, "attempt": 1},
            )
        )
        return record

    assert check_invariants(record_with("wait_for")) == []
    assert uncommitted_results(record_with("wait_for")) == []
    failed = check_invariants(record_with("execute"))  # that attempt never committed
    assert _invariants(failed) == ["4 one result"]
    assert uncommitted_results(record_with("execute")) == [
        f"{SID}: turn-1/p1 succeeded from failed attempt PollToolTask-2#1"
    ]


def test_a_turn_end_of_a_failed_attempt_and_a_running_turn_are_no_violation() -> None:
    # RunModel-1's attempt 1 ended the turn in the stream, then its host died
    # before the result committed; attempt 2 ended it again and committed.
    record = clean_record()
    session = record.sessions[SID]
    early = replace(_event(AgentEventType.TURN_COMPLETED), step_execution_id="RunModel-1")
    session.events.insert(0, early)

    assert _invariants(check_invariants(record)) == ["turn end event"]

    failed = replace(_completed("RunModel-1"), event_type="attempt_failed", detail={"attempt": 1})
    session.history.append(failed)
    session.events[-1] = replace(session.events[-1], attempt=2)

    assert check_invariants(record) == []
    # A second turn still running has no end event yet.
    session.turn_count, session.active_turn_id = 2, "turn-2"
    assert check_invariants(record) == []
    session.active_turn_id = None
    assert [str(v) for v in check_invariants(record)] == [
        f"turn end event [{SID}]: turn-2 ended, but the stream has no end event for it"
    ]


def test_a_record_seen_in_flight_is_no_violation() -> None:
    record = clean_record()
    calls = record.sessions[SID].tool_calls
    calls[("turn-1", "l1")] = replace(calls[("turn-1", "l1")], status=AgentToolCallStatus.APPROVED)

    assert check_invariants(record) == []


def _doubled_write(record: CampaignRecord) -> None:
    record.invocations.append(ToolInvocation(session_id=SID, turn_id="turn-1", tool_call_id="p1"))


def _lost_user_message(record: CampaignRecord) -> None:
    session = record.sessions[SID]
    session.messages = [m for m in session.messages if m.role is not MessageRole.USER]


def _doubled_user_message(record: CampaignRecord) -> None:
    record.sessions[SID].messages.append(_message(5, MessageRole.USER, "pay"))


def _unsent_user_message(record: CampaignRecord) -> None:
    record.sessions[SID].messages.append(_message(5, MessageRole.USER, "refund everything"))


def _not_run_but_ran(record: CampaignRecord) -> None:
    calls = record.sessions[SID].tool_calls
    calls[("turn-1", "p1")] = replace(
        calls[("turn-1", "p1")],
        status=AgentToolCallStatus.FAILED,
        error=f"{TOOL_CALL_NOT_RUN_ERROR_PREFIX} the executor died",
    )
    record.sessions[SID].first_final.clear()


def _two_results(record: CampaignRecord) -> None:
    second = _event(AgentEventType.TOOL_CALL_FINISHED, tool_call_id="l1", status="succeeded")
    record.sessions[SID].events.append(replace(second, step_execution_id="CallTool-9"))


def _two_statuses(record: CampaignRecord) -> None:
    record.sessions[SID].events.append(
        _event(AgentEventType.TOOL_CALL_FINISHED, tool_call_id="l1", status="failed")
    )


def _no_result(record: CampaignRecord) -> None:
    session = record.sessions[SID]
    session.events = [e for e in session.events if e.payload.get("tool_call_id") != "l1"]


def _two_result_messages(record: CampaignRecord) -> None:
    record.sessions[SID].messages.append(_message(5, MessageRole.TOOL, "again", "l1"))


def _final_record_changed(record: CampaignRecord) -> None:
    calls = record.sessions[SID].tool_calls
    calls[("turn-1", "p1")] = replace(calls[("turn-1", "p1")], output="charged twice")


def _never_deferred(record: CampaignRecord) -> None:
    record.invocations.append(ToolInvocation(session_id=SID, turn_id="turn-1", tool_call_id="x9"))


def _lost_approval(record: CampaignRecord) -> None:
    session = record.sessions[SID]
    session.events = [e for e in session.events if e.type is not AgentEventType.INTERRUPT_RESOLVED]


def _doubled_approval(record: CampaignRecord) -> None:
    record.sessions[SID].events.append(_event(AgentEventType.INTERRUPT_RESOLVED, interrupt_id="p1"))


def _approved_but_rejected(record: CampaignRecord) -> None:
    calls = record.sessions[SID].tool_calls
    rejected = replace(calls[("turn-1", "p1")], status=AgentToolCallStatus.REJECTED, output=None)
    calls[("turn-1", "p1")] = rejected
    record.sessions[SID].first_final[("turn-1", "p1")] = rejected


def _lost_turn_end(record: CampaignRecord) -> None:
    session = record.sessions[SID]
    session.events = [e for e in session.events if e.type is not AgentEventType.TURN_COMPLETED]


def _doubled_turn_end(record: CampaignRecord) -> None:
    failed = replace(_event(AgentEventType.TURN_FAILED, error="x"), step_execution_id="RunModel-1")
    record.sessions[SID].events.append(failed)


def _double_commit(record: CampaignRecord) -> None:
    record.sessions[SID].history.append(_completed("CallSingleAttemptTool-1"))


def _stuck(record: CampaignRecord) -> None:
    record.sessions[SID].turns_expected = 2


def _gone(record: CampaignRecord) -> None:
    record.sessions[SID].answered_after = False


def _store_error(record: CampaignRecord) -> None:
    record.caller_errors.append("send_user_message s-1: StoreUnavailableError: down")


BROKEN = {
    "doubled write": (_doubled_write, "1 at most once"),
    "not run, but ran": (_not_run_but_ran, "2 not run"),
    "lost user message": (_lost_user_message, "3 user message"),
    "doubled user message": (_doubled_user_message, "3 user message"),
    "unsent user message": (_unsent_user_message, "3 user message"),
    "lost approval": (_lost_approval, "3 approval/answer"),
    "doubled approval": (_doubled_approval, "3 approval/answer"),
    "approved, then rejected": (_approved_but_rejected, "3 approval/answer"),
    "two results": (_two_results, "4 one result"),
    "two statuses": (_two_statuses, "4 one result"),
    "no result": (_no_result, "4 one result"),
    "two result messages": (_two_result_messages, "4 one result"),
    "ran, never deferred": (_never_deferred, "4 one result"),
    "final record changed": (_final_record_changed, "4 final record changed"),
    "double commit": (_double_commit, "5 one commit per step"),
    "lost turn end": (_lost_turn_end, "turn end event"),
    "doubled turn end": (_doubled_turn_end, "turn end event"),
    "gone after": (_gone, "6 comes back"),
    "stuck": (_stuck, "stuck"),
    "store error": (_store_error, "caller error"),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_each_broken_record_is_reported(name: str) -> None:
    breaks, invariant = BROKEN[name]
    record = clean_record()
    breaks(record)

    violations = check_invariants(record)

    assert _invariants(violations) == [invariant], [str(v) for v in violations]
    assert all(v.session_id == (None if invariant == "caller error" else SID) for v in violations)
