"""The model-call layer of the built-in loop: requests, responses and the client protocol.

Every type here is plain data (frozen dataclasses of strings, numbers, tuples
and mappings), so a :class:`ModelRequest` or :class:`ModelResponse` can cross a
Ray task boundary or be stored. Live objects, the clients themselves, are
rebuilt on the far side from the registered agent definition.

Errors::

    RuntimeError
     └── ModelResponseError   the provider's response could not be used
                              (a broken or malformed stream, a failed response)

Misuse (a bad field value) raises ``ValueError`` or ``TypeError`` naming the
field, and changes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol, TypeAlias, runtime_checkable

from dex_agents_ray.errors import DexAgentsError
from dex_agents_ray.media import AgentImageReference
from dex_agents_ray.session import ModelCallMetadata as ModelCallMetadata

JsonValue: TypeAlias = (
    str | int | float | bool | None | Sequence["JsonValue"] | Mapping[str, "JsonValue"]
)
"""A value that ``json.dumps`` writes: what provider options and schemas hold."""

ESTIMATED_IMAGE_INPUT_TOKENS = 1600
"""Input tokens that token estimates count for each image a model client sends."""


class ToolChoice(StrEnum):
    """Whether the model may, must, or must not call a tool."""

    AUTO = "auto"
    """The model decides."""
    REQUIRED = "required"
    """The model must call at least one of the offered tools."""
    NONE = "none"
    """The model must answer without tools."""


class ModelResponseError(DexAgentsError, RuntimeError):
    """The provider's response could not be used.

    Raised for a stream that ends early or breaks its protocol, and for a
    response the provider reports as failed. Like any exception from
    ``call_model`` it fails the ``RunModel`` attempt, whose retry policy runs
    the call again.

    Attributes:
        provider: The provider that answered, or ``None`` when unknown.
        api: The API that was called, or ``None`` when unknown.
    """

    def __init__(self, message: str, *, provider: str | None = None, api: str | None = None):
        super().__init__(message)
        self.provider = provider
        self.api = api


def _require_text(value: object, name: str, *, allow_empty: bool = True) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    if not allow_empty and not value:
        raise ValueError(f"{name} must not be empty")


def _as_tuple(
    owner: object, name: str, value: Sequence[object], item_type: type | tuple[type, ...]
) -> None:
    """Store a sequence field as a tuple after checking its items' types."""
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise TypeError(f"{name} must be a sequence, not {type(value).__name__}")
    items = tuple(value)
    types = item_type if isinstance(item_type, tuple) else (item_type,)
    for index, item in enumerate(items):
        if not isinstance(item, types):
            expected = " or ".join(kind.__name__ for kind in types)
            raise TypeError(f"{name}[{index}] must be {expected}, not {type(item).__name__}")
    object.__setattr__(owner, name.rsplit(".", 1)[-1], items)


@dataclass(frozen=True, kw_only=True)
class ModelToolCall:
    """One tool call a model made."""

    tool_call_id: str
    """The provider's ID of the call; the tool's result carries it back."""
    tool_name: str
    """The name of the tool to call."""
    arguments: str
    """The arguments as the model wrote them, JSON text that may be invalid."""

    def __post_init__(self) -> None:
        _require_text(self.tool_call_id, "ModelToolCall.tool_call_id", allow_empty=False)
        _require_text(self.tool_name, "ModelToolCall.tool_name", allow_empty=False)
        _require_text(self.arguments, "ModelToolCall.arguments")


@dataclass(frozen=True, kw_only=True)
class UserTextItem:
    """User text in the model input, in provider-neutral form.

    Stored as ``{"type":"user_text","text":...}``, plus ``"images"`` when it
    has images.
    """

    text: str
    """The text."""
    images: Sequence[AgentImageReference] = ()
    """References to images shown after the text; the bytes are in
    :attr:`ModelRequest.image_bytes`. Empty for none."""

    def __post_init__(self) -> None:
        _require_text(self.text, "UserTextItem.text")
        _as_tuple(self, "UserTextItem.images", self.images, AgentImageReference)


