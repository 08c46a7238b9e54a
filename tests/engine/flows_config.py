"""A Flow for the flow-config, attribute-read and taken-message tests: a Step
without ``wait_for`` that holds at a gate, then one that waits on a Channel (and
may hold at a gate in ``execute``), Attributes to read, and an RPC that shows
what the Channel holds, taken messages included."""

from __future__ import annotations

from dataclasses import dataclass

import dex
from dex import (
    AsyncContext,
    Attribute,
    AttributeMap,
    Channel,
    Context,
    Flow,
    PersistenceSchema,
    RPCResult,
    Step,
    StepDecision,
    StepList,
    StepOptions,
    Wait,
    rpc,
)

from dex_agents_ray.engine import taken_channel_messages
from dex_agents_ray.testing import FileGate

Stage = Attribute("stage", str)
Notes = AttributeMap("notes", int)
Never = Attribute("never", str)
Go = Channel("go", str)


@dataclass(frozen=True)
class Task:
    state_dir: str
    gate: str = "work"
    hold_gate: str = ""
    """Hold's ``execute`` waits at this gate first (``""``: it does not)."""


@dataclass(frozen=True)
class Inbox:
    taken: list[str]
    taken_ids: list[str]
    pending: list[str]
    pending_ids: list[str]


class Work(Step[Task]):
    """No ``wait_for``: active while it holds at its gate."""

    def get_step_options(self) -> StepOptions:
        return StepOptions(execute_load_attribute_maps=(Notes,))

    async def execute(self, context: AsyncContext, input: Task) -> StepDecision:  # type: ignore[override]
        Stage.set(context, "working")
        await FileGate(input.state_dir, input.gate).wait_for_release()
        Stage.set(context, "holding")
        Notes.set(context, "a b", 1)
        Notes.set(context, "c", 2)
        return dex.go_to(Hold, input)


class Hold(Step[Task]):
    """Waits on ``Go``: active with a ``wait_for``."""

    def wait_for(self, context: Context, input: Task) -> Wait:
        return Wait.until(Go.for_one())

    def execute(self, context: Context, input: Task) -> StepDecision:
        if input.hold_gate:  # a synchronous handler: it blocks a thread, not the host
            FileGate(input.state_dir, input.hold_gate).wait_for_release_sync()
        Stage.set(context, "done")
        return dex.force_complete(Go.results(context)[0])


class ConfigFlow(Flow[Task]):
    def get_steps(self) -> StepList[Task]:
        return StepList.start_step(Work()).other_steps(Hold())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(Stage, Notes, Never, Go)

    @rpc
    def go(self, context: Context) -> RPCResult[str]:
        Go.publish(context, "go")
        return RPCResult("going")

    @rpc
    def push(self, context: Context, value: str) -> RPCResult[str]:
        Go.publish(context, value)
        return RPCResult(value)

    @rpc(load_channels=(Go,))
    def inbox(self, context: Context) -> RPCResult[Inbox]:
        taken = taken_channel_messages(context, Go)
        pending = Go.pending_messages(context)
        return RPCResult(
            Inbox(
                taken=[m.value for m in taken],
                taken_ids=[m.message_id for m in taken],
                pending=[m.value for m in pending],
                pending_ids=[m.message_id for m in pending],
            )
        )

    @rpc
    def inbox_unloaded(self, context: Context) -> RPCResult[int]:
        return RPCResult(len(taken_channel_messages(context, Go)))
