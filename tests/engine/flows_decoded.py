"""A Flow whose Steps read the same Attributes over and over (the decoded-value cache)."""

from __future__ import annotations

import json
from dataclasses import dataclass

import dex
from dex import (
    Attribute,
    Context,
    Flow,
    PersistenceSchema,
    Step,
    StepDecision,
    StepList,
    StepMovement,
)

from dex_agents_ray.engine import RayTaskOptions, RemoteStepOptions


@dataclass(frozen=True)
class Point:
    x: int
    tags: tuple[str, ...] = ()


@dataclass
class Box:
    """Not frozen: decoded afresh on every read."""

    items: list[str]


PointAttr = Attribute("point", Point)
ItemsAttr = Attribute("items", list[str])
BoxAttr = Attribute("box", Box)
RemotePointAttr = Attribute("remote_point", Point)


class Writes(Step[str]):
    def execute(self, context: Context, input: str) -> StepDecision:
        PointAttr.set(context, Point(x=1, tags=("a",)))
        ItemsAttr.set(context, ["a"])
        BoxAttr.set(context, Box(items=["a"]))
        return dex.go_to_many(StepMovement.of(ReadsRemotely, "{}", options=REMOTE))


REMOTE = RemoteStepOptions(ray=RayTaskOptions(num_cpus=0.1))


class ReadsRemotely(Step[str]):
    """On a pooled executor (no run-wide cache there): reads twice, writes and reads back."""

    def execute(self, context: Context, input: str) -> StepDecision:
        first, second = PointAttr.get(context), PointAttr.get(context)
        written = Point(x=first.x + 10, tags=first.tags)
        RemotePointAttr.set(context, written)
        report = {
            "remote_same_object": first is second,
            "remote_reads_own_write": RemotePointAttr.get(context) is written,
        }
        return dex.go_to(ReadsTwice, json.dumps(report))


class ReadsTwice(Step[str]):
    def execute(self, context: Context, input: str) -> StepDecision:
        first, second = PointAttr.get(context), PointAttr.get(context)
        ItemsAttr.get(context).append("changed in place")  # never set: must not stick
        BoxAttr.get(context).items.append("changed in place")
        report = {**json.loads(input), "same_object": first is second, "point": first.x}
        return dex.go_to(Rewrites, json.dumps(report))


class Rewrites(Step[str]):
    def execute(self, context: Context, input: str) -> StepDecision:
        report = json.loads(input)
        report["items"] = ItemsAttr.get(context)
        report["box"] = BoxAttr.get(context).items
        report["before_rewrite"] = PointAttr.get(context).x
        staged = Point(x=2, tags=("b",))
        PointAttr.set(context, staged)
        report["staged"] = PointAttr.get(context).x  # a handler reads its own write
        report["staged_same_object"] = PointAttr.get(context) is staged
        BoxAttr.set(context, Box(items=["b"]))
        report["mutable_copied"] = BoxAttr.get(context).items  # decoded: not the object set
        return dex.go_to(ReadsRewrite, json.dumps(report))


class ReadsRewrite(Step[str]):
    def execute(self, context: Context, input: str) -> StepDecision:
        report = json.loads(input)
        point = PointAttr.get(context)
        report["after_rewrite"] = [point.x, list(point.tags)]
        PointAttr.delete(context)
        return dex.go_to(ReadsDeleted, json.dumps(report))


class ReadsDeleted(Step[str]):
    def execute(self, context: Context, input: str) -> StepDecision:
        report = json.loads(input)
        report["deleted"] = PointAttr.get(context) is None
        report["remote_point"] = RemotePointAttr.get(context).x
        return dex.force_complete(report)


class DecodedFlow(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(Writes()).other_steps(
            ReadsRemotely(),
            ReadsTwice(),
            Rewrites(),
            ReadsRewrite(),
            ReadsDeleted(),
        )

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(PointAttr, ItemsAttr, BoxAttr, RemotePointAttr)