@dataclass(frozen=True, kw_only=True)
class ToolResultItem:
    """The result of one tool call in the model input, in provider-neutral form.

    Stored as ``{"type":"tool_result","tool_call_id","tool_name","output"}``,
    plus ``"images"`` when the result has images.
    """

    tool_call_id: str
    """The ID of the call this result answers."""
    tool_name: str
    """The name of the tool that was called."""
    output: str
    """The model-visible output text."""
    images: Sequence[AgentImageReference] = ()
    """References to images the tool returned; empty for none."""

    def __post_init__(self) -> None:
        _require_text(self.tool_call_id, "ToolResultItem.tool_call_id", allow_empty=False)
        _require_text(self.tool_name, "ToolResultItem.tool_name", allow_empty=False)
        _require_text(self.output, "ToolResultItem.output")
        _as_tuple(self, "ToolResultItem.images", self.images, AgentImageReference)


@dataclass(frozen=True, kw_only=True)
class ModelOutputItem:
    """One output item of a model response, kept provider-exact.

    Stored as ``{"type":"model_output","provider","api","item","text","tool_calls"}``.
    A client replays :attr:`item` unchanged to the same provider and API, so
    opaque fields such as encrypted reasoning and thinking signatures survive
    byte for byte; to any other provider or API the item replays as its
    :attr:`text` and :attr:`tool_calls`, and its reasoning is dropped.
    """

    provider: str
    """The provider that produced the item, such as ``"openai"`` or ``"anthropic"``."""
    api: str
    """The API that produced it, such as ``"responses"`` or ``"chat_completions"``."""
    item: str
    """The provider's JSON text of the item."""
    text: str | None = None
    """The item's answer text; ``None`` when it has none (reasoning, a bare tool call)."""
    tool_calls: Sequence[ModelToolCall] = ()
    """The tool calls in the item, in model order; empty for none."""

    def __post_init__(self) -> None:
        _require_text(self.provider, "ModelOutputItem.provider", allow_empty=False)
        _require_text(self.api, "ModelOutputItem.api", allow_empty=False)
        _require_text(self.item, "ModelOutputItem.item", allow_empty=False)
        if self.text is not None:
            _require_text(self.text, "ModelOutputItem.text")
        _as_tuple(self, "ModelOutputItem.tool_calls", self.tool_calls, ModelToolCall)


ModelInputItem: TypeAlias = UserTextItem | ModelOutputItem | ToolResultItem
"""One item of the model input."""

_INPUT_ITEM_TYPES = (UserTextItem, ModelOutputItem, ToolResultItem)


@dataclass(frozen=True, kw_only=True)
class ModelToolDefinition:
    """A tool offered to the model."""

    name: str
    """The tool name the model calls."""
    description: str
    """What the tool does, for the model."""
    parameters_schema: Mapping[str, JsonValue]
    """The JSON Schema of the arguments object."""

    def __post_init__(self) -> None:
        _require_text(self.name, "ModelToolDefinition.name", allow_empty=False)
        _require_text(self.description, "ModelToolDefinition.description")
        if not isinstance(self.parameters_schema, Mapping):
            raise TypeError("ModelToolDefinition.parameters_schema must be a mapping")


@dataclass(frozen=True, kw_only=True)
class ModelSettings:
    """Sampling and reasoning options of a model call.

    Every field left ``None`` keeps the provider's default, and a client sends
    only the fields that are set.
    """

    max_output_tokens: int | None = None
    """The most tokens the response may have; ``None`` for the provider's limit."""
    temperature: float | None = None
    """Sampling temperature; ``None`` for the provider's default."""
    top_p: float | None = None
    """Nucleus sampling mass; ``None`` for the provider's default."""
    reasoning_effort: str | None = None
    """Reasoning effort, such as ``"none"``, ``"low"`` or ``"high"``; ``None`` for the default."""
    reasoning_summary: str | None = None
    """Reasoning summaries on the OpenAI Responses API (``"auto"``, ``"concise"``,
    ``"detailed"``); ``None`` asks for none."""
    thinking: Mapping[str, JsonValue] | None = None
    """Extended thinking, such as ``{"type": "enabled", "budget_tokens": 2048}``;
    ``None`` for the provider's default."""
    parallel_tool_calls: bool | None = None
    """Whether the model may call several tools at once; ``None`` for the default."""
    extra_args: Mapping[str, JsonValue] = field(default_factory=dict)
    """Further provider options, sent as given; empty for none."""

    def __post_init__(self) -> None:
        if self.max_output_tokens is not None and (
            isinstance(self.max_output_tokens, bool)
            or not isinstance(self.max_output_tokens, int)
            or self.max_output_tokens < 1
        ):
            raise ValueError(
                f"ModelSettings.max_output_tokens must be a positive int, "
                f"not {self.max_output_tokens!r}"
            )
        for name in ("temperature", "top_p"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value < 0
            ):
                raise ValueError(f"ModelSettings.{name} must be a finite number >= 0")
        for name in ("reasoning_effort", "reasoning_summary"):
            value = getattr(self, name)
            if value is not None:
                _require_text(value, f"ModelSettings.{name}", allow_empty=False)
        if self.thinking is not None and not isinstance(self.thinking, Mapping):
            raise TypeError("ModelSettings.thinking must be a mapping")
        if not isinstance(self.extra_args, Mapping):
            raise TypeError("ModelSettings.extra_args must be a mapping")


