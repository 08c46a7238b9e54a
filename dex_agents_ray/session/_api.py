"""The session's RPC inputs and outputs, its events, its options and start input."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from dex_agents_ray.engine import RayTaskOptions
from dex_agents_ray.media import AgentImageReference
from dex_agents_ray.session._policy import BuiltInTool, ToolEffect, ToolPolicy
from dex_agents_ray.session._values import (
    AgentInterrupt,
    AgentMessage,
    AgentPlan,
    AgentState,
    AgentToolCall,
    AgentUsage,
    utc_now,
)
from dex_agents_ray.session._wire import wire_value
from dex_agents_ray.session.tracing._options import AgentTracingOptions

__all__ = [
    "CompactionPolicy",
    "DEFAULT_EVENT_STREAM_CAPACITY_BYTES",
    "DEFAULT_MAX_DURABLE_WAIT",
    "MAX_LIST_MESSAGES_LIMIT",
    "SNAPSHOT_MESSAGE_LIMIT",
    "AgentEvent",
    "AgentEventType",
    "AgentMessagesPage",
    "AgentSessionOptions",
    "AgentSessionStartInput",
    "AgentSnapshot",
    "AnswerQuestionRequest",
    "ListAgentMessagesRequest",
    "QueuedUserMessage",
    "ResolveInterruptRequest",
    "RunModelLimit",
]

DEFAULT_EVENT_STREAM_CAPACITY_BYTES = 10 * 1024 * 1024
"""The ``AgentEvents`` Stream capacity unless the options say otherwise (10 MiB)."""
DEFAULT_MAX_DURABLE_WAIT = timedelta(days=365)
"""The longest ``durable_wait`` unless the options say otherwise."""
SNAPSHOT_MESSAGE_LIMIT = 200
"""How many of the newest messages ``get_agent_snapshot`` returns."""
MAX_LIST_MESSAGES_LIMIT = 200
"""The largest page ``list_agent_messages`` returns."""


@dataclass(frozen=True, kw_only=True)
class ResolveInterruptRequest:
    """Input of ``resolve_interrupt``."""

    interrupt_id: str
    """The pending interrupt."""
    approved: bool
    """Approve the call; ``False`` rejects it, or declines a question."""
    rejection_message: str | None = None
    """Why it was rejected, shown to the model; ``None`` for none. Dropped on approval."""


@dataclass(frozen=True, kw_only=True)
class AnswerQuestionRequest:
    """Input of ``answer_question``."""

    interrupt_id: str
    """The pending question."""
    answer: str
    """The answer: not blank, and one of ``choices`` unless free text is allowed."""


@dataclass(frozen=True, kw_only=True)
class SteerUserMessageRequest:
    """Input of ``steer_user_message``: exactly one of a queued message's ID or new text."""

    message_id: str | None = None
    """A queued message (``AgentSnapshot.queued_messages``) to move to the running turn."""
    text: str | None = None
    """New text that steers the running turn (queued when no turn is active)."""
    plan_mode: bool = False
    """For ``text``: ask for a planning turn, as ``send_user_message`` does."""


@dataclass(frozen=True, kw_only=True)
class DeleteQueuedMessageRequest:
    """Input of ``delete_queued_message``."""

    message_id: str
    """The queued message (``AgentSnapshot.queued_messages``) to delete."""


@dataclass(frozen=True, kw_only=True)
class ExecutePlanRequest:
    """Input of ``execute_plan``: approve one plan revision for execution."""

    revision: int
    """``AgentPlan.revision`` of the reviewed plan."""


@dataclass(frozen=True, kw_only=True)
class CancelTurnRequest:
    """Input of ``cancel_turn``."""

    turn_id: str
    """The turn to stop: ``AgentState.active_turn_id``."""


@dataclass(frozen=True, kw_only=True)
class UpdateSessionSettingsRequest:
    """Input of ``update_session_settings``: the settings that replace the session's."""

    session_settings: dict[str, Any] | None
    """The new settings (nothing is merged; ``{}`` clears them). ``None`` is refused."""


