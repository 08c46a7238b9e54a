"""Attribute values decoded once per write: shared only when nothing can change them."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from dex import FlowStatus

from dex_agents_ray.engine.sdk._immutable import deeply_immutable
from dex_agents_ray.session._values import AgentMessage, AgentToolCall
from tests.engine.flows_decoded import Box, DecodedFlow, Point


class Color(enum.Enum):
    RED = "red"


@dataclass(frozen=True)
class HoldsList:
    items: list[str]


@dataclass(frozen=True)
class Node:
    name: str
    children: tuple[Node, ...] = ()


def test_deeply_immutable_types() -> None:
    for value_type in (
        str,
        int,
        bool,
        float,
        bytes,
        datetime,
        Color,
        Point,
        Node,
        AgentMessage,
        AgentToolCall,
        tuple[str, ...],
        tuple[int, str],
        frozenset[int],
        str | None,
        Literal["a", "b"],
    ):
        assert deeply_immutable(value_type), value_type
    for value_type in (
        list[str],
        dict[str, int],
        Any,
        object,
        Box,
        HoldsList,
        tuple[list[int]],
        str | list[str],
        set[int],
    ):
        assert not deeply_immutable(value_type), value_type


async def test_reads_share_immutable_values_and_copy_mutable_ones(engine_factory: Any) -> None:
    flow = DecodedFlow()
    engine = await engine_factory([flow])
    await engine.client.start_flow(flow, "decoded", "-")
    result = await engine.client.wait_for_flow("decoded", timeout=60)
    assert result.status is FlowStatus.COMPLETED, result.error_message
    report = result.single_output(dict[str, Any])
    assert report["same_object"] is True  # the second read is the first's value
    assert report["point"] == 1
    assert report["items"] == ["a"]  # a list changed in place by an earlier Step is not shared
    assert report["box"] == ["a"]
    assert report["before_rewrite"] == 1
    assert report["staged"] == 2
    assert report["staged_same_object"] is True  # a read after a write: the object written
    assert report["mutable_copied"] == ["b"]
    assert report["after_rewrite"] == [2, ["b"]]
    assert report["deleted"] is True
    # On an executor: the second read reuses the first's value, a read after a
    # write gets the object written, and the write commits.
    assert report["remote_same_object"] is True
    assert report["remote_reads_own_write"] is True
    assert report["remote_point"] == 11