@dataclass(frozen=True, kw_only=True)
class ModelRequest:
    """Everything one model call sends: the whole input, every time.

    A client keeps no provider-side conversation state, so a retried call on
    another worker sends the same request.
    """

    instructions: str | None = None
    """The system instructions; ``None`` for none."""
    input: Sequence[ModelInputItem] = ()
    """The conversation, oldest first."""
    tools: Sequence[ModelToolDefinition] = ()
    """The tools offered to the model; empty offers none."""
    tool_choice: ToolChoice = ToolChoice.AUTO
    """Whether the model may, must, or must not call a tool."""
    settings: ModelSettings = field(default_factory=ModelSettings)
    """Sampling and reasoning options."""
    image_bytes: Mapping[str, bytes] = field(default_factory=dict)
    """The bytes of every image in :attr:`input`, keyed by SHA-256; empty in
    token estimates, which never read bytes."""

    def __post_init__(self) -> None:
        if self.instructions is not None:
            _require_text(self.instructions, "ModelRequest.instructions")
        _as_tuple(self, "ModelRequest.input", self.input, _INPUT_ITEM_TYPES)
        _as_tuple(self, "ModelRequest.tools", self.tools, ModelToolDefinition)
        object.__setattr__(self, "tool_choice", ToolChoice(self.tool_choice))
        if not isinstance(self.settings, ModelSettings):
            raise TypeError("ModelRequest.settings must be a ModelSettings")
        names = [tool.name for tool in self.tools]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"ModelRequest.tools offers {duplicates[0]!r} more than once")
        if self.tool_choice is ToolChoice.REQUIRED and not self.tools:
            raise ValueError("ModelRequest.tool_choice is 'required' but no tools are offered")

    def images(self) -> list[AgentImageReference]:
        """Every image reference in :attr:`input`, in order, repeats included."""
        return [
            image
            for item in self.input
            if isinstance(item, UserTextItem | ToolResultItem)
            for image in item.images
        ]


@dataclass(frozen=True, kw_only=True)
class ModelUsage:
    """Tokens one model call used."""

    input_tokens: int = 0
    """Input tokens, cached ones included."""
    output_tokens: int = 0
    """Output tokens, reasoning ones included."""
    cached_input_tokens: int = 0
    """The part of :attr:`input_tokens` read from the provider's prompt cache."""
    reasoning_tokens: int = 0
    """The part of :attr:`output_tokens` spent on reasoning."""

    def __post_init__(self) -> None:
        for name in ("input_tokens", "output_tokens", "cached_input_tokens", "reasoning_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"ModelUsage.{name} must be an int >= 0, not {value!r}")

    def __add__(self, other: ModelUsage) -> ModelUsage:
        return ModelUsage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cached_input_tokens=self.cached_input_tokens + other.cached_input_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
        )


@dataclass(frozen=True, kw_only=True)
class ModelResponse:
    """What one model call returned."""

    output: Sequence[ModelOutputItem]
    """The output items, provider-exact, in the provider's order."""
    usage: ModelUsage = field(default_factory=ModelUsage)
    """Tokens this call used."""
    model_call_metadata: ModelCallMetadata | None = None
    """What the call reports about itself; ``None`` when the client reports nothing."""

    def __post_init__(self) -> None:
        _as_tuple(self, "ModelResponse.output", self.output, ModelOutputItem)
        if not isinstance(self.usage, ModelUsage):
            raise TypeError("ModelResponse.usage must be a ModelUsage")

    @property
    def text(self) -> str:
        """The answer text of every output item, joined."""
        return "".join(item.text or "" for item in self.output)

    @property
    def tool_calls(self) -> tuple[ModelToolCall, ...]:
        """Every tool call of every output item, in model order."""
        return tuple(call for item in self.output for call in item.tool_calls)