@dataclass(frozen=True, kw_only=True)
class ListAgentMessagesRequest:
    """Input of ``list_agent_messages``: a page of messages before a sequence."""

    before_sequence: int | None = None
    """Return messages before this sequence; ``None`` starts at the newest."""
    limit: int = 50
    """Most messages on the page, clamped to 1..200."""


@dataclass(frozen=True, kw_only=True)
@wire_value
class AgentMessagesPage:
    """Output of ``list_agent_messages``."""

    messages: tuple[AgentMessage, ...]
    """The page's messages, oldest first."""
    next_before_sequence: int | None = None
    """Pass as ``before_sequence`` for the next, older page; ``None`` on the last page."""
    deleted_before_sequence: int | None = None
    """Retention deleted every message before this sequence; ``None`` while nothing was."""


@dataclass(frozen=True, kw_only=True)
@wire_value
class QueuedUserMessage:
    """A queued or steered user message, with its Channel message ID."""

    message_id: str
    """The Channel message ID (for steering and deleting)."""
    text: str
    """The text."""
    images: tuple[AgentImageReference, ...] = ()
    """Image references; empty for none."""
    plan_mode: bool = False
    """Whether it starts a planning turn."""


@dataclass(frozen=True, kw_only=True)
@wire_value
class AgentSnapshot:
    """Output of ``get_agent_snapshot``: the session as committed."""

    state: AgentState | None
    """The state; ``None`` until ``StartAgentSession`` commits."""
    messages: tuple[AgentMessage, ...] = ()
    """The newest stored messages (at most 200), oldest first."""
    pending_interrupts: tuple[AgentInterrupt, ...] = ()
    """Interrupts waiting for a person."""
    tool_calls: tuple[AgentToolCall, ...] = ()
    """The active turn's tool call records, in deferral order."""
    usage: AgentUsage = field(default_factory=AgentUsage)
    """The session's total usage."""
    queued_message_count: int = 0
    """User messages waiting for the next turn (``len(queued_messages)``)."""
    plan: AgentPlan | None = None
    """The plan; ``None`` until ``write_todos`` first succeeds."""
    queued_messages: tuple[QueuedUserMessage, ...] = ()
    """The queued messages with their IDs, oldest first. The one ``AwaitUserMessage``
    has taken to start the next turn stays first here until that turn starts and
    stores it; ``steer_user_message`` and ``delete_queued_message`` then return
    ``False`` for it."""
    steered_messages: tuple[QueuedUserMessage, ...] = ()
    """Steered messages not applied yet."""
    session_settings: dict[str, Any] = field(default_factory=dict)
    """The next turn's session settings; empty for none."""


