"""The runner contract: what an agent framework adapter implements.

An adapter implements :class:`AgentFrameworkRunner`; the session calls it from
Steps, so each call may run again after a crash or a retry. Keep the runner
stateless between calls and derive everything from the arguments. The
optional protocols add features: :class:`UnfinishedTurnMessageBuilder`,
:class:`ImageUserMessageBuilder`, :class:`ToolTaskPoller`,
:class:`ToolTaskCanceller` and :class:`ToolCallStepOptionsProvider`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, TypeVar, runtime_checkable

from dex import RetryPolicy

from dex_agents_ray.engine import RayTaskOptions
from dex_agents_ray.media import AgentImageReference
from dex_agents_ray.session._api import AgentEvent, AgentEventType
from dex_agents_ray.session._metadata import ModelCallMetadata
from dex_agents_ray.session._policy import (
    BuiltInTool,
    ToolEffect,
    ToolOutcomeUnknownError,
    ToolPolicy,
)
from dex_agents_ray.session._values import (
    AgentMessage,
    AgentPlan,
    AgentToolCall,
    AgentToolCallStatus,
    AgentUsage,
    ContextSummary,
    FrameworkMessage,
    InteractionMode,
    PlanStatus,
    QuestionAnswer,
    json_ready,
)

if TYPE_CHECKING:
    from dex import AsyncContext

__all__ = [
    "PLANNING_TURN_CALL_REJECTED",
    "PlanModeRunner",
    "build_plan_note",
    "plan_execution_message",
    "AgentEventWriter",
    "AgentFrameworkRunner",
    "AgentTurnContext",
    "AgentTurnOutcome",
    "DeferredToolCall",
    "DeferredToolExecution",
    "DeferredToolOutcome",
    "ImageUserMessageBuilder",
    "ToolCallStepOptions",
    "ToolCallStepOptionsProvider",
    "ToolCallsRequested",
    "ToolExecutionResult",
    "ToolInputRequested",
    "ToolTaskCancellation",
    "ToolTaskCanceller",
    "ToolTaskPending",
    "ToolTaskPoll",
    "ToolTaskPollOutcome",
    "ToolTaskPoller",
    "ToolTaskStarted",
    "TurnCompleted",
    "TurnContinued",
    "UnfinishedTurnMessageBuilder",
    "OUTCOME_UNKNOWN_TOOL_RESULT",
    "build_turn_failure_note",
    "describe_tool_call_outcome",
]

OUTCOME_UNKNOWN_TEXT = (
    "The tool call's outcome is unknown: it may or may not have taken effect. "
    "Check before calling it again."
)
"""What the model sees for an ``outcome_unknown`` call, before the error detail."""
OUTCOME_UNKNOWN_TOOL_RESULT = OUTCOME_UNKNOWN_TEXT
"""The spec's name for the text a model reads for a call whose outcome is unknown
(an MCP result with ``outcome: "unknown"``, a connector's uncertain call)."""
REJECTED_TEXT = "The user rejected this tool call."
"""What the model sees for a rejected approval without a message."""
DECLINED_TEXT = "The user declined to answer."
"""What the model sees for a declined ``ask_user`` question."""
_CANCELLED_TEXTS = {
    "steered": '{"status":"cancelled","reason":"superseded_by_steered_user_message"}',
    "turn_cancelled": '{"status":"cancelled","reason":"turn_cancelled_by_user"}',
}


# -- events -----------------------------------------------------------------------------


class AgentEventWriter:
    """Writes ``AgentEvents`` bound to one turn, Step execution and attempt.

    Safe to call from any thread: a call from another thread is handed to the
    Step's event loop. Writes after the runner call returns are dropped, and
    the stream is best effort, so never rely on an event for correctness.
    """

    def __init__(
        self,
        sink: Callable[[AgentEvent], None],
        *,
        turn_id: str | None,
        step_execution_id: str,
        attempt: int,
    ) -> None:
        self._sink = sink
        self.turn_id = turn_id
        self.step_execution_id = step_execution_id
        self.attempt = attempt
        self._lock = threading.Lock()
        self._closed = False
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        self._thread = threading.get_ident()

    def write_event(self, type: AgentEventType | str, payload: Mapping[str, Any]) -> None:
        """Write one event of ``type`` with ``payload`` (JSON data)."""
        event = AgentEvent(
            type=AgentEventType(type),
            # ``json_ready`` copies a dict: a Mapping of another kind is copied first.
            payload=json_ready(payload if payload.__class__ is dict else dict(payload)),
            turn_id=self.turn_id,
            step_execution_id=self.step_execution_id,
            attempt=self.attempt,
        )
        with self._lock:
            if self._closed:
                return
        if self._loop is not None and threading.get_ident() != self._thread:
            self._loop.call_soon_threadsafe(self._deliver, event)
        else:
            self._deliver(event)

    def _deliver(self, event: AgentEvent) -> None:
        with self._lock:
            if self._closed:
                return
        self._sink(event)

    def write_text_delta(self, text: str) -> None:
        """Write more answer text (``text_delta``)."""
        if text:
            self.write_event(AgentEventType.TEXT_DELTA, {"text": text})

    def write_reasoning_delta(self, text: str) -> None:
        """Write more reasoning text (``reasoning_delta``)."""
        if text:
            self.write_event(AgentEventType.REASONING_DELTA, {"text": text})

    def write_tool_call_started(self, tool_call_id: str, tool_name: str) -> None:
        """Write ``tool_call_started`` (for a tool the framework runs itself)."""
        self.write_event(
            AgentEventType.TOOL_CALL_STARTED, {"tool_call_id": tool_call_id, "tool_name": tool_name}
        )

    def write_tool_call_finished(
        self, tool_call_id: str, tool_name: str, status: AgentToolCallStatus | str
    ) -> None:
        """Write ``tool_call_finished`` (for a tool the framework runs itself)."""
        self.write_event(
            AgentEventType.TOOL_CALL_FINISHED,
            {"tool_call_id": tool_call_id, "tool_name": tool_name, "status": str(status)},
        )

    def close(self) -> None:
        """Drop every later write (the session calls it when the runner call returns)."""
        with self._lock:
            self._closed = True


# -- RunModel ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class AgentTurnContext:
    """What ``run_model_step`` sees: committed state of the session and turn."""

    flow_id: str
    """The session ID."""
    turn_id: str
    """``"turn-<n>"``."""
    attempt: int
    """The one-based ``RunModel`` attempt."""
    messages: Sequence[AgentMessage]
    """Every stored message in sequence order; the last user message is this turn's."""
    framework_run_state: str | None
    """``None`` for the turn's first model call; otherwise the value of this turn's
    last ``ToolCallsRequested`` or ``TurnContinued``."""
    tool_calls: Mapping[str, AgentToolCall]
    """This turn's tool call records by ID, in deferral order; all final here."""
    events: AgentEventWriter
    """Writes events bound to this turn, Step execution and attempt."""
    heartbeat: Callable[[], Awaitable[None]]
    """Records liveness; the session already heartbeats every 20 seconds."""
    enabled_built_in_tools: frozenset[BuiltInTool] = frozenset()
    """The built-in tools to offer (filter ``BUILT_IN_TOOL_DEFINITIONS`` by it)."""
    interaction_mode: InteractionMode = InteractionMode.CHAT
    """The turn's mode: ``chat``, ``planning`` (offer only ``write_todos``) or ``executing``."""
    session_settings: Mapping[str, Any] = field(default_factory=dict)
    """The turn's session settings; empty for none."""
    context_summary: ContextSummary | None = None
    """The summary of older messages; ``None`` without compaction."""
    plan: AgentPlan | None = None
    """The session's plan; ``None`` until ``write_todos`` first succeeds."""
    tool_policies: Mapping[str, ToolPolicy] = field(default_factory=dict)
    """The session's explicit policies by tool name."""
    default_tool_effect: ToolEffect = ToolEffect.UNCLASSIFIED
    """The effect of a tool without a policy or framework metadata."""
    step_execution_id: str = ""
    """The ``RunModel`` Step execution."""

    @property
    def is_resuming(self) -> bool:
        """Whether this call continues the turn after tool calls or a continuation."""
        return self.framework_run_state is not None

    def recorded_tool_call(self, tool_call_id: str) -> AgentToolCall | None:
        """The record of ``tool_call_id`` in this turn, or ``None``."""
        return self.tool_calls.get(tool_call_id)

    def resolve_tool_policy(
        self, name: str, framework_effect: ToolEffect | None = None
    ) -> ToolPolicy:
        """Explicit policy, else framework metadata, else ``default_tool_effect``."""
        policy = self.tool_policies.get(name)
        if policy is not None:
            return policy
        if framework_effect is not None:
            return ToolPolicy(ToolEffect(framework_effect))
        return ToolPolicy(self.default_tool_effect)


@dataclass(frozen=True, kw_only=True)
class DeferredToolCall:
    """One tool call the model asked for, which the session runs in its own Step."""

    tool_call_id: str
    """The model's ID: non-empty, no ``/``, unique within the turn."""
    tool_name: str
    """The tool."""
    arguments: str
    """Arguments JSON text as the model wrote it."""
    policy: ToolPolicy
    """From ``turn.resolve_tool_policy(name, framework_effect)``."""
    tool_source_reference: str | None = None
    """Opaque text stored on the record for the tool's source; ``None`` for none."""
    runner_tool_state: str | None = None
    """Opaque runner data stored on the record; ``None`` for none."""
    ordered: bool = False
    """An ordered write: the response's ordered calls run one at a time in the
    model's order (reads run in parallel), and once one does not succeed the
    later ones are skipped. Connector writes and declared MCP writes set it."""


@dataclass(frozen=True, kw_only=True)
class ToolCallsRequested:
    """``run_model_step`` outcome: the model asked for tools."""

    framework_run_state: str
    """Non-empty; continues the turn after the tools."""
    tool_calls: Sequence[DeferredToolCall]
    """The calls, in model order."""
    usage: AgentUsage = field(default_factory=AgentUsage)
    """This model call's usage only."""
    new_messages: Sequence[FrameworkMessage] = ()
    """Messages to store now (needs ``build_unfinished_turn_messages``); empty for none."""
    model_call_metadata: ModelCallMetadata | None = None
    """Names the ``chat`` span; never stored. ``None`` when unknown."""


@dataclass(frozen=True, kw_only=True)
class TurnCompleted:
    """``run_model_step`` outcome: the turn's final answer (or its end as failed)."""

    new_messages: Sequence[FrameworkMessage]
    """The turn's messages the session has not stored yet, in order."""
    usage: AgentUsage = field(default_factory=AgentUsage)
    """This model call's usage only."""
    turn_error: str | None = None
    """End the turn as failed without a retry; stored as ``last_turn_error``.
    ``None`` completes it normally."""
    model_call_metadata: ModelCallMetadata | None = None
    """Names the ``chat`` span; never stored. ``None`` when unknown."""


@dataclass(frozen=True, kw_only=True)
class TurnContinued:
    """``run_model_step`` outcome: store messages and call the model again in this turn."""

    framework_run_state: str
    """Non-empty; continues the turn."""
    new_messages: Sequence[FrameworkMessage]
    """Stored now; usually ends with a user message."""
    usage: AgentUsage = field(default_factory=AgentUsage)
    """This model call's usage only."""
    model_call_metadata: ModelCallMetadata | None = None
    """Names the ``chat`` span; never stored. ``None`` when unknown."""


AgentTurnOutcome: TypeAlias = TurnCompleted | ToolCallsRequested | TurnContinued
"""What ``run_model_step`` returns."""


# -- tool Steps -------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ToolExecutionResult:
    """A tool's result."""

    output: str
    """The model-visible output text."""
    images: Sequence[AgentImageReference] = ()
    """Image references the tool uploaded; empty for none."""
    truncated_output_bytes: int | None = None
    """The full size of an output the tool cut (stored as
    ``AgentToolCall.truncated_output_bytes``); ``None`` when nothing was cut."""


@dataclass(frozen=True, kw_only=True)
class ToolInputRequested:
    """The tool needs an answer before it takes any effect (or, from a task, to go on)."""

    question: str
    """The question for the user."""
    choices: Sequence[str] = ()
    """Allowed answers; empty allows any answer."""
    allows_free_text: bool = True
    """Whether an answer outside ``choices`` is accepted."""
    continuation: str | None = None
    """Stored as ``tool_call.input_continuation`` for the next run; ``None`` for none."""


@dataclass(frozen=True, kw_only=True)
class ToolTaskStarted:
    """The tool started remote work that ``PollToolTask`` polls."""

    task_id: str
    """The remote task's handle."""
    poll_interval_seconds: float
    """Seconds to the first poll, rounded up to whole seconds from 1 to a day."""


@dataclass(frozen=True, kw_only=True)
class ToolTaskPending:
    """``poll_tool_task`` outcome: the task still runs."""

    poll_interval_seconds: float
    """Seconds to the next poll, rounded up to whole seconds from 1 to a day."""
    continuation: str | None = None
    """Stored as ``input_continuation``; ``None`` clears it."""


DeferredToolOutcome: TypeAlias = ToolExecutionResult | ToolInputRequested | ToolTaskStarted
"""What ``execute_deferred_tool_call`` may return."""
ToolTaskPollOutcome: TypeAlias = ToolExecutionResult | ToolTaskPending | ToolInputRequested
"""What ``poll_tool_task`` may return."""


@dataclass(frozen=True, kw_only=True)
class DeferredToolExecution:
    """What ``execute_deferred_tool_call`` sees: one approved call, one attempt."""

    flow_id: str
    """The session ID."""
    tool_call: AgentToolCall
    """The approved record."""
    idempotency_key: str
    """``"<flow_id>/<turn_id>/<tool_call_id>"``, the same on every attempt."""
    attempt: int
    """The tool Step's one-based attempt."""
    events: AgentEventWriter
    """Writes events bound to this call's Step execution and attempt."""
    heartbeat: Callable[[], Awaitable[None]]
    """Records liveness; the session already heartbeats every 20 seconds."""
    heartbeat_checkpoint: str | None
    """What an earlier attempt saved with ``save_heartbeat_checkpoint``; ``None`` for none."""
    save_heartbeat_checkpoint: Callable[[str], Awaitable[None]]
    """Records a heartbeat carrying the text; later heartbeats carry it too."""
    input_answers: Sequence[QuestionAnswer] = ()
    """How the tool's earlier questions ended, in order; empty for none."""
    context: AsyncContext | None = None
    """The tool Step's live context for the duration of the call."""
    supports_tool_tasks: bool = False
    """Whether the runner polls tool tasks (``ToolTaskStarted`` is allowed)."""

    @property
    def turn_id(self) -> str:
        """The call's turn."""
        return self.tool_call.turn_id


@dataclass(frozen=True, kw_only=True)
class ToolTaskPoll:
    """What ``poll_tool_task`` sees: one poll of a started task."""

    flow_id: str
    """The session ID."""
    tool_call: AgentToolCall
    """The ``waiting_for_task`` record, with ``task_id`` and ``input_continuation``."""
    idempotency_key: str
    """The call's idempotency key."""
    attempt: int
    """The poll Step's one-based attempt."""
    events: AgentEventWriter
    """Writes events bound to this poll."""
    heartbeat: Callable[[], Awaitable[None]]
    """Records liveness."""
    pending_answer: QuestionAnswer | None = None
    """How the task's last question ended, on the poll right after it; else ``None``."""
    context: AsyncContext | None = None
    """The poll Step's live context for the duration of the call."""


@dataclass(frozen=True, kw_only=True)
class ToolTaskCancellation:
    """What ``cancel_tool_task`` sees: a task to stop, best effort."""

    flow_id: str
    """The session ID."""
    tool_call: AgentToolCall
    """The record, with ``task_id``."""
    idempotency_key: str
    """The call's idempotency key."""
    attempt: int
    """The Step's one-based attempt."""


@dataclass(frozen=True, kw_only=True)
class ToolCallStepOptions:
    """A call's own tool Step options, from :class:`ToolCallStepOptionsProvider`."""

    timeout: timedelta | None = None
    """Each attempt's timeout; ``None`` keeps the session's default (15 minutes)."""
    retry_policy: RetryPolicy | None = None
    """``CallTool``'s retry policy; ``None`` keeps 3 attempts. Ignored for single-attempt calls."""
    heartbeat_timeout: timedelta | None = None
    """Fail an attempt without a heartbeat this long; ``None`` keeps the default."""
    ray: RayTaskOptions | None = None
    """Ray options of the Step (its executor shape, or its task); ``None`` keeps the session's."""
    run_inline: bool | None = None
    """Run the Step in the session's host, not on Ray; ``None`` keeps the session's."""


# -- protocols --------------------------------------------------------------------------

_IMPLEMENTS: dict[tuple[type[Any], object], bool] = {}


def implements(runner: object, protocol: object) -> bool:
    """``isinstance(runner, protocol)`` for a runtime-checkable Protocol, answered
    once per runner class: Python 3.11 looks up every member of the Protocol on each
    check, and the session's hot path asks several times a turn."""
    key = (type(runner), protocol)
    known = _IMPLEMENTS.get(key)
    if known is None:
        assert isinstance(protocol, type)
        known = _IMPLEMENTS[key] = isinstance(runner, protocol)
    return known


ToolOutcomeT = TypeVar("ToolOutcomeT", covariant=True)


@runtime_checkable
class AgentFrameworkRunner(Protocol[ToolOutcomeT]):
    """What an adapter implements. Calls may repeat after a crash: keep it stateless.

    Generic in what ``execute_deferred_tool_call`` returns: a runner whose tools
    only return results is an ``AgentFrameworkRunner[ToolExecutionResult]``; one
    whose tools ask questions or start tasks is an
    ``AgentFrameworkRunner[DeferredToolOutcome]``.

    Example::

        class EchoRunner:
            def build_user_message(self, text: str) -> FrameworkMessage:
                return FrameworkMessage(role=MessageRole.USER, framework_item=json.dumps(text),
                                        text=text)

            async def run_model_step(self, turn: AgentTurnContext) -> AgentTurnOutcome:
                answer = FrameworkMessage(role=MessageRole.ASSISTANT, framework_item='"ok"',
                                          text="ok")
                return TurnCompleted(new_messages=[answer])

            async def execute_deferred_tool_call(
                self, call: DeferredToolExecution
            ) -> ToolExecutionResult:
                raise ToolExecutionError("no tools")
    """

    def build_user_message(self, text: str) -> FrameworkMessage:
        """A ``user`` message for ``text`` (also used for the turn-failure note)."""
        ...

    async def run_model_step(self, turn: AgentTurnContext) -> AgentTurnOutcome:
        """Make at most one model call and report what it asked for."""
        ...

    async def execute_deferred_tool_call(self, call: DeferredToolExecution) -> ToolOutcomeT:
        """Run one tool call once; may run concurrently with itself."""
        ...


@runtime_checkable
class UnfinishedTurnMessageBuilder(Protocol):
    """Optional: the exact transcript of a turn that ends early."""

    def build_unfinished_turn_messages(self, turn: AgentTurnContext) -> Sequence[FrameworkMessage]:
        """Messages that store the turn's tool results before the session's note."""
        ...


@runtime_checkable
class PlanModeRunner(Protocol):
    """Optional: a runner for plan mode. In a ``planning`` turn it offers only
    ``write_todos`` (and shows the plan with ``build_plan_note``)."""

    @property
    def supports_plan_mode(self) -> bool:
        """``True`` when the runner honours planning turns."""
        ...


@runtime_checkable
class ImageUserMessageBuilder(Protocol):
    """Optional: user messages with images. Without it, images are refused."""

    def build_user_message_with_images(
        self, text: str, images: Sequence[AgentImageReference]
    ) -> FrameworkMessage:
        """A ``user`` message for ``text`` and ``images``."""
        ...


@runtime_checkable
class ToolTaskPoller(Protocol):
    """Optional: poll tasks that tools started (``ToolTaskStarted``)."""

    async def poll_tool_task(self, poll: ToolTaskPoll) -> ToolTaskPollOutcome:
        """Read the task once; deliver ``poll.pending_answer`` idempotently."""
        ...


@runtime_checkable
class ToolTaskCanceller(Protocol):
    """Optional: stop an abandoned task, best effort and idempotent by ``task_id``."""

    async def cancel_tool_task(self, cancellation: ToolTaskCancellation) -> None:
        """Ask the remote system to stop the task."""
        ...


@runtime_checkable
class ToolCallStepOptionsProvider(Protocol):
    """Optional: give a call's tool Step its own timeout, retry policy and placement."""

    def tool_call_step_options(self, tool_call: AgentToolCall) -> ToolCallStepOptions | None:
        """Options for ``tool_call``'s Step; ``None`` keeps the session's."""
        ...


# -- rendering --------------------------------------------------------------------------


def describe_tool_call_outcome(record: AgentToolCall) -> str:
    """The model-visible text of a final record (and of one that never finished)."""
    status = record.status
    if status is AgentToolCallStatus.SUCCEEDED:
        return record.output or ""
    if status is AgentToolCallStatus.FAILED:
        return f"The tool call failed: {record.error or 'unknown error'}"
    if status is AgentToolCallStatus.REJECTED:
        if record.cancellation_reason is not None:
            return _CANCELLED_TEXTS[record.cancellation_reason.value]
        if record.output is not None:
            return record.output
        if record.rejection_message:
            return f"{REJECTED_TEXT} Reason: {record.rejection_message}"
        return REJECTED_TEXT
    if record.output is not None:  # the tool reported the outcome unknown itself
        return record.output
    detail = f" Detail: {record.error}" if record.error else ""
    return OUTCOME_UNKNOWN_TEXT + detail


def outcome_unknown_fields(error: ToolOutcomeUnknownError) -> dict[str, str | None]:
    """The record fields of a call whose tool raised ``error``.

    ``error`` keeps the tool's text; ``output`` is ``OUTCOME_UNKNOWN_TOOL_RESULT``
    when ``error.show_detail`` is false, so :func:`describe_tool_call_outcome`
    gives the model exactly that constant, and ``None`` otherwise (the
    outcome-unknown text followed by the detail, as records stored before).
    """
    return {
        "error": error.message,
        "output": None if error.show_detail else OUTCOME_UNKNOWN_TOOL_RESULT,
    }


def build_turn_failure_note(records: Sequence[AgentToolCall]) -> str:
    """The note ``RecordTurnFailure`` stores after a failed turn that ran tools."""
    ordered = sorted(records, key=lambda record: record.deferral_order)
    lines = ["[Dex] The previous turn failed after these tool calls ran:"]
    for record in ordered:
        lines.append(
            f"- {record.tool_name} {record.arguments} -> {record.status.value}: "
            f"{describe_tool_call_outcome(record)}"
        )
    lines.append("Do not repeat these tool calls unless the user asks again.")
    return "\n".join(lines)


PLANNING_TURN_CALL_REJECTED = (
    "The tool call was not run: a planning turn can only call write_todos."
)
"""What the model sees for a call other than ``write_todos`` in a planning turn."""


def plan_execution_message(revision: int) -> str:
    """The user message of the ``executing`` turn that runs plan ``revision``."""
    return (
        f"[Dex] The user approved plan revision {revision}. Execute it and keep the task "
        "statuses current with write_todos."
    )


def build_plan_note(plan: AgentPlan | None, interaction_mode: InteractionMode) -> str | None:
    """The note that shows the model the plan: user text a runner puts before the
    turn's items in every model call while a plan exists or the turn plans;
    ``None`` when there is neither."""
    planning = interaction_mode is InteractionMode.PLANNING
    shown = plan is not None and plan.status is not PlanStatus.CLEARED and bool(plan.todos)
    if not shown and not planning:
        return None
    lines: list[str] = []
    if shown:
        assert plan is not None
        lines.append(f"[Dex] The current plan (revision {plan.revision}, {plan.status.value}):")
        lines.extend(
            f"{index}. [{todo.status.value}] {todo.content}"
            for index, todo in enumerate(plan.todos, start=1)
        )
    else:
        lines.append("[Dex] There is no plan yet.")
    if planning:
        lines.append(
            "This is a planning turn: write the plan, or revise it from the user's feedback, "
            "with write_todos. Do not carry it out yet; you may ask a clarifying question "
            "instead."
        )
    elif interaction_mode is InteractionMode.EXECUTING:
        lines.append("Carry out the plan and keep the task statuses current with write_todos.")
    else:
        lines.append("Keep the task statuses current with write_todos as you work.")
    return "\n".join(lines)
