"""Flows for the client tests: indexed Attributes, initial values, a waiting Step."""

from __future__ import annotations

from dataclasses import dataclass

import dex
from dex import (
    Attribute,
    AttributeIndex,
    AttributeMap,
    Channel,
    Context,
    Flow,
    IndexType,
    PersistenceSchema,
    RPCResult,
    Step,
    StepDecision,
    StepList,
    StepOptions,
    Wait,
    rpc,
)

Owner = Attribute("owner", str, index=AttributeIndex(IndexType.KEYWORD))
Priority = Attribute("priority", int, index=AttributeIndex(IndexType.INT))
Tags = AttributeMap("tags", str)
Release = Channel("release", str)
Nudge = Channel("nudge", str)


@dataclass(frozen=True)
class Job:
    owner: str = ""
    priority: int = 0
    finish: bool = False
    """Complete at once, reporting the Attributes the run started with."""


class Intake(Step[Job]):
    def get_step_options(self) -> StepOptions:
        return StepOptions(execute_load_attribute_maps=(Tags,))

    def execute(self, context: Context, input: Job) -> StepDecision:
        if input.finish:
            tags = {key: Tags.get(context, key) for key in Tags.get_all_instance_keys(context)}
            return dex.force_complete({"owner": Owner.get(context), "tags": tags})
        if input.owner:
            Owner.set(context, input.owner)
            Priority.set(context, input.priority)
        return dex.go_to(Hold, input)


class Hold(Step[Job]):
    def wait_for(self, context: Context, input: Job) -> Wait:
        return Wait.until(Release.for_one())

    def execute(self, context: Context, input: Job) -> StepDecision:
        return dex.force_complete({"owner": Owner.get(context), "tags": {}})


class ClientFlow(Flow[Job]):
    def get_steps(self) -> StepList[Job]:
        return StepList.start_step(Intake()).other_steps(Hold())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(Owner, Priority, Tags, Release)

    @rpc
    def release(self, context: Context) -> RPCResult[str]:
        Release.publish(context, "go")
        return RPCResult("released")

    @rpc
    def set_owner(self, context: Context, owner: str) -> RPCResult[str]:
        Owner.set(context, owner)
        return RPCResult(owner)


class Idle(Step[str]):
    def wait_for(self, context: Context, input: str) -> Wait:
        return Wait.until(Nudge.for_one())

    def execute(self, context: Context, input: str) -> StepDecision:
        return dex.force_complete(input)


class OtherFlow(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(Idle())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(Nudge)

    @rpc
    def nudge(self, context: Context) -> RPCResult[str]:
        Nudge.publish(context, "go")
        return RPCResult("nudged")