class AgentEventType(StrEnum):
    """The kinds of ``AgentEvents`` Stream messages and their payload keys."""

    TURN_STARTED = "turn_started"
    """``{"sequence"}``: the turn's first message."""
    TURN_COMPLETED = "turn_completed"
    """``{"message_count"}``."""
    TURN_FAILED = "turn_failed"
    """``{"error"}``."""
    TURN_STEERED = "turn_steered"
    """``{"steered_message_count", "message_count"}``."""
    TURN_CANCELLED = "turn_cancelled"
    """``{"message_count"}``."""
    TEXT_DELTA = "text_delta"
    """``{"text"}``."""
    REASONING_DELTA = "reasoning_delta"
    """``{"text"}``."""
    TOOL_CALL_STARTED = "tool_call_started"
    """``{"tool_call_id", "tool_name"}``."""
    TOOL_CALL_FINISHED = "tool_call_finished"
    """``{"tool_call_id", "tool_name", "status"}``, once per call."""
    TOOL_CALL_DEFERRED = "tool_call_deferred"
    """``{"tool_call_id", "tool_name", "effect", "requires_approval"}``."""
    INTERRUPT_RAISED = "interrupt_raised"
    """``{"interrupt_id", "tool_call_id", "tool_name", "deadline", "kind", "question",
    "choices", "allows_free_text"}``."""
    INTERRUPT_RESOLVED = "interrupt_resolved"
    """``{"interrupt_id", "approved", "rejection_message", "kind", "answered",
    "cancellation_reason"}``."""
    TIMER_STARTED = "timer_started"
    """``{"tool_call_id", "wait_until", "reason"}``."""
    PLAN_UPDATED = "plan_updated"
    """``{"revision", "status", "task_count"}``."""
    PLAN_EXECUTION_STARTED = "plan_execution_started"
    """``{"revision"}``."""
    TOOL_TASK_STARTED = "tool_task_started"
    """``{"tool_call_id", "tool_name", "task_id"}``."""
    USAGE_RECORDED = "usage_recorded"
    """``{"recorded", "session"}``."""
    COMPACTION_STARTED = "compaction_started"
    """``{"through_sequence"}``: a compaction began."""
    COMPACTION_FINISHED = "compaction_finished"
    """``{"generation", "through_sequence"}``: a compaction stored its summary."""
    MCP_TOOL_PROGRESS = "mcp.tool_progress"
    """``{"tool_call_id", "tool_name", "progress", "total", "message"}``: an MCP server's
    ``notifications/progress`` during a call (``dex_agents_ray.mcp``)."""
    MCP_TASK_STATUS = "mcp.task_status"
    """``{"tool_call_id", "tool_name", "task_id", "status", "status_message"}``: an MCP
    task's status changed (``dex_agents_ray.mcp``)."""


@dataclass(frozen=True, kw_only=True)
@wire_value
class AgentEvent:
    """One ``AgentEvents`` Stream message.

    A UI groups live text by ``(turn_id, step_execution_id, attempt)`` and keeps
    only the highest ``attempt`` of one ``step_execution_id``.
    """

    type: AgentEventType
    """What happened."""
    payload: dict[str, Any]
    """The type's fields (see :class:`AgentEventType`), JSON data."""
    turn_id: str | None
    """The turn; ``None`` for an event outside any turn."""
    step_execution_id: str
    """The Step execution that wrote it, shared by all its attempts."""
    attempt: int
    """The Step attempt that wrote it, from 1."""
    created_at: datetime = field(default_factory=utc_now)
    """When it was written."""


@dataclass(frozen=True, kw_only=True)
class RunModelLimit:
    """Timeouts and retries of ``RunModel`` (and, later, ``CompactContext``)."""

    timeout: timedelta = timedelta(minutes=15)
    """Each attempt's timeout."""
    heartbeat_timeout: timedelta = timedelta(minutes=2)
    """An attempt without a heartbeat this long fails; the session heartbeats every 20 s."""
    maximum_attempts: int = 3
    """Attempts before ``RecordTurnFailure``."""
    retry_budget: timedelta = timedelta(minutes=30)
    """Retries stop this long after the first attempt."""

    def __post_init__(self) -> None:
        if self.maximum_attempts < 1:
            raise ValueError("RunModelLimit.maximum_attempts must be >= 1")
        for name in ("timeout", "heartbeat_timeout", "retry_budget"):
            if getattr(self, name) <= timedelta(0):
                raise ValueError(f"RunModelLimit.{name} must be positive")


