"""The session's stored values: messages, tool call records, interrupts, state.

Every type here is plain data, a frozen keyword-only dataclass of strings,
numbers, enums, datetimes, tuples and mappings, because it is stored with the
SDK's JSON codec and crosses Ray boundaries. Closed wire sets are ``StrEnum``
types, so the wire carries the plain strings.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from dex_agents_ray.engine import share_decoded_values
from dex_agents_ray.engine import utc_now as engine_utc_now
from dex_agents_ray.media import AgentImageReference
from dex_agents_ray.session._policy import BuiltInTool, ToolEffect
from dex_agents_ray.session._wire import coerce_fields

__all__ = [
    "AgentInterrupt",
    "AgentInterruptResolution",
    "AgentMessage",
    "AgentMessageChunk",
    "AgentMessageChunkInfo",
    "AgentMessageIndex",
    "AgentPlan",
    "AgentState",
    "AgentStatus",
    "AgentToolCall",
    "AgentToolCallStatus",
    "AgentUsage",
    "AgentUserMessage",
    "CancellationReason",
    "ContextSummary",
    "FrameworkMessage",
    "InteractionMode",
    "InterruptKind",
    "MessageRole",
    "PlanExecutionRequest",
    "PlanStatus",
    "PlanTodo",
    "QuestionAnswer",
    "QuestionResolution",
    "TodoStatus",
    "ToolCallCancellation",
    "ToolCallCompleted",
    "TurnCancellationRequest",
    "TurnControlKind",
    "TurnControlRequest",
    "TurnReplySequence",
    "utc_now",
]

STATE_SCHEMA_VERSION = 1
"""The version of the stored session format this release writes and reads."""


def check_schema_version(owner: str, version: int) -> None:
    """Refuse a stored value written by a newer release (older ones are read as they are)."""
    if isinstance(version, int) and version > STATE_SCHEMA_VERSION:
        raise ValueError(
            f"{owner} was stored with schema version {version}; this release reads "
            f"versions up to {STATE_SCHEMA_VERSION}. Upgrade dex-agents-ray."
        )


def utc_now() -> datetime:
    """The current time, timezone-aware, in UTC."""
    return engine_utc_now()


class MessageRole(StrEnum):
    """Who a stored message is from."""

    USER = "user"
    """The user, or a session note the model reads as user text."""
    ASSISTANT = "assistant"
    """The model: an answer, reasoning, or a tool request."""
    TOOL = "tool"
    """A tool result."""


@dataclass(frozen=True, kw_only=True)
class FrameworkMessage:
    """One message a runner asks the session to store.

    ``framework_item`` is the framework's native JSON, replayed unchanged; the
    other fields are a display projection for snapshots and UIs.
    """

    role: MessageRole
    """Who the message is from."""
    framework_item: str
    """Framework-native JSON text, the replay truth; opaque to the session."""
    text: str | None = None
    """Display text; ``None`` for a message without text (a bare tool request)."""
    tool_call_id: str | None = None
    """The tool call a tool request or result belongs to; ``None`` otherwise."""
    tool_name: str | None = None
    """The tool of a tool request or result; ``None`` otherwise."""
    tool_arguments: str | None = None
    """The arguments JSON of a tool request; ``None`` otherwise."""
    tool_output: str | None = None
    """The model-visible output of a tool result; ``None`` otherwise."""
    images: tuple[AgentImageReference, ...] = ()
    """References to images the message shows; empty for none. Never bytes."""

    def __post_init__(self) -> None:
        coerce_fields(self)


@dataclass(frozen=True, kw_only=True)
class AgentMessage:
    """One stored message of the session, with its sequence (from 1)."""

    sequence: int
    """Position in the session, starting at 1; never reused."""
    turn_id: str
    """The turn that stored it (``"turn-<n>"``)."""
    role: MessageRole
    """Who the message is from."""
    framework_item: str
    """Framework-native JSON text that the runner replays."""
    text: str | None = None
    """Display text; ``None`` when the message has none."""
    tool_call_id: str | None = None
    """The tool call of a tool request or result; ``None`` otherwise."""
    tool_name: str | None = None
    """The tool of a tool request or result; ``None`` otherwise."""
    tool_arguments: str | None = None
    """The arguments JSON of a tool request; ``None`` otherwise."""
    tool_output: str | None = None
    """The output of a tool result; ``None`` otherwise."""
    images: tuple[AgentImageReference, ...] = ()
    """Image references; empty for none."""
    created_at: datetime = field(default_factory=utc_now)
    """When the session stored it (the host's clock)."""

    def __post_init__(self) -> None:
        coerce_fields(self)

    @staticmethod
    def from_framework(
        message: FrameworkMessage, *, sequence: int, turn_id: str, created_at: datetime
    ) -> AgentMessage:
        """The stored form of ``message`` at ``sequence``."""
        return AgentMessage(
            sequence=sequence,
            turn_id=turn_id,
            role=message.role,
            framework_item=message.framework_item,
            text=message.text,
            tool_call_id=message.tool_call_id,
            tool_name=message.tool_name,
            tool_arguments=message.tool_arguments,
            tool_output=message.tool_output,
            images=message.images,
            created_at=created_at,
        )


@dataclass(frozen=True, kw_only=True)
class AgentMessageChunk:
    """Consecutive older messages moved out of the window; never changed again."""

    first_sequence: int
    """Sequence of the first message."""
    last_sequence: int
    """Sequence of the last message."""
    messages: tuple[AgentMessage, ...]
    """The messages, in sequence order."""
    schema_version: int = STATE_SCHEMA_VERSION
    """The stored format's version."""

    def __post_init__(self) -> None:
        coerce_fields(self)
        check_schema_version("AgentMessageChunk", self.schema_version)


@dataclass(frozen=True, kw_only=True)
class AgentMessageChunkInfo:
    """Where one kept chunk is, as the index lists it."""

    first_sequence: int
    """Sequence of the chunk's first message (its ``AgentMessageChunks`` key)."""
    last_sequence: int
    """Sequence of the chunk's last message."""
    encoded_bytes: int
    """Size of the chunk's encoded JSON."""


@dataclass(frozen=True, kw_only=True)
class AgentMessageIndex:
    """Where the stored messages are: the kept chunks and the window."""

    chunks: tuple[AgentMessageChunkInfo, ...] = ()
    """Every kept chunk, oldest first."""
    window_first_sequence: int = 1
    """Sequence of the first message in the ``AgentMessages`` window."""
    first_sequence: int = 1
    """Sequence of the oldest message still stored."""
    deleted_before_sequence: int | None = None
    """Retention deleted every message before this sequence; ``None`` while
    nothing was deleted."""
    schema_version: int = STATE_SCHEMA_VERSION
    """The stored format's version."""

    def __post_init__(self) -> None:
        coerce_fields(self)
        check_schema_version("AgentMessageIndex", self.schema_version)


@dataclass(frozen=True, kw_only=True)
class TurnReplySequence:
    """Where the latest turn's replies start."""

    turn_id: str
    """The turn."""
    first_sequence: int
    """Sequence of the turn's first message after its user message(s)."""


@dataclass(frozen=True, kw_only=True)
class TurnSessionSettings:
    """The settings a turn started with (``TurnSessionSettings``), tagged with it:
    its model calls read only this copy, so a running turn keeps them across a
    crash. A copy an earlier turn left reads as no settings."""

    turn_id: str
    """The turn that copied them."""
    session_settings: dict[str, Any] = field(default_factory=dict)
    """The session's settings when the turn started; empty for none."""


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

    def __post_init__(self) -> None:
        coerce_fields(self)


@dataclass(frozen=True, kw_only=True)
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

    def __post_init__(self) -> None:
        coerce_fields(self)

    @property
    def is_final(self) -> bool:
        """Whether the record can no longer change."""
        return self.status.is_final


class InterruptKind(StrEnum):
    """What an interrupt asks of a person."""

    APPROVAL = "approval"
    """Approve or reject a tool call."""
    QUESTION = "question"
    """Answer a question (``ask_user`` or a tool's)."""


@dataclass(frozen=True, kw_only=True)
class AgentInterrupt:
    """Something the session waits for a person to decide."""

    interrupt_id: str
    """The ID to resolve: the tool call ID, or ``<tool_call_id>-input-<n>``."""
    kind: InterruptKind
    """Approval or question."""
    tool_call_id: str
    """The tool call it belongs to."""
    tool_name: str
    """The tool of that call."""
    turn_id: str
    """The turn that raised it."""
    arguments: str
    """The call's arguments JSON, for an approval UI."""
    effect: ToolEffect | None = None
    """The call's effect; ``None`` for built-in calls."""
    deadline: datetime | None = None
    """When it expires (the host's clock); ``None`` never."""
    question: str | None = None
    """The question text; ``None`` for an approval."""
    choices: tuple[str, ...] = ()
    """Allowed answers; empty allows any answer."""
    allows_free_text: bool = True
    """Whether an answer outside ``choices`` is accepted."""
    created_at: datetime = field(default_factory=utc_now)
    """When it was raised."""

    def __post_init__(self) -> None:
        coerce_fields(self)


@dataclass(frozen=True, kw_only=True)
class AgentInterruptResolution:
    """A person's decision, published to ``InterruptResolutions[<interrupt id>]``."""

    interrupt_id: str
    """The interrupt it resolves."""
    kind: InterruptKind
    """Approval or question."""
    approved: bool
    """Approved (or answered); ``False`` rejects an approval or declines a question."""
    rejection_message: str | None = None
    """Why it was rejected; ``None`` on approval or when no reason was given."""
    answer: str | None = None
    """The answer to a question; ``None`` otherwise."""
    resolved_at: datetime = field(default_factory=utc_now)
    """When the RPC committed."""

    def __post_init__(self) -> None:
        coerce_fields(self)


@dataclass(frozen=True, kw_only=True)
class AgentUsage:
    """Tokens and model calls, for one model call or the whole session."""

    input_tokens: int = 0
    """Input tokens, cached ones included."""
    output_tokens: int = 0
    """Output tokens, reasoning ones included."""
    cached_input_tokens: int = 0
    """The part of ``input_tokens`` read from a prompt cache."""
    reasoning_tokens: int = 0
    """The part of ``output_tokens`` spent on reasoning."""
    model_calls: int = 0
    """Model calls made; a runner reports 1 for a ``run_model_step`` that called the model."""

    def __post_init__(self) -> None:
        for name in (
            "input_tokens",
            "output_tokens",
            "cached_input_tokens",
            "reasoning_tokens",
            "model_calls",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"AgentUsage.{name} must be an int >= 0, not {value!r}")

    def __add__(self, other: AgentUsage) -> AgentUsage:
        return AgentUsage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cached_input_tokens=self.cached_input_tokens + other.cached_input_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            model_calls=self.model_calls + other.model_calls,
        )

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens


