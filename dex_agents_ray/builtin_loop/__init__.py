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
    from dex_agents_ray.builtin_loop._function_tool import (
        FunctionTool,
        FunctionToolResult,
        ToolCallContext,
        function_tool,
    )

_LAZY_MODULES = {
    "FunctionTool": "_function_tool",
    "FunctionToolResult": "_function_tool",
    "ToolCallContext": "_function_tool",
    "function_tool": "_function_tool",
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
    "ESTIMATED_IMAGE_INPUT_TOKENS",
    "SCRIPTED_PROVIDER",
    "ForcedToolChoiceSupport",
    "FunctionTool",
    "FunctionToolResult",
    "JsonValue",
    "ModelCallMetadata",
    "ModelClient",
    "ModelInputItem",
    "ModelOutputItem",
    "ModelOutputWriter",
    "ModelRequest",
    "ModelResponse",
    "ModelResponseError",
    "ModelSettings",
    "ModelStreamEvent",
    "ModelStreamEventType",
    "ModelToolCall",
    "ModelToolDefinition",
    "ModelUsage",
    "NullModelOutputWriter",
    "RecordingModelOutputWriter",
    "ScriptedModelClient",
    "ScriptedModelReply",
    "ScriptedResponder",
    "ScriptedToolCall",
    "ToolCallContext",
    "ToolChoice",
    "ToolResultItem",
    "UserTextItem",
    "function_tool",
]