class ModelStreamEventType(StrEnum):
    """The kinds of live output a model call streams."""

    TEXT_DELTA = "text_delta"
    """More answer text."""
    REASONING_DELTA = "reasoning_delta"
    """More reasoning text or reasoning summary."""


@dataclass(frozen=True, kw_only=True)
class ModelStreamEvent:
    """One piece of live output."""

    type: ModelStreamEventType
    """What kind of output it is."""
    text: str
    """The new text."""


class ModelOutputWriter(Protocol):
    """Receives a model call's live output while the call runs.

    The built-in loop's runner forwards it to the session's ``text_delta`` and
    ``reasoning_delta`` events. Calls come from the task running
    ``call_model``; live output is best effort, and the returned
    :class:`ModelResponse` is the truth.

    Example::

        class PrintingWriter:
            def write_text_delta(self, text: str) -> None:
                print(text, end="")

            def write_reasoning_delta(self, text: str) -> None:
                pass
    """

    def write_text_delta(self, text: str) -> None:
        """Record more answer text."""
        ...

    def write_reasoning_delta(self, text: str) -> None:
        """Record more reasoning text or reasoning summary."""
        ...


class NullModelOutputWriter:
    """A :class:`ModelOutputWriter` that drops everything."""

    def write_text_delta(self, text: str) -> None:
        """Drop answer text."""

    def write_reasoning_delta(self, text: str) -> None:
        """Drop reasoning text."""


class RecordingModelOutputWriter:
    """A :class:`ModelOutputWriter` that keeps every event, for tests and notebooks."""

    def __init__(self) -> None:
        self.events: list[ModelStreamEvent] = []

    def write_text_delta(self, text: str) -> None:
        """Keep answer text."""
        self.events.append(ModelStreamEvent(type=ModelStreamEventType.TEXT_DELTA, text=text))

    def write_reasoning_delta(self, text: str) -> None:
        """Keep reasoning text."""
        self.events.append(ModelStreamEvent(type=ModelStreamEventType.REASONING_DELTA, text=text))

    @property
    def text(self) -> str:
        """All answer text so far."""
        return self._joined(ModelStreamEventType.TEXT_DELTA)

    @property
    def reasoning(self) -> str:
        """All reasoning text so far."""
        return self._joined(ModelStreamEventType.REASONING_DELTA)

    def _joined(self, kind: ModelStreamEventType) -> str:
        return "".join(event.text for event in self.events if event.type is kind)


class ModelClient(Protocol):
    """Makes one model call from a :class:`ModelRequest`.

    Every client makes one request per call with no retries of its own (the
    ``RunModel`` Step retries), sends the whole input every time with no
    provider-side conversation state, and returns each output item
    provider-exact (see :class:`ModelOutputItem`). ``call_model`` may run
    concurrently for different sessions, so keep no per-call state on the
    client. ``estimate_input_tokens`` is synchronous and reads no image bytes.

    Example::

        class EchoModel:
            async def call_model(
                self, request: ModelRequest, output: ModelOutputWriter
            ) -> ModelResponse:
                text = "echo"
                output.write_text_delta(text)
                item = ModelOutputItem(provider="echo", api="echo", item='"echo"', text=text)
                return ModelResponse(output=[item])

            def estimate_input_tokens(self, request: ModelRequest) -> int:
                return 0
    """

    async def call_model(self, request: ModelRequest, output: ModelOutputWriter) -> ModelResponse:
        """Make the call, stream live output to ``output``, and return the response."""
        ...

    def estimate_input_tokens(self, request: ModelRequest) -> int:
        """Estimate the input tokens ``request`` would use."""
        ...


@runtime_checkable
class ForcedToolChoiceSupport(Protocol):
    """Optional: a :class:`ModelClient` that says whether it accepts a forced tool choice.

    ``AgentDefinition`` refuses ``planning_tool_choice="required"`` for a
    client whose answer is ``False``. A client without the method is taken to
    accept it.
    """

    def supports_forced_tool_choice(self, settings: ModelSettings) -> bool:
        """Whether a call with ``settings`` accepts ``ToolChoice.REQUIRED``."""
        ...
