"""The engine's caching codec registry encodes and decodes exactly as the SDK's."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import Enum
from typing import Any, NamedTuple
from uuid import UUID

import pytest
from dex import CodecRegistry, JsonCodec
from dex.codec import _encode_json_value

from dex_agents_ray import (
    AgentInterrupt,
    AgentMessage,
    AgentState,
    AgentStatus,
    AgentToolCall,
    AgentToolCallStatus,
    InterruptKind,
    MessageRole,
    ToolEffect,
)
from dex_agents_ray.engine.sdk._codecs import (
    CachingCodecRegistry,
    _dumps,
    _encode,
    _shared_texts,
    _SharedDecodingJsonCodec,
    _Splice,
    share_decoded_values,
)
from dex_agents_ray.media import AgentImageReference


class Color(Enum):
    RED = "red"


@dataclass(frozen=True)
class Node:
    name: str
    children: list[Node] = field(default_factory=list)
    tags: dict[str, int] = field(default_factory=dict)
    color: Color = Color.RED
    seen: datetime | None = None
    pair: tuple[int, ...] = ()


def _samples() -> list[tuple[object, Any]]:
    image = AgentImageReference(
        uri="file:///tmp/a.png", mime_type="image/png", sha256="a" * 64, size_bytes=10
    )
    return [
        (Node, Node("root", [Node("leaf", tags={"a": 1})], seen=datetime(2026, 1, 1, tzinfo=UTC))),
        (list[Node], [Node("x", pair=(1, 2))]),
        (dict[str, Node], {"k": Node("v")}),
        (
            AgentToolCall,
            AgentToolCall(
                tool_call_id="c1",
                turn_id="turn-1",
                tool_name="refund",
                arguments='{"a": 1}',
                effect=ToolEffect.NON_IDEMPOTENT_WRITE,
                requires_approval=True,
                status=AgentToolCallStatus.OUTCOME_UNKNOWN,
                deferral_order=0,
                images=(image,),
                choices=("yes", "no"),
            ),
        ),
        (
            AgentInterrupt,
            AgentInterrupt(
                interrupt_id="i",
                kind=InterruptKind.QUESTION,
                tool_call_id="c",
                tool_name="ask_user",
                turn_id="turn-2",
                arguments="{}",
            ),
        ),
        (
            AgentMessage,
            AgentMessage(sequence=1, turn_id="turn-1", role=MessageRole.USER, framework_item="{}"),
        ),
        (AgentState, AgentState(status=AgentStatus.RUNNING_TOOLS, turn_count=3)),
    ]


@pytest.mark.parametrize("index", range(len(_samples())))
def test_round_trip_matches_the_sdk(index: int) -> None:
    hint, value = _samples()[index]
    sdk, ours = CodecRegistry().resolve(hint), CachingCodecRegistry().resolve(hint)
    wire = sdk.encode(value)
    assert ours.encode(value) == wire
    # Equal to what the SDK decodes, including its quirks (an Optional datetime
    # stays a string there; the session's values coerce such fields themselves).
    assert ours.decode(wire) == sdk.decode(wire)


def test_bad_values_fail_as_in_the_sdk() -> None:
    sdk, ours = CodecRegistry().resolve(Node), CachingCodecRegistry().resolve(Node)
    for payload in (
        '{"name": 5, "children": [], "tags": {}, "color": "red", "seen": null, "pair": []}',
        '"not an object"',
    ):
        bad = sdk.encode(Node("x")).__class__(sdk.encode(Node("x")).kind, payload)
        with pytest.raises(TypeError):
            sdk.decode(bad)
        with pytest.raises(TypeError):
            ours.decode(bad)


def test_custom_codecs_keep_precedence_and_resolutions_are_cached() -> None:
    custom = JsonCodec("Node", lambda data: Node("custom"), lambda node: {}, Node)
    ours = CachingCodecRegistry(CodecRegistry({Node: custom}))
    assert ours.resolve(Node) is custom
    assert CachingCodecRegistry().resolve(list[int]) is not None
    registry = CachingCodecRegistry()
    assert registry.resolve(AgentToolCall) is registry.resolve(AgentToolCall)


class Point(NamedTuple):
    x: int
    when: datetime


def test_one_pass_encoding_equals_the_sdks_asdict_encoding() -> None:
    when = datetime(2026, 1, 1, tzinfo=UTC)
    values: list[object] = [
        Node("a", [Node("b", color=Color.RED)], {"x": 1}, seen=when, pair=(1, 2)),
        {"nodes": [Node("c"), {"deep": (Node("d"), when)}], Color.RED: Color.RED},
        (Point(1, when), [Point(2, when)]),
        [None, True, 1.5, "s", {"k": [Color.RED]}],
        Node,  # a class is not a dataclass instance
    ]
    for value in values:
        assert _encode(value) == _encode_json_value(value)


class Text(str):
    pass


def _sdk_text(value: object) -> tuple[str, str]:
    """What the SDK's ``json.dumps`` makes of ``_encode(value)``: its text or its error."""
    try:
        return "ok", json.dumps(
            _encode_json_value(value), allow_nan=False, separators=(",", ":"), sort_keys=True
        )
    except (TypeError, ValueError) as error:
        return type(error).__name__, str(error)


def _our_text(value: object) -> tuple[str, str]:
    try:
        return "ok", _dumps(_encode(value))
    except (TypeError, ValueError) as error:
        return type(error).__name__, str(error)


