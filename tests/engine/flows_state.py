"""Flows for the state tests: Attributes, AttributeMaps, Channels, Streams, heartbeats."""

from __future__ import annotations

import json
import uuid
from collections.abc import Generator
from typing import Any, TypeVar

import dex
from dex import (
    AsyncContext,
    Attribute,
    AttributeMap,
    AttributeMapNotLoadedError,
    Channel,
    ChannelMap,
    ChannelMessagesNotLoadedError,
    Context,
    Flow,
    PersistenceSchema,
    RPCResult,
    Step,
    StepDecision,
    StepList,
    StepOptions,
    StepOutput,
    Stream,
    Wait,
    rpc,
)

from dex_agents_ray.testing import FileGate
from tests.engine.flows_steps import quick_retry

_Input = TypeVar("_Input")

Count = Attribute("count", int)
Label = Attribute("label", str)
Notes = AttributeMap("notes", str)
Inbox = Channel("inbox", str)
Boxes = ChannelMap("boxes", str)
Trigger = Channel("trigger", str)
Events = Stream("events", str, stream_capacity_bytes=1 << 20)
SMALL_CAPACITY = 40
Small = Stream("small", str, stream_capacity_bytes=SMALL_CAPACITY)


def _dump(report: dict[str, Any]) -> str:
    """Step inputs carry reports as JSON text (the SDK has no codec for ``Any``)."""
    return json.dumps(report)


def _try(read: Any) -> Any:
    try:
        return read()
    except (AttributeMapNotLoadedError, ChannelMessagesNotLoadedError) as error:
        return type(error).__name__


# -- Attributes -----------------------------------------------------------------------


class SetsAttributes(Step[str]):
    def execute(self, context: Context, input: str) -> StepDecision:
        before = [Count.get(context), Label.get(context)]
        Count.set(context, 5)
        Label.set(context, input)
        staged = [Count.get(context), Label.get(context)]
        return dex.go_to(DeletesAttributes, _dump({"before": before, "staged": staged}))


class DeletesAttributes(Step[str]):
    def execute(self, context: Context, input: str) -> StepDecision:
        committed = [Count.get(context), Label.get(context)]
        Count.delete(context)
        Label.delete(context)
        return dex.go_to(ReadsAttributes, _dump({**json.loads(input), "committed": committed}))


class ReadsAttributes(Step[str]):
    def execute(self, context: Context, input: str) -> StepDecision:
        deleted = [Count.get(context), Label.get(context)]
        return dex.force_complete({**json.loads(input), "deleted": deleted})


