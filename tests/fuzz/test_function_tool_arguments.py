"""Fuzzing ``function_tool`` argument decoding: any text the model sends either
decodes to the hinted Python values or raises ``ToolExecutionError`` naming the
tool; nothing else escapes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dex_agents_ray.builtin_loop import function_tool
from dex_agents_ray.session import ToolEffect, ToolExecutionError


class Speed(StrEnum):
    SLOW = "slow"
    FAST = "fast"


@dataclass
class Address:
    street: str
    number: int


@function_tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
def ship(
    order_id: str,
    count: int,
    address: Address,
    speed: Speed = Speed.SLOW,
    tags: list[str] | None = None,
    mode: Literal["air", "sea"] = "sea",
    weight: float = 1.0,
) -> str:
    """Ship an order."""
    return order_id


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=8,
)
FIELDS = st.sampled_from(["order_id", "count", "address", "speed", "tags", "mode", "weight", "x"])
NEAR_VALID = st.fixed_dictionaries(
    {
        "order_id": st.text(max_size=5) | JSON,
        "count": st.integers() | JSON,
        "address": st.fixed_dictionaries({"street": st.text(max_size=5), "number": st.integers()})
        | JSON,
    },
    optional={
        "speed": st.sampled_from(["slow", "fast", "SLOW", ""]) | JSON,
        "tags": st.lists(st.text(max_size=3), max_size=2) | JSON,
        "mode": st.sampled_from(["air", "sea", "rail"]),
        "weight": st.floats(allow_nan=True, allow_infinity=True) | JSON,
    },
)
ARGUMENTS = (
    st.text(max_size=40)
    | JSON.map(json.dumps)
    | NEAR_VALID.map(json.dumps)
    | st.dictionaries(FIELDS, JSON, max_size=5).map(json.dumps)
)


def _check_decoded(value: dict[str, Any]) -> None:
    assert isinstance(value["order_id"], str)
    assert isinstance(value["count"], int) and not isinstance(value["count"], bool)
    assert isinstance(value["address"], Address)
    assert isinstance(value["address"].number, int)
    assert value.get("speed", Speed.SLOW) in set(Speed)
    assert value.get("mode", "sea") in {"air", "sea"}
    tags = value.get("tags")
    assert tags is None or all(isinstance(t, str) for t in tags)


@settings(max_examples=400, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(arguments=ARGUMENTS)
def test_arguments_decode_to_the_hints_or_raise_tool_execution_error(arguments: str) -> None:
    try:
        value = ship.decode_arguments(arguments)
    except ToolExecutionError as error:
        assert "ship" in str(error)
        return
    _check_decoded(value)


def test_valid_arguments_decode() -> None:
    value = ship.decode_arguments(
        json.dumps({"order_id": "o1", "count": 2, "address": {"street": "Main", "number": 7}})
    )

    _check_decoded(value)
    assert value["address"] == Address(street="Main", number=7)
