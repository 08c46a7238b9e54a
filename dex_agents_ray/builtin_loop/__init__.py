"""The built-in agent loop: agents defined in Dex terms, without a framework.

This package holds the model-call layer: the :class:`ModelClient` protocol,
the provider-neutral :class:`ModelRequest` and provider-exact
:class:`ModelResponse`, and :class:`ScriptedModelClient`, a deterministic
model for demos and tests. ``dex_agents_ray.litellm`` provides a client for
real providers.
"""

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

__all__ = [
    "ESTIMATED_IMAGE_INPUT_TOKENS",
    "SCRIPTED_PROVIDER",
    "ForcedToolChoiceSupport",
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
    "ToolChoice",
    "ToolResultItem",
    "UserTextItem",
]
