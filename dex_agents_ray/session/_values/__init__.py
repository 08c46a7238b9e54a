"""The session's stored values, by concept: messages, tool calls, interrupts,
plans, and the session's state and turn control.

Every type here is plain data, a frozen keyword-only dataclass of strings,
numbers, enums, datetimes, tuples and mappings, because it is stored with the
SDK's JSON codec and crosses Ray boundaries. Closed wire sets are ``StrEnum``
types, so the wire carries the plain strings. A type with enum, datetime,
dataclass or tuple fields is a ``wire_value`` (``session/_wire.py``): each
construction gives its fields their declared types.

The modules::

    _base         the stored format's version and the session's clock
    _messages     FrameworkMessage, AgentMessage, its chunks and index, AgentUserMessage, ...
    _tool_calls   AgentToolCall, its status, question answers, completion and cancellation
    _interrupts   AgentInterrupt and AgentInterruptResolution
    _plans        AgentPlan, PlanTodo, PlanExecutionRequest
    _state        AgentState, AgentUsage, a turn's settings, turn control requests
    _json         json_ready

This package re-exports every name, so ``dex_agents_ray.session._values.X`` (the
path a value pickled before the split names) still finds each class.
"""

from dex_agents_ray.session._values._base import (
    STATE_SCHEMA_VERSION,
    check_schema_version,
    utc_now,
)
from dex_agents_ray.session._values._interrupts import (
    AgentInterrupt,
    AgentInterruptResolution,
    InterruptKind,
)
from dex_agents_ray.session._values._json import json_ready
from dex_agents_ray.session._values._messages import (
    AgentMessage,
    AgentMessageChunk,
    AgentMessageChunkInfo,
    AgentMessageIndex,
    AgentUserMessage,
    ContextSummary,
    FrameworkMessage,
    MessageRole,
    TurnReplySequence,
)
from dex_agents_ray.session._values._plans import (
    AgentPlan,
    PlanExecutionRequest,
    PlanStatus,
    PlanTodo,
    TodoStatus,
)
from dex_agents_ray.session._values._state import (
    AgentState,
    AgentStatus,
    AgentUsage,
    InteractionMode,
    TurnCancellationRequest,
    TurnControlKind,
    TurnControlRequest,
    TurnSessionSettings,
)
from dex_agents_ray.session._values._tool_calls import (
    AgentToolCall,
    AgentToolCallStatus,
    CancellationReason,
    QuestionAnswer,
    QuestionResolution,
    ToolCallCancellation,
    ToolCallCompleted,
)

__all__ = [
    "STATE_SCHEMA_VERSION",
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
    "TurnSessionSettings",
    "check_schema_version",
    "json_ready",
    "utc_now",
]
