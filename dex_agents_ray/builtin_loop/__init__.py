"""The built-in agent loop: agents defined in Dex terms, without a framework.

This package holds the model-call layer (the :class:`ModelClient` protocol,
the provider-neutral :class:`ModelRequest` and provider-exact
:class:`ModelResponse`, and :class:`ScriptedModelClient`, a deterministic
model for demos and tests), function tools (:func:`function_tool`), and tool
sources (:class:`ToolSource`). ``dex_agents_ray.litellm`` provides a client
for real providers.

The names built on the session's runner contract load on first use:
``dex_agents_ray.session`` imports this package's model layer while it
initializes, so those modules cannot be imported eagerly here.
"""

import importlib
from typing import TYPE_CHECKING

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
from dex_agents_ray.builtin_loop._scripted import (
    SCRIPTED_PROVIDER,
    ScriptedModelClient,
    ScriptedModelReply,
    ScriptedResponder,
    ScriptedToolCall,
)

if TYPE_CHECKING:
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
    from dex_agents_ray.builtin_loop._flow import (
        builtin_agent_session_flow,
        builtin_agent_session_options,
    )
    from dex_agents_ray.builtin_loop._function_tool import (
        FunctionTool,
        FunctionToolResult,
        ToolCallContext,
        function_tool,
    )
    from dex_agents_ray.builtin_loop._runner import (
        BuiltinLoopAgentRunner,
    )
    from dex_agents_ray.builtin_loop._tool_source import (
        DEFAULT_TOOL_SOURCE_LISTING_TIMEOUT,
        ListedTool,
        SourceTool,
        ToolSource,
    )

_LAZY_MODULES = {
    "FunctionTool": "_function_tool",
    "FunctionToolResult": "_function_tool",
    "ToolCallContext": "_function_tool",
    "function_tool": "_function_tool",
    "DEFAULT_TOOL_SOURCE_LISTING_TIMEOUT": "_tool_source",
    "ListedTool": "_tool_source",
    "SourceTool": "_tool_source",
    "ToolSource": "_tool_source",
    "DEFAULT_MAX_MODEL_CALLS_PER_TURN": "_definition",
    "MAX_CONSECUTIVE_TURN_CONTINUATIONS": "_definition",
    "TURN_CONTINUATION_LIMIT_ERROR": "_definition",
    "AgentDefinition": "_definition",
    "ContinueTurn": "_definition",
    "InstructionContext": "_definition",
    "Instructions": "_definition",
    "ModelResolver": "_definition",
    "PlanningToolChoice": "_definition",
    "TurnContinuation": "_definition",
    "TurnContinuationContext": "_definition",
    "TurnContinuationDecider": "_definition",
    "BuiltinLoopAgentRunner": "_runner",
    "builtin_agent_session_flow": "_flow",
    "builtin_agent_session_options": "_flow",
}


def __getattr__(name: str) -> object:
    module = _LAZY_MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "DEFAULT_MAX_MODEL_CALLS_PER_TURN",
    "DEFAULT_TOOL_SOURCE_LISTING_TIMEOUT",
    "ESTIMATED_IMAGE_INPUT_TOKENS",
    "MAX_CONSECUTIVE_TURN_CONTINUATIONS",
    "SCRIPTED_PROVIDER",
    "TURN_CONTINUATION_LIMIT_ERROR",
    "AgentDefinition",
    "BuiltinLoopAgentRunner",
    "ContinueTurn",
    "ForcedToolChoiceSupport",
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
    "ToolCallContext",
    "ToolChoice",
    "ToolResultItem",
    "ToolSource",
    "TurnContinuation",
    "TurnContinuationContext",
    "TurnContinuationDecider",
    "UserTextItem",
    "builtin_agent_session_flow",
    "builtin_agent_session_options",
    "function_tool",
]
