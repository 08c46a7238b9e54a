"""The session's persistence names.

Every agent Flow type shares these Attribute, Channel and ChannelMap
definitions; only the ``AgentEvents`` Stream is per Flow type (its capacity
comes from the options). The definitions are module globals, so a Flow
unpickled in a Ray worker refers to the same objects its Steps use. What the
Steps share besides (``SessionConfig``, heartbeats) is in ``_config``.
"""

from __future__ import annotations

from typing import Any

from dex import Attribute, AttributeMap, Channel, ChannelMap

# Stored Flow definitions name ``SessionConfig`` by this module's path.
from dex_agents_ray.session._config import SessionConfig
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


def message_sequence_key(sequence: int) -> str:
    """The ``AgentMessages`` / ``AgentMessageChunks`` key of a sequence (12 digits)."""
    return f"{sequence:012d}"


def plan_execution_key(revision: int) -> str:
    """The ``PlanExecutions`` key of a plan revision (decimal)."""
    return str(revision)