class AgentStatus(StrEnum):
    """What the session is doing."""

    WAITING_FOR_USER_MESSAGE = "waiting_for_user_message"
    """No turn is active."""
    RUNNING_MODEL = "running_model"
    """A turn is in ``RunModel``."""
    RUNNING_TOOLS = "running_tools"
    """A turn waits for its tool calls."""
    COMPACTING_CONTEXT = "compacting_context"
    """A turn summarizes older messages (context compaction)."""


class InteractionMode(StrEnum):
    """What kind of turn is active."""

    CHAT = "chat"
    """An ordinary turn."""
    PLANNING = "planning"
    """A plan-mode turn that may only call ``write_todos``."""
    EXECUTING = "executing"
    """A turn that executes an approved plan."""


@dataclass(frozen=True, kw_only=True)
class AgentState:
    """The session's state (``AgentState`` Attribute)."""

    status: AgentStatus
    """What the session is doing."""
    interaction_mode: InteractionMode = InteractionMode.CHAT
    """The active or last turn's mode."""
    turn_count: int = 0
    """Turns started so far; the active turn is ``turn-<turn_count>``."""
    active_turn_id: str | None = None
    """The running turn; ``None`` while the session waits for a user message."""
    last_turn_error: str | None = None
    """Why the last failed turn failed; ``None`` once a later turn completes."""
    last_sequence: int = 0
    """Sequence of the newest stored message; 0 before the first."""
    accepts_turn_control: bool = True
    """Whether the active turn can be steered or cancelled."""
    started_at: datetime = field(default_factory=utc_now)
    """When the session started."""
    schema_version: int = STATE_SCHEMA_VERSION
    """The stored format's version."""

    def __post_init__(self) -> None:
        coerce_fields(self)
        check_schema_version("AgentState", self.schema_version)


