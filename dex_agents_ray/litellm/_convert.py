"""Build LiteLLM request input from a provider-neutral ``ModelRequest``.

An output item from the same provider and API replays as its stored JSON,
unchanged; any other replays as its text and tool calls. Images go after
their item's text as base64 ``data:`` URLs.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dex_agents_ray.builtin_loop import (
    ModelOutputItem,
    ModelRequest,
    ModelToolDefinition,
    ToolResultItem,
    UserTextItem,
)
from dex_agents_ray.litellm._providers import keeps_tool_result_images, omits_tool_result_images
from dex_agents_ray.media import AgentImageReference

TOOL_RESULT_IMAGES_TEXT = "The {tool_name} tool call {tool_call_id} returned these images."
"""The text of the user message that shows a tool result's images to a provider
whose tool messages hold only text; ``str.format`` it with ``tool_name`` and
``tool_call_id``."""

TOOL_RESULT_IMAGES_OMITTED_TEXT = (
    "[The tool returned {images}; this model does not receive images from tool results.]"
)
"""The note after a tool result's text for a Gemini model, which sees no tool
result images; ``str.format`` it with ``images``, such as ``"2 images"``."""

RESPONSES_API = "responses"
CHAT_COMPLETIONS_API = "chat_completions"


@dataclass(frozen=True, kw_only=True)
class LiteLLMRoute:
    """Where a client's calls go: LiteLLM's provider and model name, and the API."""

    model: str
    """The model string as the client was given it."""
    provider: str
    """LiteLLM's provider, such as ``"openai"`` or ``"anthropic"``."""
    provider_model: str
    """The model name without the provider prefix."""
    api: str
    """``"responses"`` or ``"chat_completions"``."""
    encrypted_reasoning: bool = True
    """Whether Responses API calls ask for ``reasoning.encrypted_content``: all
    but models LiteLLM knows as not reasoning, such as ``gpt-4o``, which
    refuse the request."""

    def replays_exactly(self, item: ModelOutputItem) -> bool:
        """Whether ``item`` came from this provider and API, so its JSON replays unchanged."""
        return item.provider == self.provider and item.api == self.api


def omitted_images_text(count: int) -> str:
    """``TOOL_RESULT_IMAGES_OMITTED_TEXT`` for ``count`` images."""
    return TOOL_RESULT_IMAGES_OMITTED_TEXT.format(
        images="1 image" if count == 1 else f"{count} images"
    )


def image_data_url(image: AgentImageReference, image_bytes: Mapping[str, bytes]) -> str:
    """The image as a base64 ``data:`` URL.

    Raises:
        ValueError: ``image_bytes`` holds no bytes for the image.
    """
    data = image_bytes.get(image.sha256)
    if data is None:
        raise ValueError(
            f"ModelRequest.image_bytes has no bytes for image {image.sha256} ({image.uri}); "
            "the runner loads them with load_images before each model call"
        )
    return f"data:{image.mime_type};base64,{base64.b64encode(data).decode('ascii')}"


def count_sent_images(request: ModelRequest, route: LiteLLMRoute) -> int:
    """How many images a call would send: all but a Gemini model's tool result images."""
    omitted = omits_tool_result_images(route.provider, route.provider_model)
    return sum(
        len(item.images)
        for item in request.input
        if isinstance(item, UserTextItem) or (isinstance(item, ToolResultItem) and not omitted)
    )


def _tool_result_text(item: ToolResultItem, route: LiteLLMRoute) -> str:
    if item.images and omits_tool_result_images(route.provider, route.provider_model):
        note = omitted_images_text(len(item.images))
        return f"{item.output}\n{note}" if item.output else note
    return item.output


# --- Responses API -----------------------------------------------------------------------


def responses_tools(tools: Sequence[ModelToolDefinition]) -> list[dict[str, Any]]:
    """Tool definitions in the Responses API's flat ``function`` form."""
    return [
        {
            "type": "function",
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters_schema,
        }
        for tool in tools
    ]


def _responses_parts(
    text: str, images: Sequence[AgentImageReference], image_bytes: Mapping[str, bytes]
) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = [{"type": "input_text", "text": text}]
    parts.extend(
        {"type": "input_image", "image_url": image_data_url(image, image_bytes), "detail": "auto"}
        for image in images
    )
    return parts


