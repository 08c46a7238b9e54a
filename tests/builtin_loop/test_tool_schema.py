"""JSON Schema derived from type hints, and the argument checker."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, NotRequired, Optional, TypedDict

import pytest

from dex_agents_ray.builtin_loop import ToolCallContext, function_tool
from dex_agents_ray.builtin_loop._schema import decode_value
from dex_agents_ray.builtin_loop._validation import SchemaViolation, validate_json_value
from dex_agents_ray.session import ToolEffect


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Priority(enum.IntEnum):
    LOW = 1
    HIGH = 2


@dataclass
class Address:
    street: str
    zip_code: Annotated[str, "Five digits"]
    unit: int | None = None
    tags: list[str] = field(default_factory=list)


class Filters(TypedDict):
    status: Literal["open", "closed"]
    limit: NotRequired[int]


@dataclass
class Node:
    children: list[Node]


def schema_of(function: Any) -> dict[str, Any]:
    return dict(function_tool(effect=ToolEffect.READ)(function).parameters_schema)


def test_scalars_none_and_required_from_defaults() -> None:
    def tool(
        text: str, count: int, ratio: float, flag: bool, nothing: None, maybe: str = "x"
    ) -> str:
        return ""

    assert schema_of(tool) == {
        "type": "object",
        "properties": {
            "text": {"type": "string"},
            "count": {"type": "integer"},
            "ratio": {"type": "number"},
            "flag": {"type": "boolean"},
            "nothing": {"type": "null"},
            "maybe": {"type": "string"},
        },
        "required": ["text", "count", "ratio", "flag", "nothing"],
        "additionalProperties": False,
    }


def test_containers_literals_enums_unions_and_descriptions() -> None:
    def tool(
        names: list[str],
        anything: list,  # type: ignore[type-arg]
        scores: dict[str, float],
        raw: dict,  # type: ignore[type-arg]
        mode: Literal["fast", "slow"],
        mixed: Literal[1, "one"],
        color: Color,
        priority: Priority,
        either: int | str,
        optional: Optional[int],  # noqa: UP045 - the Optional spelling is what is tested
        note: Annotated[str, "Shown to the customer"],
        context: ToolCallContext,
    ) -> str:
        return ""

    properties = schema_of(tool)["properties"]
    assert "context" not in properties
    assert properties["names"] == {"type": "array", "items": {"type": "string"}}
    assert properties["anything"] == {"type": "array"}
    assert properties["scores"] == {"type": "object", "additionalProperties": {"type": "number"}}
    assert properties["raw"] == {"type": "object"}
    assert properties["mode"] == {"type": "string", "enum": ["fast", "slow"]}
    assert properties["mixed"] == {"enum": [1, "one"]}
    assert properties["color"] == {"type": "string", "enum": ["red", "green"]}
    assert properties["priority"] == {"type": "integer", "enum": [1, 2]}
    assert properties["either"] == {"anyOf": [{"type": "integer"}, {"type": "string"}]}
    assert properties["optional"] == {"anyOf": [{"type": "integer"}, {"type": "null"}]}
    assert properties["note"] == {"type": "string", "description": "Shown to the customer"}


def test_dataclasses_and_typed_dicts_nest() -> None:
    def tool(address: Address, filters: Filters) -> str:
        return ""

    properties = schema_of(tool)["properties"]
    assert properties["address"] == {
        "type": "object",
        "properties": {
            "street": {"type": "string"},
            "zip_code": {"type": "string", "description": "Five digits"},
            "unit": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["street", "zip_code"],
        "additionalProperties": False,
    }
    assert properties["filters"] == {
        "type": "object",
        "properties": {
            "status": {"type": "string", "enum": ["open", "closed"]},
            "limit": {"type": "integer"},
        },
        "required": ["status"],
        "additionalProperties": False,
    }


@pytest.mark.parametrize(
    ("hint_source", "message"),
    [
        ("def tool(value: set[str]) -> str: ...", "parameter value: type set[str] is not"),
        ("def tool(value) -> str: ...", "parameter value has no type hint"),
        ("def tool(value: dict[int, str]) -> str: ...", "dict keys must be str"),
        ("def tool(*values: str) -> str: ...", "*args and **kwargs"),
        ("def tool(value: str, /) -> str: ...", "positional-only"),
        ("def tool(node: Node) -> str: ...", "recursive type Node"),
    ],
)
def test_unsupported_signatures_are_refused_when_defined(hint_source: str, message: str) -> None:
    namespace: dict[str, Any] = {"Node": Node}
    exec(hint_source, namespace)
    with pytest.raises(TypeError, match=message.replace("[", r"\[").replace("*", r"\*")):
        function_tool(effect=ToolEffect.READ)(namespace["tool"])


def test_decode_builds_hinted_values() -> None:
    address = decode_value({"street": "Main", "zip_code": "12345", "unit": 2.0}, Address)
    assert address == Address(street="Main", zip_code="12345", unit=2)
    assert isinstance(address.unit, int)
    assert decode_value("green", Color) is Color.GREEN
    assert decode_value(2, Priority) is Priority.HIGH
    assert decode_value(3, float) == 3.0 and isinstance(decode_value(3, float), float)
    assert decode_value({"status": "open"}, Filters) == {"status": "open"}
    assert decode_value([{"street": "a", "zip_code": "b"}], list[Address | str]) == [
        Address(street="a", zip_code="b")
    ]
    assert decode_value("x", Address | str) == "x"
    assert decode_value(None, int | None) is None


@pytest.mark.parametrize(
    ("value", "schema", "message"),
    [
        ([], {"type": "object"}, "arguments: expected object, got array"),
        ({}, {"required": ["a"]}, "arguments: missing required property 'a'"),
        (
            {"a": 1, "b": 2},
            {"properties": {"a": {}}, "additionalProperties": False},
            "arguments: unexpected property 'b'",
        ),
        ({"a": True}, {"properties": {"a": {"type": "integer"}}}, "arguments.a: expected integer"),
        ({"a": [1, "x"]}, {"properties": {"a": {"items": {"type": "integer"}}}}, r"a\[1\]"),
        ("z", {"enum": ["x", "y"]}, 'arguments: "z" is not one of'),
        (3, {"anyOf": [{"type": "string"}, {"type": "null"}]}, "matches none"),
        (1, {"oneOf": [{"type": "integer"}, {"type": "number"}]}, "exactly one schema"),
        (0, {"minimum": 1}, "expected at least 1, got 0"),
        (5, {"exclusiveMaximum": 5}, "expected less than 5"),
        ("", {"minLength": 1}, "at least 1 characters"),
        ("abc", {"pattern": "^[0-9]+$"}, "does not match"),
        ([1, 2], {"maxItems": 1}, "at most 1 items"),
        ("x", {"const": "y"}, 'expected "y"'),
        (
            {"a": 1},
            {"properties": {"a": {"$ref": "#/$defs/S"}}, "$defs": {"S": {"type": "string"}}},
            "arguments.a: expected string",
        ),
    ],
)
def test_checker_names_the_path_and_rule(value: Any, schema: dict[str, Any], message: str) -> None:
    with pytest.raises(SchemaViolation, match=message):
        validate_json_value(value, schema)


def test_checker_accepts_python_equality_and_integral_floats() -> None:
    validate_json_value(True, {"enum": [1]})
    validate_json_value(2.0, {"type": "integer"})
    validate_json_value({"a": "x"}, {"additionalProperties": {"type": "string"}})
    validate_json_value("anything", {"description": "annotations are not checked"})