@dataclass(frozen=True, kw_only=True)
class CompactionPolicy:
    """When to summarize (``AgentSessionOptions.compaction``)."""

    context_window_tokens: int
    """The model's context window; one value for every resolved model."""
    trigger_ratio: float = 0.85
    """Compact once the estimate reaches this share of the window."""
    retained_ratio: float = 0.3
    """The share of the window the newest messages keep after a compaction."""
    reserved_input_tokens: int = 0
    """Added to every estimate: what the runner's estimate cannot see."""

    def __post_init__(self) -> None:
        if isinstance(self.context_window_tokens, bool) or not isinstance(
            self.context_window_tokens, int
        ):
            raise TypeError("CompactionPolicy.context_window_tokens must be an int")
        if self.context_window_tokens < 1:
            raise ValueError("CompactionPolicy.context_window_tokens must be positive")
        if not 0 < self.trigger_ratio <= 1:
            raise ValueError("CompactionPolicy.trigger_ratio must be in (0, 1]")
        if not 0 < self.retained_ratio < self.trigger_ratio:
            raise ValueError("CompactionPolicy.retained_ratio must be in (0, trigger_ratio)")
        if self.reserved_input_tokens < 0:
            raise ValueError("CompactionPolicy.reserved_input_tokens must be >= 0")

    @property
    def trigger_tokens(self) -> int:
        """The estimate at which ``RunModel`` compacts."""
        return math.floor(self.context_window_tokens * self.trigger_ratio)

    @property
    def retained_token_budget(self) -> int:
        """What ``select_compaction_cutoff`` keeps after the cutoff."""
        return math.floor(self.context_window_tokens * self.retained_ratio)