def test_the_fast_json_writer_writes_what_json_dumps_writes_and_refuses_what_it_refuses() -> None:
    floats = [0.0, -0.0, 1.5, 1e-4, 9.99e-5, 1e-5, 1.5e-9, 5e-324, 1e15, 1e16, 1.2e300, -3e-7]
    values: list[object] = [
        {"b": 1, "a": [1, (2, 3)], "c": {"z": None, "y": True}},
        "plain",
        {"text": "caf\u00e9 \u2603 \U0001f600", "del": "a\x7fb", "ctl": '\x00\x1f\n\t"\\'},
        [2**63 - 1, -(2**63), 2**64, -(2**70)],
        {1: "int key"},
        {"sub": Text("x")},
        *floats,
        [{"v": f} for f in floats],
        Node(
            "a", [Node("b", color=Color.RED)], {"x": 1.0e-6}, seen=datetime(2026, 1, 1, tzinfo=UTC)
        ),
        float("nan"),
        {"x": float("inf")},
        "\ud800",
        {"id": UUID(int=1)},
        {"when": datetime(2026, 1, 1, tzinfo=UTC).date()},
    ]
    for value in values:
        assert _our_text(value) == _sdk_text(value), value


@dataclass(frozen=True)
class Frozen:
    name: str
    when: datetime | None = None
    tags: tuple[str, ...] = ()


@dataclass
class Mutable:
    name: str


@dataclass(frozen=True)
class HoldsAList:
    items: list[str]


def test_shared_decoding_hands_out_one_value_per_json_text_for_immutable_classes() -> None:
    share_decoded_values(Frozen)
    codec, sdk = CachingCodecRegistry().resolve(Frozen), CodecRegistry().resolve(Frozen)
    wire = sdk.encode(Frozen("a", tags=("x",)))
    first = codec.decode(wire)
    assert first == sdk.decode(wire)
    assert codec.decode(codec.encode(Frozen("a", tags=("x",)))) is first
    assert codec.decode(sdk.encode(Frozen("b"))) is not first
    # AgentMessage is shared by the session; its decoding still equals the SDK's.
    message = AgentMessage(sequence=1, turn_id="turn-1", role=MessageRole.USER, framework_item="{}")
    ours = CachingCodecRegistry().resolve(AgentMessage)
    assert isinstance(ours, _SharedDecodingJsonCodec)
    assert ours.decode(ours.encode(message)) == message


def test_only_values_nobody_can_change_may_be_shared() -> None:
    with pytest.raises(TypeError, match="Mutable is not a frozen dataclass"):
        share_decoded_values(Mutable)
    with pytest.raises(TypeError, match=r"HoldsAList.items: list\[str\]"):
        share_decoded_values(HoldsAList)
    assert not isinstance(CachingCodecRegistry().resolve(Node), _SharedDecodingJsonCodec)


def test_an_encoded_shared_value_is_what_decoding_its_text_gives_back() -> None:
    # A Step that reads what an earlier Step in its process wrote gets the object
    # written: it must equal what decoding the stored text gives (the SDK's way).
    written = AgentToolCall(
        tool_call_id="c1",
        turn_id="turn-1",
        tool_name="refund",
        arguments='{"amount": 5}',
        effect=ToolEffect.NON_IDEMPOTENT_WRITE,
        requires_approval=True,
        status=AgentToolCallStatus.AWAITING_APPROVAL,
        deferral_order=2,
        choices=["yes", "no"],  # a list given for a tuple field: the class makes it a tuple
        created_at=datetime(2026, 12, 1, 10, 30, tzinfo=UTC),
    )
    ours = CachingCodecRegistry().resolve(AgentToolCall)
    wire = ours.encode(written)
    assert ours.decode(wire) is written
    assert CodecRegistry().resolve(AgentToolCall).decode(wire) == written
    # Only the exact class is kept: a decode of other text is a new object.
    other = CodecRegistry().resolve(AgentToolCall).encode(replace(written, deferral_order=3))
    assert ours.decode(other) is not written


@dataclass(frozen=True)
class Transcript:
    messages: tuple[AgentMessage, ...]
    note: str
    by_name: dict[str, AgentMessage] = field(default_factory=dict)


def test_kept_texts_of_shared_values_are_spliced_into_an_encoding_unchanged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sdk_message = CodecRegistry().resolve(AgentMessage)
    ours = CachingCodecRegistry().resolve(AgentMessage)
    # Decoded through the shared codec: each message is kept with its stored text.
    read = [
        ours.decode(
            sdk_message.encode(
                AgentMessage(
                    sequence=i,
                    turn_id="turn-1",
                    role=MessageRole.USER,
                    framework_item=f'{{"text": "m{i} \\u0000dex:0000:0\\u0000 \\u00e9"}}',
                )
            )
        )
        for i in range(5)
    ]
    assert all(_shared_texts.get(id(m)) is not None for m in read)
    fresh = AgentMessage(
        sequence=9, turn_id="turn-2", role=MessageRole.ASSISTANT, framework_item="{}"
    )
    value = Transcript(
        messages=(*read, fresh, read[0]),
        note="\x00dex:0123456789abcdef:0\x00",  # a look-alike placeholder stays a string
        by_name={"first": read[0], "new": fresh},
    )
    placed: list[str] = []
    placeholder = _Splice.placeholder

    def counted(self: _Splice, text: str) -> str:
        placed.append(text)
        return placeholder(self, text)

    monkeypatch.setattr(_Splice, "placeholder", counted)
    spliced = CachingCodecRegistry().resolve(Transcript).encode(value)
    assert len(placed) == 7  # the kept messages, each time they occur; not the fresh one
    assert spliced.data == CodecRegistry().resolve(Transcript).encode(value).data
    assert CodecRegistry().resolve(Transcript).decode(spliced) == value
    # A kept value encoded alone is its own text.
    assert ours.encode(read[1]).data == sdk_message.encode(read[1]).data