def build_responses_input(request: ModelRequest, route: LiteLLMRoute) -> list[dict[str, Any]]:
    """The ``input`` list of a Responses API call."""
    result: list[dict[str, Any]] = []
    for item in request.input:
        if isinstance(item, UserTextItem):
            content: object = (
                _responses_parts(item.text, item.images, request.image_bytes)
                if item.images
                else item.text
            )
            result.append({"role": "user", "content": content})
        elif isinstance(item, ToolResultItem):
            text = _tool_result_text(item, route)
            shows_images = item.images and not omits_tool_result_images(
                route.provider, route.provider_model
            )
            output: object = (
                _responses_parts(text, item.images, request.image_bytes) if shows_images else text
            )
            result.append(
                {"type": "function_call_output", "call_id": item.tool_call_id, "output": output}
            )
        elif route.replays_exactly(item):
            result.append(json.loads(item.item))
        else:
            if item.text:
                result.append({"role": "assistant", "content": item.text})
            result.extend(
                {
                    "type": "function_call",
                    "call_id": call.tool_call_id,
                    "name": call.tool_name,
                    "arguments": call.arguments,
                }
                for call in item.tool_calls
            )
    return result


# --- Chat Completions ----------------------------------------------------------------------


def chat_tools(tools: Sequence[ModelToolDefinition]) -> list[dict[str, Any]]:
    """Tool definitions in Chat Completions' nested ``function`` form."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters_schema,
            },
        }
        for tool in tools
    ]


def _chat_parts(
    text: str, images: Sequence[AgentImageReference], image_bytes: Mapping[str, bytes]
) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}]
    parts.extend(
        {"type": "image_url", "image_url": {"url": image_data_url(image, image_bytes)}}
        for image in images
    )
    return parts


class _ChatMessages:
    """Accumulates chat messages, merging neighbouring foreign assistant items.

    A provider needs every tool call of one turn in one assistant message
    before the tool messages, so consecutive items replayed as text and tool
    calls become one message. The user messages that show tool result images
    wait until the run of tool messages ends.
    """

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self._assistant: dict[str, Any] | None = None
        self._image_messages: list[dict[str, Any]] = []

    def add(self, message: dict[str, Any]) -> None:
        self._close_assistant()
        if message.get("role") != "tool":
            self._flush_images()
        self.messages.append(message)

    def add_image_message(self, message: dict[str, Any]) -> None:
        self._image_messages.append(message)

    def add_foreign(self, item: ModelOutputItem) -> None:
        if not item.text and not item.tool_calls:
            return  # reasoning alone does not cross providers
        self._flush_images()
        if self._assistant is None:
            self._assistant = {"role": "assistant", "content": None}
            self.messages.append(self._assistant)
        if item.text:
            previous = self._assistant["content"]
            self._assistant["content"] = f"{previous}\n{item.text}" if previous else item.text
        if item.tool_calls:
            calls = self._assistant.setdefault("tool_calls", [])
            calls.extend(
                {
                    "id": call.tool_call_id,
                    "type": "function",
                    "function": {"name": call.tool_name, "arguments": call.arguments},
                }
                for call in item.tool_calls
            )

    def finish(self) -> list[dict[str, Any]]:
        self._close_assistant()
        self._flush_images()
        return self.messages

    def _close_assistant(self) -> None:
        self._assistant = None

    def _flush_images(self) -> None:
        self.messages.extend(self._image_messages)
        self._image_messages = []


def build_chat_messages(request: ModelRequest, route: LiteLLMRoute) -> list[dict[str, Any]]:
    """The ``messages`` list of a Chat Completions call."""
    builder = _ChatMessages()
    if request.instructions:
        builder.add({"role": "system", "content": request.instructions})
    in_tool_message = keeps_tool_result_images(route.provider)
    omitted = omits_tool_result_images(route.provider, route.provider_model)
    for item in request.input:
        if isinstance(item, UserTextItem):
            content: object = (
                _chat_parts(item.text, item.images, request.image_bytes)
                if item.images
                else item.text
            )
            builder.add({"role": "user", "content": content})
        elif isinstance(item, ToolResultItem):
            text = _tool_result_text(item, route)
            if item.images and in_tool_message:
                content = _chat_parts(text, item.images, request.image_bytes)
            else:
                content = text
            builder.add({"role": "tool", "tool_call_id": item.tool_call_id, "content": content})
            if item.images and not in_tool_message and not omitted:
                caption = TOOL_RESULT_IMAGES_TEXT.format(
                    tool_name=item.tool_name, tool_call_id=item.tool_call_id
                )
                builder.add_image_message(
                    {
                        "role": "user",
                        "content": _chat_parts(caption, item.images, request.image_bytes),
                    }
                )
        elif route.replays_exactly(item):
            builder.add(json.loads(item.item))
        else:
            builder.add_foreign(item)
    return builder.finish()
