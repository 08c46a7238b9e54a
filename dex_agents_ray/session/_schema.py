"""The session's persistence names and the configuration its Steps share.

Every agent Flow type shares these Attribute, Channel and ChannelMap
definitions; only the ``AgentEvents`` Stream is per Flow type (its capacity
comes from the options). The definitions are module globals, so a Flow
unpickled in a Ray worker refers to the same objects its Steps use.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from dex import AsyncContext, Attribute, AttributeMap, Channel, ChannelMap, Context, Stream

from dex_agents_ray.session._api import AgentEvent, AgentEventType, AgentSessionOptions
from dex_agents_ray.session._runner import AgentEventWriter, AgentFrameworkRunner
from dex_agents_ray.session._values import (
    AgentInterrupt,
    AgentInterruptResolution,
    AgentMessage,
    AgentMessageChunk,
    AgentMessageIndex,
    AgentPlan,
    AgentState,
    AgentToolCall,
    AgentUsage,
    AgentUserMessage,
    ContextSummary,
    PlanExecutionRequest,
    ToolCallCancellation,
    ToolCallCompleted,
    TurnCancellationRequest,
    TurnControlRequest,
    TurnReplySequence,
    TurnSessionSettings,
    json_ready,
)

__all__ = [
    "AGENT_EVENTS_STREAM_NAME",
    "AGENT_MESSAGES",
    "AGENT_MESSAGE_CHUNKS",
    "AGENT_MESSAGE_INDEX",
    "AGENT_PLAN",
    "AGENT_STATE",
    "AGENT_TOOL_CALLS",
    "AGENT_TRACE_CONTEXT",
    "AGENT_USAGE",
    "CONTEXT_SUMMARY",
    "FRAMEWORK_RUN_STATE",
    "INTERRUPT_RESOLUTIONS",
    "PENDING_INTERRUPTS",
    "PENDING_PLAN_EXECUTION",
    "PLAN_EXECUTIONS",
    "QUEUED_USER_MESSAGES",
    "SESSION_SETTINGS",
    "STEERED_USER_MESSAGES",
    "TOOL_CALL_CANCELLATIONS",
    "TOOL_CALL_RESULTS",
    "TURN_CANCELLATION_REQUEST",
    "TURN_CONTROL_REQUESTS",
    "TURN_REPLY_SEQUENCE",
    "TURN_SESSION_SETTINGS",
    "SessionConfig",
    "message_sequence_key",
    "plan_execution_key",
]

AGENT_EVENTS_STREAM_NAME = "AgentEvents"
"""The name of every session Flow type's event Stream."""

AGENT_STATE: Attribute[AgentState] = Attribute("AgentState", AgentState)
AGENT_MESSAGES: AttributeMap[AgentMessage] = AttributeMap("AgentMessages", AgentMessage)
AGENT_MESSAGE_CHUNKS: AttributeMap[AgentMessageChunk] = AttributeMap(
    "AgentMessageChunks", AgentMessageChunk
)
AGENT_MESSAGE_INDEX: Attribute[AgentMessageIndex] = Attribute(
    "AgentMessageIndex", AgentMessageIndex
)
TURN_REPLY_SEQUENCE: Attribute[TurnReplySequence] = Attribute(
    "TurnReplySequence", TurnReplySequence
)
FRAMEWORK_RUN_STATE: Attribute[str] = Attribute("FrameworkRunState", str)
AGENT_TOOL_CALLS: AttributeMap[AgentToolCall] = AttributeMap("AgentToolCalls", AgentToolCall)
PENDING_INTERRUPTS: Attribute[list[AgentInterrupt]] = Attribute(
    "PendingInterrupts", list[AgentInterrupt]
)
AGENT_USAGE: Attribute[AgentUsage] = Attribute("AgentUsage", AgentUsage)
QUEUED_USER_MESSAGES: Channel[AgentUserMessage] = Channel("QueuedUserMessages", AgentUserMessage)
INTERRUPT_RESOLUTIONS: ChannelMap[AgentInterruptResolution] = ChannelMap(
    "InterruptResolutions", AgentInterruptResolution
)
TOOL_CALL_RESULTS: Channel[ToolCallCompleted] = Channel("ToolCallResults", ToolCallCompleted)
STEERED_USER_MESSAGES: Channel[AgentUserMessage] = Channel("SteeredUserMessages", AgentUserMessage)
TURN_CONTROL_REQUESTS: Channel[TurnControlRequest] = Channel(
    "TurnControlRequests", TurnControlRequest
)
TURN_CANCELLATION_REQUEST: Attribute[TurnCancellationRequest] = Attribute(
    "TurnCancellationRequest", TurnCancellationRequest
)
TOOL_CALL_CANCELLATIONS: ChannelMap[ToolCallCancellation] = ChannelMap(
    "ToolCallCancellations", ToolCallCancellation
)
AGENT_TRACE_CONTEXT: Attribute[str] = Attribute("AgentTraceContext", str)
AGENT_PLAN: Attribute[AgentPlan] = Attribute("AgentPlan", AgentPlan)
PLAN_EXECUTIONS: ChannelMap[PlanExecutionRequest] = ChannelMap(
    "PlanExecutions", PlanExecutionRequest
)
PENDING_PLAN_EXECUTION: Attribute[PlanExecutionRequest] = Attribute(
    "PendingPlanExecution", PlanExecutionRequest
)
CONTEXT_SUMMARY: Attribute[ContextSummary] = Attribute("ContextSummary", ContextSummary)
SESSION_SETTINGS: Attribute[dict[str, Any]] = Attribute("SessionSettings", dict[str, Any])
TURN_SESSION_SETTINGS: Attribute[TurnSessionSettings] = Attribute(
    "TurnSessionSettings", TurnSessionSettings
)

