"""A plain engine Flow behind the persisted-store fixture, stored by value.

A Flow defined in a script (``__main__``) is pickled by value: the store holds
its code, and that code names what it uses from the package by the module path
it had when the run started. ``generate.py`` stores this module's Flow the same
way (``cloudpickle.register_pickle_by_value``), so the fixture's definition
names ``taken_channel_messages`` by its module path from before the engine's
sub-packages (``dex_agents_ray.engine._invoke``): loading it needs that path.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import dex
from dex import (
    Channel,
    Context,
    Flow,
    PersistenceSchema,
    RPCResult,
    Step,
    StepList,
    Timer,
    Wait,
    rpc,
)

from dex_agents_ray.engine import taken_channel_messages

Notes = Channel("notes", str)

REMINDER_DAYS = 36_500
"""The fixture's timer: a century, so that it is never due by the wall clock (a
test moves the engine's clock past it)."""
REMINDER_TEXT = "renew the plan"


@dataclass(frozen=True)
class Reminder:
    """When the reminder is due (in days from its start), and what it says."""

    days: int
    text: str


class ArmReminder(Step[Reminder]):
    def execute(self, context: Context, input: Reminder) -> dex.StepDecision:
        return dex.go_to(RemindWhenDue, input)


class RemindWhenDue(Step[Reminder]):
    def wait_for(self, context: Context, input: Reminder) -> Wait:
        return Wait.until(Timer.by_duration(timedelta(days=input.days)))

    def execute(self, context: Context, input: Reminder) -> dex.StepDecision:
        return dex.force_complete(f"{input.text} (timer fired: {context.has_timer_fired(0)})")


class ReminderFlow(Flow[Reminder]):
    """Waits on a durable timer of days; notes can be added while it waits."""

    def get_steps(self) -> StepList[Reminder]:
        return StepList.start_step(ArmReminder()).other_steps(RemindWhenDue())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(Notes)

    @rpc
    def add_note(self, context: Context, text: str) -> RPCResult[bool]:
        Notes.publish(context, text)
        return RPCResult(True)

    @rpc(load_channels=(Notes,))
    def notes(self, context: Context) -> RPCResult[list[str]]:
        taken = taken_channel_messages(context, Notes)
        return RPCResult([m.value for m in (*taken, *Notes.pending_messages(context))])