@dataclass(frozen=True, kw_only=True)
class AgentUserMessage:
    """A user message, queued on ``QueuedUserMessages`` by ``send_user_message``."""

    text: str
    """The message text; must not be blank."""
    images: tuple[AgentImageReference, ...] = ()
    """Image references; empty for none. Needs an ``ImageUserMessageBuilder`` runner."""
    plan_mode: bool = False
    """Start a planning turn (plan mode must be enabled)."""

    def __post_init__(self) -> None:
        coerce_fields(self)


@dataclass(frozen=True, kw_only=True)
class ToolCallCompleted:
    """Internal: one tool call's record became final (``ToolCallResults``)."""

    tool_call_id: str
    """The call."""
    turn_id: str
    """Its turn."""
    status: AgentToolCallStatus
    """Its final status."""

    def __post_init__(self) -> None:
        coerce_fields(self)


class CancellationReason(StrEnum):
    """Why steering or cancellation ended a call or removed an interrupt."""

    STEERED = "steered"
    """A steered message superseded the turn."""
    TURN_CANCELLED = "turn_cancelled"
    """``cancel_turn`` stopped the turn."""


class TurnControlKind(StrEnum):
    """What a ``TurnControlRequests`` message asks."""

    STEER = "steer"
    """Apply steered messages at the next safe boundary."""
    CANCEL = "cancel"
    """Stop the turn."""