SHARED_PERSISTENCE: tuple[Any, ...] = (
    AGENT_STATE,
    AGENT_MESSAGES,
    AGENT_MESSAGE_CHUNKS,
    AGENT_MESSAGE_INDEX,
    TURN_REPLY_SEQUENCE,
    FRAMEWORK_RUN_STATE,
    AGENT_TOOL_CALLS,
    PENDING_INTERRUPTS,
    AGENT_USAGE,
    QUEUED_USER_MESSAGES,
    INTERRUPT_RESOLUTIONS,
    TOOL_CALL_RESULTS,
    STEERED_USER_MESSAGES,
    TURN_CONTROL_REQUESTS,
    TURN_CANCELLATION_REQUEST,
    TOOL_CALL_CANCELLATIONS,
    AGENT_TRACE_CONTEXT,
    AGENT_PLAN,
    PLAN_EXECUTIONS,
    PENDING_PLAN_EXECUTION,
    CONTEXT_SUMMARY,
    SESSION_SETTINGS,
    TURN_SESSION_SETTINGS,
)
"""Every definition but the per-Flow-type ``AgentEvents`` Stream."""

HEARTBEAT_INTERVAL = timedelta(seconds=20)
"""How often long Steps heartbeat in the background."""


def message_sequence_key(sequence: int) -> str:
    """The ``AgentMessages`` / ``AgentMessageChunks`` key of a sequence (12 digits)."""
    return f"{sequence:012d}"


def plan_execution_key(revision: int) -> str:
    """The ``PlanExecutions`` key of a plan revision (decimal)."""
    return str(revision)


@dataclass
class SessionConfig:
    """What every Step and RPC of one session Flow type shares.

    It is pickled with the Flow (one graph), so ``events`` stays the very
    Stream object of the Flow's persistence schema on every worker.
    """

    flow_type: str
    runner: AgentFrameworkRunner[Any]
    options: AgentSessionOptions
    events: Stream[AgentEvent]

    def emit(
        self,
        context: Context,
        type: AgentEventType,
        payload: Mapping[str, Any],
        *,
        turn_id: str | None,
    ) -> None:
        """Write one event bound to ``context``'s Step execution and attempt."""
        event = AgentEvent(
            type=type,
            payload=json_ready(dict(payload)),
            turn_id=turn_id,
            step_execution_id=context.step_execution_id,
            attempt=context.attempt,
        )
        self.events.write(context, event)

    def event_writer(self, context: Context, turn_id: str | None) -> AgentEventWriter:
        """An event writer bound to ``context`` for a runner call."""

        def write(event: AgentEvent) -> None:
            self.events.write(context, event)

        return AgentEventWriter(
            write,
            turn_id=turn_id,
            step_execution_id=context.step_execution_id,
            attempt=context.attempt,
        )


class Heartbeats:
    """Background heartbeats of one attempt, carrying its latest checkpoint.

    With ``marks_start`` every beat carries a value, ``None`` until a checkpoint
    is saved: the store keeps the last value for the Step's next attempt, so a
    tool Step's retry can tell that an earlier attempt started the tool even
    when that attempt saved no checkpoint.
    """

    def __init__(
        self, context: AsyncContext, checkpoint: str | None, *, marks_start: bool = False
    ) -> None:
        self._context = context
        self.checkpoint = checkpoint
        self._marks_start = marks_start

    async def beat(self) -> None:
        """One heartbeat now, with the checkpoint when there is one."""
        if self.checkpoint is None and not self._marks_start:
            await self._context.heartbeat()
        else:
            await self._context.heartbeat(self.checkpoint)

    async def save(self, checkpoint: str) -> None:
        """Record ``checkpoint``; this and every later heartbeat carries it."""
        if not isinstance(checkpoint, str):
            raise TypeError("save_heartbeat_checkpoint takes a str")
        self.checkpoint = checkpoint
        await self.beat()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Heartbeats]:
        """Heartbeat every 20 seconds until the block ends.

        The beating task starts at the first beat (a timer until then): most
        blocks end long before it, and a timer costs less than a task."""
        loop = asyncio.get_running_loop()
        interval = HEARTBEAT_INTERVAL.total_seconds()
        task: asyncio.Task[None] | None = None

        async def beating() -> None:
            while True:
                await self.beat()
                await asyncio.sleep(interval)

        def start() -> None:
            nonlocal task
            task = loop.create_task(beating())

        timer = loop.call_later(interval, start)
        try:
            yield self
        finally:
            timer.cancel()
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task


def previous_checkpoint(context: Context) -> str | None:
    """The checkpoint an earlier attempt saved, or ``None``."""
    if not context.has_last_heartbeat_value():
        return None
    value = context.get_last_heartbeat_value(str)
    return value if isinstance(value, str) else None
