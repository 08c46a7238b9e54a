"""Turn control: what steering and ``cancel_turn`` leave for the Steps to see.

A turn is *cancelled* once ``cancel_turn`` recorded ``TurnCancellationRequest``
for it, and *steered* while ``SteeredUserMessages`` holds a message (the
``ApplyTurnControl`` Step that ends the turn consumes them all, so one is never
left for the next turn). Steps read both from what every Step sees: the static
Attribute and the Channel's size; no Step has to load anything more.
"""

from __future__ import annotations

from dex import Context

from dex_agents_ray.session._schema import (
    PENDING_INTERRUPTS,
    STEERED_USER_MESSAGES,
    TOOL_CALL_CANCELLATIONS,
    TURN_CANCELLATION_REQUEST,
)
from dex_agents_ray.session._values import (
    AgentToolCall,
    AgentToolCallStatus,
    CancellationReason,
    ToolCallCancellation,
)

__all__ = ["cancelled", "control_reason", "steered", "wake_waiting_calls"]


def cancelled(context: Context, turn_id: str | None) -> bool:
    """Whether ``cancel_turn`` recorded a cancellation of ``turn_id``."""
    request = TURN_CANCELLATION_REQUEST.get(context)
    return turn_id is not None and request is not None and request.turn_id == turn_id


def steered(context: Context) -> bool:
    """Whether steered messages wait to be applied."""
    return STEERED_USER_MESSAGES.size(context) > 0


def control_reason(context: Context, turn_id: str | None) -> CancellationReason | None:
    """Why an unstarted call of ``turn_id`` must not run, or ``None``."""
    if cancelled(context, turn_id):
        return CancellationReason.TURN_CANCELLED
    if steered(context):
        return CancellationReason.STEERED
    return None


def _waits_for_a_person_or_time(record: AgentToolCall) -> bool:
    """An approval, a question no task asked, or a durable wait: what a steer ends."""
    status = record.status
    if status is AgentToolCallStatus.AWAITING_ANSWER:
        return record.task_id is None
    return status in (AgentToolCallStatus.AWAITING_APPROVAL, AgentToolCallStatus.WAITING_FOR_TIMER)


def wake_waiting_calls(
    context: Context, records: list[AgentToolCall], reason: CancellationReason
) -> int:
    """Withdraw the pending interrupts of the records' approvals and questions no
    task asked, and wake each such wait, and each durable wait, through
    ``ToolCallCancellations`` (their Steps record them ``rejected``). Needs
    ``PendingInterrupts`` locked; returns how many were woken."""
    woken = [r for r in records if not r.is_final and _waits_for_a_person_or_time(r)]
    if not woken:
        return 0
    withdrawn = {r.interrupt_id for r in woken if r.interrupt_id is not None}
    pending = PENDING_INTERRUPTS.get(context) or []
    if any(i.interrupt_id in withdrawn for i in pending):
        PENDING_INTERRUPTS.set(context, [i for i in pending if i.interrupt_id not in withdrawn])
    for record in woken:
        TOOL_CALL_CANCELLATIONS.publish(
            context,
            record.tool_call_id,
            ToolCallCancellation(tool_call_id=record.tool_call_id, reason=reason),
        )
    return len(woken)
