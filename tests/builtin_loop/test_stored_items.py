"""The built-in loop's stored items: framework_item JSON and display fields."""

from __future__ import annotations

import json

import pytest

from dex_agents_ray.builtin_loop import ModelOutputItem, ModelToolCall, ToolResultItem, UserTextItem
from dex_agents_ray.builtin_loop._items import decode_item, encode_item, item_message
from dex_agents_ray.media import build_image_reference
from dex_agents_ray.session import MessageRole

PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de"
    "0000000c4944415408d763f8cfc0000003010100c9fe92ef0000000049454e44ae426082"
)


def test_items_round_trip_and_images_appear_only_when_present() -> None:
    image = build_image_reference(PNG, "memory://images")
    call = ModelToolCall(tool_call_id="c1", tool_name="lookup", arguments='{"id":"é"}')
    items = [
        UserTextItem(text="héllo"),
        UserTextItem(text="look", images=[image]),
        ModelOutputItem(provider="p", api="a", item='{"raw":1}', text=None, tool_calls=[call]),
        ToolResultItem(tool_call_id="c1", tool_name="lookup", output="ok", images=[image]),
    ]
    for item in items:
        assert decode_item(encode_item(item)) == item
    assert encode_item(items[0]) == '{"type":"user_text","text":"héllo"}'
    assert json.loads(encode_item(items[1]))["images"] == [image.to_dict()]
    assert "images" not in json.loads(encode_item(items[2]))


def test_messages_carry_display_fields() -> None:
    call = ModelToolCall(tool_call_id="c1", tool_name="lookup", arguments="{}")
    request = item_message(ModelOutputItem(provider="p", api="a", item="{}", tool_calls=[call]))
    assert (request.role, request.tool_call_id, request.tool_name, request.tool_arguments) == (
        MessageRole.ASSISTANT,
        "c1",
        "lookup",
        "{}",
    )
    result = item_message(ToolResultItem(tool_call_id="c1", tool_name="lookup", output="ok"))
    assert (result.role, result.tool_output) == (MessageRole.TOOL, "ok")


@pytest.mark.parametrize("text", ["not json", '{"type":"other"}', '{"type":"user_text"}', "[]"])
def test_foreign_items_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        decode_item(text)


def _frozen_all_the_way(value: object) -> bool:
    import dataclasses

    if isinstance(value, str | int | float | bool | type(None)):
        return True
    if isinstance(value, tuple):
        return all(_frozen_all_the_way(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        params = type(value).__dataclass_params__  # type: ignore[attr-defined]
        return bool(params.frozen) and all(
            _frozen_all_the_way(getattr(value, f.name)) for f in dataclasses.fields(value)
        )
    return False


def test_decoded_items_are_shared_because_nothing_can_change_them() -> None:
    from dex_agents_ray.builtin_loop import (
        ModelOutputItem,
        ModelToolCall,
        ToolResultItem,
        UserTextItem,
    )
    from dex_agents_ray.builtin_loop._items import decode_item, item_message
    from dex_agents_ray.media import AgentImageReference

    digest = "a" * 64
    image = AgentImageReference(
        uri=f"file:///tmp/store/sha256/{digest}",
        mime_type="image/png",
        sha256=digest,
        size_bytes=10,
    )
    items = [
        UserTextItem(text="hello", images=[image]),
        ToolResultItem(tool_call_id="c1", tool_name="t", output="o", images=[image]),
        ModelOutputItem(
            provider="p",
            api="a",
            item="{}",
            text="x",
            tool_calls=[ModelToolCall(tool_call_id="c1", tool_name="t", arguments="{}")],
        ),
    ]
    for item in items:
        text = item_message(item).framework_item
        decoded = decode_item(text)
        assert decoded == item
        assert decoded is decode_item(text)  # decoded once, shared
        assert _frozen_all_the_way(decoded), decoded  # so no caller can change it