class AttributeFlow(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(SetsAttributes()).other_steps(
            DeletesAttributes(), ReadsAttributes()
        )

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(Count, Label)


# -- AttributeMaps --------------------------------------------------------------------


class FillsNotes(Step[str]):
    def execute(self, context: Context, input: str) -> StepDecision:
        for instance in ("a", "b", "a b"):
            Notes.set(context, instance, instance.upper())
        return dex.go_to(LoadsNothing, "{}")


class LoadsNothing(Step[str]):
    def execute(self, context: Context, input: str) -> StepDecision:
        report = {**json.loads(input), "nothing": _try(lambda: Notes.get(context, "a"))}
        return dex.go_to(LoadsOne, _dump(report))


class LoadsOne(Step[str]):
    def get_step_options(self) -> StepOptions:
        return StepOptions(execute_load_attribute_map_instances=(Notes.load("a b"),))

    def execute(self, context: Context, input: str) -> StepDecision:
        report = {
            **json.loads(input),
            "one": Notes.get(context, "a b"),
            "other": _try(lambda: Notes.get(context, "a")),
            "one_keys": _try(lambda: Notes.get_all_instance_keys(context)),
        }
        return dex.go_to(LoadsAll, _dump(report))


class LoadsAll(Step[str]):
    def get_step_options(self) -> StepOptions:
        return StepOptions(execute_load_attribute_maps=(Notes,))

    def execute(self, context: Context, input: str) -> StepDecision:
        keys = list(Notes.get_all_instance_keys(context))
        previous = json.loads(input)
        if "after_delete" in previous:
            return dex.force_complete({**previous, "after_delete": keys})
        report = {
            **previous,
            "all": {k: Notes.get(context, k) for k in keys},
            "size": Notes.get_map_size(context),
        }
        Notes.delete(context, "b")
        report["staged_keys"] = list(Notes.get_all_instance_keys(context))
        return dex.go_to(LoadsAll, _dump({**report, "after_delete": None}))


class AttributeMapFlow(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(FillsNotes()).other_steps(LoadsNothing(), LoadsOne(), LoadsAll())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(Notes)


# -- Channels and ChannelMaps ---------------------------------------------------------


def _is_uuid7(text: str) -> bool:
    return uuid.UUID(text).version == 7


class PublishesMessages(Step[str]):
    def execute(self, context: Context, input: str) -> StepDecision:
        for value in ("m1", "m2", "m3"):
            Inbox.publish(context, value)
        Boxes.publish(context, "k", "k1")
        Boxes.publish(context, "k", "k2")
        Boxes.publish(context, "other", "o1")
        return dex.go_to(EditsMessages, "{}")


class EditsMessages(Step[str]):
    def get_step_options(self) -> StepOptions:
        return StepOptions(
            execute_load_channels=(Inbox,),
            execute_load_channel_map_instances=(Boxes.load_messages("k"),),
        )

    def execute(self, context: Context, input: str) -> StepDecision:
        pending = Inbox.pending_messages(context)
        ids = [m.message_id for m in pending]
        second = Inbox.find_pending_message(context, ids[1])
        Inbox.delete(context, ids[1])
        Inbox.publish(context, "m4")
        boxed = Boxes.pending_messages(context, "k")
        Boxes.delete(context, "k", boxed[0].message_id)
        report = {
            "values": [m.value for m in pending],
            "ids": ids,
            "uuid7": all(_is_uuid7(i) for i in ids),
            "found": None if second is None else second.value,
            "size_after_edits": Inbox.size(context),
            "boxed": [m.value for m in boxed],
            "other_box": _try(lambda: Boxes.pending_messages(context, "other")),
            "box_keys": list(Boxes.get_all_instance_keys(context)),
            "box_count": Boxes.get_map_size(context),
        }
        return dex.go_to(ReadsMessages, _dump(report))


class ReadsMessages(Step[str]):
    def get_step_options(self) -> StepOptions:
        return StepOptions(execute_load_channels=(Inbox,), execute_load_channel_maps=(Boxes,))

    def execute(self, context: Context, input: str) -> StepDecision:
        pending = Inbox.pending_messages(context)
        report = {
            **json.loads(input),
            "after": [[m.message_id, m.value] for m in pending],
            "boxes_after": {
                key: [m.value for m in Boxes.pending_messages(context, key)]
                for key in Boxes.get_all_instance_keys(context)
            },
        }
        return dex.force_complete(report)


class ChannelFlow(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(PublishesMessages()).other_steps(
            EditsMessages(), ReadsMessages()
        )

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(Inbox, Boxes)


# -- Streams --------------------------------------------------------------------------


class WritesFromGenerator(Step[int]):
    def execute(self, context: Context, input: int) -> Generator[StepOutput, None, StepDecision]:
        for i in range(input):
            yield Events.write(context, f"g{i}")
        return dex.go_to(WaitsForTrigger, "late")


class WaitsForTrigger(Step[str]):
    def wait_for(self, context: Context, input: str) -> Wait:
        return Wait.until(Trigger.for_one())

    async def execute(self, context: AsyncContext, input: str) -> StepDecision:
        Events.write(context, input)
        return dex.graceful_complete(input)


class FillsSmallStream(Step[int]):
    async def execute(self, context: AsyncContext, input: int) -> StepDecision:
        for i in range(input):
            Small.write(context, f"s-{i:08d}")
        return dex.dead_end()


class _TriggeredEvents(Flow[_Input]):
    """Writes ``Events``; its ``trigger`` RPC publishes to ``Trigger``."""

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(Events, Trigger)

    @rpc
    def trigger(self, context: Context) -> RPCResult[str]:
        Trigger.publish(context, "go")
        return RPCResult("triggered")


class StreamFlow(_TriggeredEvents[int]):
    def get_steps(self) -> StepList[int]:
        return StepList.start_step(WritesFromGenerator()).other_steps(WaitsForTrigger())


class WritesFirst(Step[str]):
    def wait_for(self, context: Context, input: str) -> Wait:
        return Wait.until(Trigger.for_one())

    async def execute(self, context: AsyncContext, input: str) -> StepDecision:
        Events.write(context, "first")
        return dex.go_to(WritesSecond, input)


class WritesSecond(Step[str]):
    """Writes once the test opens the gate ``second`` under ``input`` (a directory)."""

    async def execute(self, context: AsyncContext, input: str) -> StepDecision:
        await FileGate(input, "second").wait_for_release()
        Events.write(context, "second")
        return dex.go_to(WaitsForTrigger, "late")


class BurstFlow(_TriggeredEvents[str]):
    """Two Stream writes in two Steps' commits (the second behind a gate), then a
    wait: the run settles. The input is the gate's directory."""

    def get_steps(self) -> StepList[str]:
        return StepList.start_step(WritesFirst()).other_steps(WritesSecond(), WaitsForTrigger())


class SmallStreamFlow(Flow[int]):
    def get_steps(self) -> StepList[int]:
        return StepList.start_step(FillsSmallStream())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(Small)


# -- heartbeat checkpoints ------------------------------------------------------------


class Checkpointed(Step[str]):
    """Attempt 1 checkpoints 10 then 20 and fails; attempt 2 reads the checkpoint."""

    def get_step_options(self) -> StepOptions:
        return StepOptions(execute_retry=quick_retry(2))

    def execute(self, context: Context, input: str) -> Generator[StepOutput, None, StepDecision]:
        seen = {
            "attempt": context.attempt,
            "has": context.has_last_heartbeat_value(),
            "value": context.get_last_heartbeat_value(int),
        }
        if context.attempt == 1:
            yield dex.heartbeat(10)
            yield dex.heartbeat(20)
            raise RuntimeError(f"attempt 1 saw {seen}")
        return dex.force_complete(seen)


class CheckpointFlow(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(Checkpointed())