@dataclass(frozen=True, kw_only=True)
class TurnControlRequest:
    """Internal: wakes the turn's waiting Steps for a steer."""

    kind: TurnControlKind
    """Steer or cancel."""
    turn_id: str | None = None
    """The turn it applies to; ``None`` for whichever is active."""

    def __post_init__(self) -> None:
        coerce_fields(self)


@dataclass(frozen=True, kw_only=True)
class TurnCancellationRequest:
    """The cancellation ``cancel_turn`` recorded (written only by it)."""

    turn_id: str
    """The cancelled turn."""
    requested_at: datetime = field(default_factory=utc_now)
    """When ``cancel_turn`` committed."""

    def __post_init__(self) -> None:
        coerce_fields(self)


@dataclass(frozen=True, kw_only=True)
class ToolCallCancellation:
    """Internal: wakes one waiting call to record it cancelled."""

    tool_call_id: str
    """The call."""
    reason: CancellationReason
    """Steered or cancelled."""

    def __post_init__(self) -> None:
        coerce_fields(self)


class TodoStatus(StrEnum):
    """A plan task's status."""

    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"


class PlanStatus(StrEnum):
    """The plan's status."""

    DRAFT = "draft"
    """Written in a planning turn; waits for ``execute_plan``."""
    ACTIVE = "active"
    """Being worked on."""
    COMPLETED = "completed"
    """Every task is completed."""
    CLEARED = "cleared"
    """``write_todos`` wrote no tasks."""


@dataclass(frozen=True, kw_only=True)
class PlanTodo:
    """One task of the plan."""

    content: str
    """What to do."""
    status: TodoStatus
    """Pending, in progress, or completed."""

    def __post_init__(self) -> None:
        coerce_fields(self)


@dataclass(frozen=True, kw_only=True)
class AgentPlan:
    """The session's plan (``AgentPlan`` Attribute), replaced whole by ``write_todos``."""

    revision: int
    """Starts at 1; each successful ``write_todos`` adds 1."""
    status: PlanStatus
    """Draft, active, completed, or cleared."""
    todos: tuple[PlanTodo, ...] = ()
    """The tasks, in order; empty when cleared."""
    turn_id: str = ""
    """The turn that wrote this revision."""
    updated_at: datetime = field(default_factory=utc_now)
    """When this revision was written."""

    def __post_init__(self) -> None:
        coerce_fields(self)


@dataclass(frozen=True, kw_only=True)
class PlanExecutionRequest:
    """An approval to execute one plan revision (``execute_plan``)."""

    revision: int
    """The approved revision."""


@dataclass(frozen=True, kw_only=True)
class ContextSummary:
    """The summary of older messages that context compaction wrote."""

    generation: int
    """Starts at 1; each compaction adds 1."""
    first_sequence: int
    """Sequence of the first summarized message (1)."""
    last_sequence: int
    """Sequence of the last summarized message."""
    text: str
    """The summary."""
    created_at: datetime = field(default_factory=utc_now)
    """When it was written."""

    def __post_init__(self) -> None:
        coerce_fields(self)


def json_ready(value: Any) -> Any:
    """``value`` with enums, datetimes and dataclasses as JSON data (for event payloads
    and browser snapshots). An image reference takes its wire form, ``{"type":
    "image", ...}``, so a browser reads the same JSON the spec shows and
    ``AgentImageReference.from_dict`` reads it back."""
    kind = type(value)
    if kind in _JSON_SCALARS:  # most values: before the costlier tests below
        return value
    if kind is dict:
        return {key: json_ready(item) for key, item in value.items()}
    if kind is AgentImageReference:
        return value.to_dict()
    dataclass_type = _dataclass_types.get(kind)
    if dataclass_type is None:
        dataclass_type = _dataclass_type(kind)
    if dataclass_type:
        return {f.name: json_ready(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, StrEnum):
        return value.value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {key: json_ready(item) for key, item in value.items()}
    if isinstance(value, list | tuple | frozenset):
        return [json_ready(item) for item in value]
    return value


_JSON_SCALARS = frozenset({str, int, float, bool, type(None)})


_dataclass_types: dict[type[Any], bool] = {}


def _dataclass_type(kind: type[Any]) -> bool:
    # Once per class: ``is_dataclass`` of an enum member looks the fields up through
    # ``EnumType.__getattr__``, a failed lookup that costs more than the rest here.
    found = dataclasses.is_dataclass(kind)
    if len(_dataclass_types) < 1024:
        _dataclass_types[kind] = found
    return found


# Every Step of a session reads these back (the message window in each model
# call): the engine decodes each stored JSON text once per process.
share_decoded_values(AgentMessage, AgentMessageChunk, AgentMessageIndex, AgentToolCall, AgentState)
