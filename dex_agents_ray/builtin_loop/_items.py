"""The built-in loop's stored items: ``FrameworkMessage.framework_item`` JSON.

Three item types, compact JSON with non-ASCII kept::

    {"type":"user_text","text":...[,"images":[...]]}
    {"type":"model_output","provider","api","item","text","tool_calls":[...]}
    {"type":"tool_result","tool_call_id","tool_name","output"[,"images":[...]]}

An item without images has no ``images`` key. Model output items keep the
provider's JSON text byte for byte in ``item``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

from dex_agents_ray.builtin_loop._model import (
    ModelInputItem,
    ModelOutputItem,
    ModelToolCall,
    ToolResultItem,
    UserTextItem,
)
from dex_agents_ray.media import AgentImageReference
from dex_agents_ray.session import FrameworkMessage, MessageRole

__all__ = [
    "decode_item",
    "encode_item",
    "item_message",
]


def _dump(value: Mapping[str, Any]) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def encode_item(item: ModelInputItem) -> str:
    """The stored JSON text of one model input item."""
    value: dict[str, Any]
    if isinstance(item, UserTextItem):
        value = {"type": "user_text", "text": item.text}
    elif isinstance(item, ToolResultItem):
        value = {
            "type": "tool_result",
            "tool_call_id": item.tool_call_id,
            "tool_name": item.tool_name,
            "output": item.output,
        }
    else:
        return _dump(
            {
                "type": "model_output",
                "provider": item.provider,
                "api": item.api,
                "item": item.item,
                "text": item.text,
                "tool_calls": [
                    {
                        "tool_call_id": call.tool_call_id,
                        "tool_name": call.tool_name,
                        "arguments": call.arguments,
                    }
                    for call in item.tool_calls
                ],
            }
        )
    if item.images:
        value["images"] = [image.to_dict() for image in item.images]
    return _dump(value)


@functools.lru_cache(maxsize=4096)
def decode_item(framework_item: str) -> ModelInputItem:
    """The model input item of a stored message.

    Every model call rebuilds the transcript from the stored messages, so the
    items of one JSON text are decoded once per process and shared: they are
    deeply immutable (frozen dataclasses of strings and tuples; a test pins it).

    Raises:
        ValueError: The text is not an item the built-in loop stored.
    """
    try:
        value = json.loads(framework_item)
    except ValueError as error:
        raise ValueError("a stored message is not built-in loop JSON") from error
    kind = value.get("type") if isinstance(value, dict) else None
    try:
        if kind == "user_text":
            return UserTextItem(text=value["text"], images=_images(value))
        if kind == "tool_result":
            return ToolResultItem(
                tool_call_id=value["tool_call_id"],
                tool_name=value["tool_name"],
                output=value["output"],
                images=_images(value),
            )
        if kind == "model_output":
            return ModelOutputItem(
                provider=value["provider"],
                api=value["api"],
                item=value["item"],
                text=value.get("text"),
                tool_calls=[
                    ModelToolCall(
                        tool_call_id=call["tool_call_id"],
                        tool_name=call["tool_name"],
                        arguments=call["arguments"],
                    )
                    for call in value.get("tool_calls", ())
                ],
            )
    except (KeyError, TypeError) as error:
        raise ValueError(f"a stored {kind} item is malformed: {error}") from error
    raise ValueError(f"a stored message has an unknown built-in loop item type {kind!r}")


def _images(value: Mapping[str, Any]) -> list[AgentImageReference]:
    return [AgentImageReference.from_dict(image) for image in value.get("images", ())]


def item_message(item: ModelInputItem) -> FrameworkMessage:
    """The message that stores ``item``, with its display fields."""
    framework_item = encode_item(item)
    if isinstance(item, UserTextItem):
        return FrameworkMessage(
            role=MessageRole.USER,
            framework_item=framework_item,
            text=item.text,
            images=tuple(item.images),
        )
    if isinstance(item, ToolResultItem):
        return FrameworkMessage(
            role=MessageRole.TOOL,
            framework_item=framework_item,
            tool_call_id=item.tool_call_id,
            tool_name=item.tool_name,
            tool_output=item.output,
            images=tuple(item.images),
        )
    single = item.tool_calls[0] if len(item.tool_calls) == 1 else None
    return FrameworkMessage(
        role=MessageRole.ASSISTANT,
        framework_item=framework_item,
        text=item.text,
        tool_call_id=single.tool_call_id if single else None,
        tool_name=single.tool_name if single else None,
        tool_arguments=single.arguments if single else None,
    )
