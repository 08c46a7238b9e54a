"""A flow with RPCs that read, write, lock, delete transactionally and move Steps."""

from __future__ import annotations

from dataclasses import dataclass

import dex
from dex import (
    AsyncContext,
    Attribute,
    AttributeMap,
    AttributeMapNotLoadedError,
    Channel,
    Context,
    Flow,
    PersistenceSchema,
    RPCResult,
    Step,
    StepDecision,
    StepList,
    StepMovement,
    StepOptions,
    Wait,
    rpc,
)

from dex_agents_ray.testing import FileGate

Counter = Attribute("counter", int)
Status = Attribute("status", str)
Notes = AttributeMap("notes", str)
Inbox = Channel("inbox", str)
Outbox = Channel("outbox", str)
Release = Channel("release", str)


@dataclass(frozen=True)
class Gate:
    state_dir: str
    name: str


@dataclass(frozen=True)
class Note:
    key: str
    value: str


class Start(Step[Gate]):
    """``name`` empty: park; otherwise hold the Counter lock at that gate first."""

    def execute(self, context: Context, input: Gate) -> StepDecision:
        if input.name:
            return dex.go_to(Holder, input)
        return dex.go_to(Parked, "p")


class Holder(Step[Gate]):
    def get_step_options(self) -> StepOptions:
        return StepOptions(execute_lock_attributes=(Counter.lock(),))

    async def execute(self, context: AsyncContext, input: Gate) -> StepDecision:
        await FileGate(input.state_dir, input.name).wait_for_release()
        Counter.set(context, Counter.get(context) + 100)
        return dex.go_to(Parked, "after-hold")


class Parked(Step[str]):
    def wait_for(self, context: Context, input: str) -> Wait:
        return Wait.until(Release.for_one())

    def execute(self, context: Context, input: str) -> StepDecision:
        return dex.graceful_complete(f"parked:{input}")


class Finisher(Step[str]):
    def execute(self, context: Context, input: str) -> StepDecision:
        return dex.force_complete(f"finished:{input}:{context.from_step_execution_id}")


def _take(context: Context, ids: list[str], status: str) -> RPCResult[int]:
    Status.set(context, status)
    Outbox.publish(context, status)
    for message_id in ids:
        Inbox.delete(context, message_id)
    return RPCResult(Inbox.size(context))


class RpcFlow(Flow[Gate]):
    def get_steps(self) -> StepList[Gate]:
        return StepList.start_step(Start()).other_steps(Holder(), Parked(), Finisher())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(Counter, Status, Notes, Inbox, Outbox, Release)

    # -- reads and writes --------------------------------------------------------------

    @rpc
    def counter(self, context: Context) -> RPCResult[int]:
        return RPCResult(Counter.get(context))

    @rpc
    def add(self, context: Context, amount: int) -> RPCResult[int]:
        Counter.set(context, Counter.get(context) + amount)
        return RPCResult(Counter.get(context))

    @rpc
    def state(self, context: Context) -> RPCResult[list[str]]:
        return RPCResult([Status.get(context) or "<unset>", str(Outbox.size(context))])

    # -- locks -------------------------------------------------------------------------

    @rpc(lock_attributes=(Counter.lock(),))
    def locked_add(self, context: Context, amount: int) -> RPCResult[int]:
        Counter.set(context, Counter.get(context) + amount)
        return RPCResult(Counter.get(context))

    @rpc(lock_attributes=(Counter.lock(),))
    async def slow_locked_add(self, context: Context, gate: Gate) -> RPCResult[int]:
        await FileGate(gate.state_dir, gate.name).wait_for_release()
        Counter.set(context, Counter.get(context) + 1000)
        return RPCResult(Counter.get(context))

    # -- channels, transactions --------------------------------------------------------

    @rpc
    def fill(self, context: Context, count: int) -> RPCResult[int]:
        for i in range(count):
            Inbox.publish(context, f"m{i}")
        return RPCResult(count)

    @rpc(load_channels=(Inbox,))
    def inbox_ids(self, context: Context) -> RPCResult[list[str]]:
        return RPCResult([m.message_id for m in Inbox.pending_messages(context)])

    @rpc(is_transactional=True, load_channels=(Inbox,))
    def take(self, context: Context, ids: list[str]) -> RPCResult[int]:
        return _take(context, ids, "took")

    @rpc(load_channels=(Inbox,))
    def take_loosely(self, context: Context, ids: list[str]) -> RPCResult[int]:
        return _take(context, ids, "took loosely")

    # -- load options ------------------------------------------------------------------

    @rpc
    def set_note(self, context: Context, note: Note) -> RPCResult[str]:
        Notes.set(context, note.key, note.value)
        return RPCResult(note.key)

    @rpc(load_attribute_maps=(Notes,))
    def all_notes(self, context: Context) -> RPCResult[list[str]]:
        keys = Notes.get_all_instance_keys(context)
        return RPCResult([f"{k}={Notes.get(context, k)}" for k in keys])

    @rpc
    def note(self, context: Context, key: str) -> RPCResult[str]:
        try:
            return RPCResult(Notes.get(context, key))
        except AttributeMapNotLoadedError as error:
            return RPCResult(type(error).__name__)

    @rpc
    def explode(self, context: Context, amount: int) -> RPCResult[int]:
        Counter.set(context, amount)
        raise RuntimeError("the handler failed after a write")

    # -- moving Steps ------------------------------------------------------------------

    @rpc
    def redirect(self, context: Context, target: str) -> RPCResult[str]:
        return RPCResult(
            "redirected", next_steps=(StepMovement.of(Finisher, target),)
        ).with_canceling_steps(Parked)