@dataclass(frozen=True, kw_only=True)
class AgentSessionOptions:
    """How one session Flow type treats tools, waits and events.

    Not stored: it is part of the Flow definition, so every Worker (here, every
    host and Ray task) sees the same options.
    """

    tool_policies: Mapping[str, ToolPolicy] = field(default_factory=dict)
    """Per tool name; wins over framework metadata and ``default_tool_effect``."""
    default_tool_effect: ToolEffect = ToolEffect.UNCLASSIFIED
    """The effect of a tool without a policy or framework metadata."""
    event_stream_capacity_bytes: int = DEFAULT_EVENT_STREAM_CAPACITY_BYTES
    """The ``AgentEvents`` Stream capacity."""
    interrupt_deadline: timedelta | None = None
    """How long an approval or question waits before it expires; ``None`` forever."""
    built_in_tools: frozenset[BuiltInTool] = frozenset()
    """The built-in tools the session offers and routes."""
    max_durable_wait: timedelta = DEFAULT_MAX_DURABLE_WAIT
    """The longest ``durable_wait``, in whole seconds."""
    plan_mode_enabled: bool = False
    """Accept plan-mode messages and ``execute_plan``; needs ``write_todos`` in
    ``built_in_tools`` and a ``PlanModeRunner``."""
    run_model_limit: RunModelLimit = field(default_factory=RunModelLimit)
    """``RunModel``'s timeouts, attempts and retry budget."""
    message_window_size: int = 64
    """Messages kept one per ``AgentMessages`` instance before older ones move to chunks."""
    message_chunk_size: int = 32
    """Most messages per ``AgentMessageChunks`` instance."""
    message_chunk_max_bytes: int = 1024 * 1024
    """Most encoded bytes per chunk (at most 8 MiB)."""
    retained_message_limit: int | None = 1000
    """With compaction, summarized chunks are deleted once this many messages are
    stored after them; ``None`` keeps every message."""
    compaction: CompactionPolicy | None = None
    """Summarize older messages to stay under the context window (needs a
    ``ContextCompactionRunner``); ``None`` never compacts."""
    spend_limit: Any = None
    """A ``ModelSpendLimit`` asked before every model and summary call; ``None``
    makes no checks."""
    tool_ray_options: RayTaskOptions = field(default_factory=RayTaskOptions)
    """Ray options of every tool Step (pooled executors of that resource shape by
    default) unless the runner or ``tool_ray_options_by_name`` says otherwise."""
    tool_ray_options_by_name: Mapping[str, RayTaskOptions] = field(default_factory=dict)
    """Ray options per tool name (CPUs, GPUs, memory, resources, runtime_env)."""
    inline_tools: frozenset[str] = frozenset()
    """Tools whose Steps run in the session's host instead of on Ray; for
    cheap async tools. Attempts, effects and crash semantics are the same."""
    model_ray_options: RayTaskOptions | None = None
    """Run each ``RunModel`` Step on Ray with these options (CPUs, GPUs, custom
    resources, a runtime_env) instead of in the session's host, which then never
    loads the model client's library: on the pooled executors of that shape,
    shared by every host (``RemoteExecution.TASK``: a task worker per call). It
    adds two actor calls per model call. ``None``: in the host."""
    tracing: AgentTracingOptions = field(default_factory=AgentTracingOptions)
    """OpenTelemetry spans (on by default, with the global tracer provider of each
    process that runs a Step); see ``AgentTracingOptions``."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "tool_policies", dict(self.tool_policies))
        object.__setattr__(self, "default_tool_effect", ToolEffect(self.default_tool_effect))
        object.__setattr__(
            self, "built_in_tools", frozenset(BuiltInTool(t) for t in self.built_in_tools)
        )
        object.__setattr__(self, "inline_tools", frozenset(self.inline_tools))
        object.__setattr__(self, "tool_ray_options_by_name", dict(self.tool_ray_options_by_name))
        for name, policy in self.tool_policies.items():
            if not isinstance(policy, ToolPolicy):
                raise TypeError(f"AgentSessionOptions.tool_policies[{name!r}] must be a ToolPolicy")
        if self.event_stream_capacity_bytes <= 0:
            raise ValueError("AgentSessionOptions.event_stream_capacity_bytes must be positive")
        if self.interrupt_deadline is not None and self.interrupt_deadline <= timedelta(0):
            raise ValueError("AgentSessionOptions.interrupt_deadline must be positive")
        if self.model_ray_options is not None and not isinstance(
            self.model_ray_options, RayTaskOptions
        ):
            raise TypeError("AgentSessionOptions.model_ray_options must be a RayTaskOptions")
        if self.max_durable_wait < timedelta(seconds=1):
            raise ValueError("AgentSessionOptions.max_durable_wait must be at least 1 second")
        if self.plan_mode_enabled and BuiltInTool.WRITE_TODOS not in self.built_in_tools:
            raise ValueError(
                "AgentSessionOptions.plan_mode_enabled needs write_todos in built_in_tools"
            )
        if self.message_window_size < 1 or self.message_chunk_size < 1:
            raise ValueError(
                "AgentSessionOptions.message_window_size and message_chunk_size must be >= 1"
            )
        if not 1 <= self.message_chunk_max_bytes <= 8 * 1024 * 1024:
            raise ValueError("AgentSessionOptions.message_chunk_max_bytes must be 1..8 MiB")
        if self.retained_message_limit is not None and (
            isinstance(self.retained_message_limit, bool)
            or not isinstance(self.retained_message_limit, int)
            or self.retained_message_limit < 1
        ):
            raise ValueError("AgentSessionOptions.retained_message_limit must be None or >= 1")
        if self.spend_limit is not None and not (
            callable(getattr(self.spend_limit, "reserve", None))
            and callable(getattr(self.spend_limit, "record", None))
        ):
            raise TypeError("AgentSessionOptions.spend_limit must be a ModelSpendLimit or None")
        if self.compaction is not None and not isinstance(self.compaction, CompactionPolicy):
            raise TypeError("AgentSessionOptions.compaction must be a CompactionPolicy or None")
        if not isinstance(self.tracing, AgentTracingOptions):
            raise TypeError("AgentSessionOptions.tracing must be an AgentTracingOptions")


@dataclass(frozen=True, kw_only=True)
@wire_value
class AgentSessionStartInput:
    """Input of ``StartAgentSession`` (the Flow's start input)."""

    initial_message: str | None = None
    """The first user message; ``None`` or blank starts no turn."""
    images: tuple[AgentImageReference, ...] = ()
    """Images of the first message; empty for none."""
    session_settings: dict[str, Any] = field(default_factory=dict)
    """Session settings (a JSON object, see ``MAX_SESSION_SETTINGS_BYTES``); empty for none."""
    start_environment: dict[str, str] = field(default_factory=dict)
    """Where the starting program ran; the session never reads it."""
