"""Small flows that exercise the engine's constructs."""

from __future__ import annotations

from dataclasses import dataclass

import dex
from dex import (
    AsyncContext,
    Attribute,
    Channel,
    Context,
    Flow,
    PersistenceSchema,
    RPCResult,
    Step,
    StepList,
    StepMovement,
    Wait,
    rpc,
)

Total = Attribute("total", int)
Inbox = Channel("inbox", str)
Received = Attribute("received", str)


@dataclass(frozen=True)
class FanInput:
    state_dir: str
    count: int


class Fan(Step[FanInput]):
    async def execute(self, context: AsyncContext, input: FanInput) -> dex.StepDecision:
        return dex.go_to_many(
            *(StepMovement.of(Add, i + 1) for i in range(input.count)),
            StepMovement.of(Collect, input.count),
        )


class Add(Step[int]):
    async def execute(self, context: AsyncContext, input: int) -> dex.StepDecision:
        Inbox.publish(context, f"part-{input}")
        return dex.dead_end()


class Collect(Step[int]):
    def wait_for(self, context: Context, input: int) -> Wait:
        return Wait.until(Inbox.for_n(input))

    def execute(self, context: Context, input: int) -> dex.StepDecision:
        parts = sorted(Inbox.results(context))
        Received.set(context, ",".join(parts))
        return dex.graceful_complete(parts)


class FanFlow(Flow[FanInput]):
    def get_steps(self) -> StepList[FanInput]:
        return StepList.start_step(Fan()).other_steps(Add(), Collect())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(Total, Inbox, Received)

    @rpc
    def read(self, context: Context) -> RPCResult[str]:
        return RPCResult(Received.get(context) or "")
