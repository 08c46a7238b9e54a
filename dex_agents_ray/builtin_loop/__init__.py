"""The built-in agent loop: agents defined in Dex terms, without a framework.

This package holds the model-call layer (the :class:`ModelClient` protocol,
the provider-neutral :class:`ModelRequest` and provider-exact
:class:`ModelResponse`, and :class:`ScriptedModelClient`, a deterministic
model for demos and tests), function tools (:func:`function_tool`), and tool
sources (:class:`ToolSource`, and :class:`FrameworkToolSourceRouter` for
framework adapters). ``dex_agents_ray.litellm`` provides a client
for real providers.
"""

from dex_agents_ray.builtin_loop._definition import (
    DEFAULT_MAX_MODEL_CALLS_PER_TURN,
    MAX_CONSECUTIVE_TURN_CONTINUATIONS,
    TURN_CONTINUATION_LIMIT_ERROR,
    AgentDefinition,
    ContinueTurn,
    InstructionContext,
    Instructions,
    ModelResolver,
    PlanningToolChoice,
    TurnContinuation,
    TurnContinuationContext,
    TurnContinuationDecider,
)
from dex_agents_ray.builtin_loop._estimate import estimate_request_tokens, request_text
from dex_agents_ray.builtin_loop._flow import (
    builtin_agent_session_flow,
    builtin_agent_session_options,
)
from dex_agents_ray.builtin_loop._framework_calls import FrameworkCallIds
from dex_agents_ray.builtin_loop._framework_router import (
    SOURCE_TOOL_NOT_OFFERED_RESULT,
    FrameworkToolSourceRouter,
)
from dex_agents_ray.builtin_loop._framework_runner import FrameworkRunnerBase
from dex_agents_ray.builtin_loop._function_tool import (
    FunctionTool,
    FunctionToolResult,
    ToolCallContext,
    function_tool,
)
from dex_agents_ray.builtin_loop._model import (
    ESTIMATED_IMAGE_INPUT_TOKENS,
    ForcedToolChoiceSupport,
    JsonValue,
    ModelCallMetadata,
    ModelClient,
    ModelInputItem,
    ModelOutputItem,
    ModelOutputWriter,
    ModelRequest,
    ModelResponse,
    ModelResponseError,
    ModelSettings,
    ModelStreamEvent,
    ModelStreamEventType,
    ModelToolCall,
    ModelToolDefinition,
    ModelUsage,
    NullModelOutputWriter,
    RecordingModelOutputWriter,
    ToolChoice,
    ToolResultItem,
    UserTextItem,
)
from dex_agents_ray.builtin_loop._runner import (
    BuiltinLoopAgentRunner,
)
from dex_agents_ray.builtin_loop._scripted import (
    SCRIPTED_PROVIDER,
    ScriptedModelClient,
    ScriptedModelReply,
    ScriptedResponder,
    ScriptedToolCall,
)
from dex_agents_ray.builtin_loop._tool_source import (
    DEFAULT_TOOL_SOURCE_LISTING_TIMEOUT,
    ListedTool,
    SourceTool,
    SourceToolListing,
    ToolSource,
    ToolSourceRouter,
)
from dex_agents_ray.builtin_loop._travel import (
    AgentTravelError,
    FrameworkTraveller,
    PerProcessValue,
)
from dex_agents_ray.builtin_loop._validation import SchemaViolation, validate_json_value

__all__ = [
    "DEFAULT_MAX_MODEL_CALLS_PER_TURN",
    "DEFAULT_TOOL_SOURCE_LISTING_TIMEOUT",
    "ESTIMATED_IMAGE_INPUT_TOKENS",
    "MAX_CONSECUTIVE_TURN_CONTINUATIONS",
    "SCRIPTED_PROVIDER",
    "SOURCE_TOOL_NOT_OFFERED_RESULT",
    "TURN_CONTINUATION_LIMIT_ERROR",
    "AgentDefinition",
    "BuiltinLoopAgentRunner",
    "ContinueTurn",
    "ForcedToolChoiceSupport",
    "AgentTravelError",
    "FrameworkCallIds",
    "FrameworkRunnerBase",
    "FrameworkTraveller",
    "PerProcessValue",
    "FrameworkToolSourceRouter",
    "FunctionTool",
    "FunctionToolResult",
    "InstructionContext",
    "Instructions",
    "JsonValue",
    "ListedTool",
    "ModelCallMetadata",
    "ModelClient",
    "ModelInputItem",
    "ModelOutputItem",
    "ModelOutputWriter",
    "ModelRequest",
    "ModelResolver",
    "ModelResponse",
    "ModelResponseError",
    "ModelSettings",
    "ModelStreamEvent",
    "ModelStreamEventType",
    "ModelToolCall",
    "ModelToolDefinition",
    "ModelUsage",
    "NullModelOutputWriter",
    "PlanningToolChoice",
    "RecordingModelOutputWriter",
    "ScriptedModelClient",
    "ScriptedModelReply",
    "ScriptedResponder",
    "ScriptedToolCall",
    "SourceTool",
    "SourceToolListing",
    "ToolCallContext",
    "ToolChoice",
    "ToolResultItem",
    "ToolSource",
    "ToolSourceRouter",
    "TurnContinuation",
    "TurnContinuationContext",
    "TurnContinuationDecider",
    "UserTextItem",
    "builtin_agent_session_flow",
    "builtin_agent_session_options",
    "function_tool",
    "SchemaViolation",
    "estimate_request_tokens",
    "request_text",
    "validate_json_value",
]
