"""Tool calls: the record of each call of the active turn, the answers a tool's
questions got, and the internal wake-ups when a call finishes or is cancelled."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from dex_agents_ray.engine import share_decoded_values
from dex_agents_ray.media import AgentImageReference
from dex_agents_ray.session._policy import BuiltInTool, ToolEffect
from dex_agents_ray.session._values._base import utc_now
from dex_agents_ray.session._wire import wire_value

__all__ = [
    "AgentToolCall",
    "AgentToolCallStatus",
    "CancellationReason",
    "QuestionAnswer",
    "QuestionResolution",
    "ToolCallCancellation",
    "ToolCallCompleted",
]


class AgentToolCallStatus(StrEnum):
    """Where a tool call record is. The first five wait; the last four are final."""

    AWAITING_APPROVAL = "awaiting_approval"
    """Waits in ``AwaitToolApproval`` for ``resolve_interrupt``."""
    APPROVED = "approved"
    """Cleared to run (approved, or needing no approval); its tool Step runs it."""
    AWAITING_ANSWER = "awaiting_answer"
    """An ``ask_user`` call, or a tool's question, waits for ``answer_question``."""
    WAITING_FOR_TIMER = "waiting_for_timer"
    """A ``durable_wait`` call waits in ``AwaitTimer`` until ``wait_until``."""
    WAITING_FOR_TASK = "waiting_for_task"
    """The tool started a task that ``PollToolTask`` polls."""
    REJECTED = "rejected"
    """Final: the user declined it, its approval expired, or it was cancelled."""
    SUCCEEDED = "succeeded"
    """Final: the tool returned a result."""
    FAILED = "failed"
    """Final: the tool failed in a way the model should see."""
    OUTCOME_UNKNOWN = "outcome_unknown"
    """Final: a write may or may not have taken effect."""

    @property
    def is_final(self) -> bool:
        """Whether the record can no longer change."""
        return self in _FINAL_STATUSES


_FINAL_STATUSES = frozenset(
    {
        AgentToolCallStatus.REJECTED,
        AgentToolCallStatus.SUCCEEDED,
        AgentToolCallStatus.FAILED,
        AgentToolCallStatus.OUTCOME_UNKNOWN,
    }
)


class QuestionResolution(StrEnum):
    """How a question ended."""

    ANSWERED = "answered"
    """The user answered."""
    DECLINED = "declined"
    """The user declined (``resolve_interrupt(..., approved=False)``)."""
    DEADLINE_PASSED = "deadline_passed"
    """``interrupt_deadline`` passed first."""


@dataclass(frozen=True, kw_only=True)
@wire_value
class QuestionAnswer:
    """How one question of a tool ended, handed back to the tool."""

    interrupt_id: str
    """The question's interrupt ID (``<tool_call_id>-input-<n>``)."""
    resolution: QuestionResolution
    """Answered, declined, or past its deadline."""
    answer: str | None = None
    """The answer text; ``None`` unless ``resolution`` is ``ANSWERED``."""
    continuation: str | None = None
    """The ``ToolInputRequested.continuation`` of the question; ``None`` for none."""


@dataclass(frozen=True, kw_only=True)
@wire_value
class AgentToolCall:
    """The record of one tool call of the active turn (``AgentToolCalls[<id>]``).

    Records are deleted when the turn ends. Runners see only final records;
    ``poll_tool_task`` sees a ``waiting_for_task`` one.
    """

    tool_call_id: str
    """The model's ID of the call: non-empty, no ``/``, unique in the turn."""
    turn_id: str
    """The turn that requested it."""
    tool_name: str
    """The tool to call."""
    arguments: str
    """The arguments JSON text as the model wrote it."""
    effect: ToolEffect
    """The call's effect after the tool policies; picks its tool Step."""
    requires_approval: bool
    """Whether the call waited, or waits, in ``AwaitToolApproval``."""
    status: AgentToolCallStatus
    """Where the record is."""
    deferral_order: int
    """Position in the model's response, from 0; keeps model order for display
    and for the turn-failure note."""
    built_in_tool: BuiltInTool | None = None
    """The built-in tool this call runs; ``None`` for an ordinary tool."""
    output: str | None = None
    """The model-visible result text; ``None`` until the call succeeds. An
    ``outcome_unknown`` call whose tool reported the outcome unknown itself
    (``ToolOutcomeUnknownError(show_detail=False)``) holds exactly
    ``OUTCOME_UNKNOWN_TOOL_RESULT``, the text its model reads."""
    error: str | None = None
    """Why the call ``failed`` or is ``outcome_unknown``; ``None`` otherwise."""
    rejection_message: str | None = None
    """The user's reason for a rejection; ``None`` when none was given."""
    cancellation_reason: CancellationReason | None = None
    """Why steering or ``cancel_turn`` ended the call; ``None`` otherwise."""
    images: tuple[AgentImageReference, ...] = ()
    """Image references the tool returned; empty for none."""
    tool_source_reference: str | None = None
    """Opaque text from the tool's source, so the tool Step reaches the source
    without listing it; ``None`` for none."""
    runner_tool_state: str | None = None
    """Opaque runner data carried from ``RunModel`` to the tool Step; ``None`` for none."""
    ordered: bool = False
    """An ordered write (``DeferredToolCall.ordered``): the response's ordered writes
    run one at a time in the model's order."""
    write_queued: bool = False
    """An ordered write waiting for the one before it; ``RunModel`` starts it."""
    skipped: bool = False
    """Not run because an earlier ordered write of the response did not succeed."""
    truncated_output_bytes: int | None = None
    """Full size of an output that was cut; ``None`` when nothing was cut."""
    interrupt_id: str | None = None
    """The pending or last interrupt of the call; ``None`` when it never had one."""
    question: str | None = None
    """The pending question (``ask_user`` or a tool's); ``None`` when none."""
    choices: tuple[str, ...] = ()
    """Allowed answers of the question; empty allows any answer."""
    allows_free_text: bool = True
    """Whether an answer outside ``choices`` is accepted."""
    question_raised: bool = False
    """Whether a tool's question is in ``PendingInterrupts`` yet."""
    input_request_count: int = 0
    """How many questions the tool asked so far (``-input-<n>`` numbering)."""
    input_continuation: str | None = None
    """The tool's continuation of its last question, or of the last
    ``ToolTaskPending``; ``None`` for none."""
    input_answers: tuple[QuestionAnswer, ...] = ()
    """How each of the tool's questions ended, in order; empty for none."""
    task_id: str | None = None
    """The remote task the tool started; ``None`` without a task."""
    task_poll_interval_seconds: int | None = None
    """Seconds until the next ``PollToolTask``; ``None`` without a task."""
    task_answer_pending: bool = False
    """Whether the last question's resolution still goes to the task on the next poll."""
    wait_until: datetime | None = None
    """When a ``durable_wait`` call finishes; ``None`` for other calls."""
    wait_reason: str | None = None
    """The ``durable_wait`` reason; ``None`` for other calls."""
    wait_seconds: int | None = None
    """The ``durable_wait`` duration in seconds; ``None`` for other calls."""
    trace_context: str | None = None
    """W3C ``traceparent`` of the activation whose trace the call's spans join:
    ``RunModel`` copies its root's, an approval replaces it with its own;
    ``None`` without tracing."""
    created_at: datetime = field(default_factory=utc_now)
    """When ``RunModel`` recorded the call."""
    finished_at: datetime | None = None
    """When the record became final; ``None`` while it waits."""

    @property
    def is_final(self) -> bool:
        """Whether the record can no longer change."""
        return self.status.is_final


@dataclass(frozen=True, kw_only=True)
@wire_value
class ToolCallCompleted:
    """Internal: one tool call's record became final (``ToolCallResults``)."""

    tool_call_id: str
    """The call."""
    turn_id: str
    """Its turn."""
    status: AgentToolCallStatus
    """Its final status."""


class CancellationReason(StrEnum):
    """Why steering or cancellation ended a call or removed an interrupt."""

    STEERED = "steered"
    """A steered message superseded the turn."""
    TURN_CANCELLED = "turn_cancelled"
    """``cancel_turn`` stopped the turn."""


@dataclass(frozen=True, kw_only=True)
@wire_value
class ToolCallCancellation:
    """Internal: wakes one waiting call to record it cancelled."""

    tool_call_id: str
    """The call."""
    reason: CancellationReason
    """Steered or cancelled."""


# Every Step of a turn reads the tool call records back: the engine decodes each
# stored JSON text once per process.
share_decoded_values(AgentToolCall)
