"""A Step that creates a waiting Step, for the waits evaluated inside the creating
commit (``engine/run/_fusion.py``).

``Decide`` writes the ``mode`` Attribute and moves to the waiter its input names.
Every waiter logs each ``wait_for`` evaluation that reaches its end (with the
``mode`` it read), waits for a message on ``go``, then completes with ``mode``.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from datetime import timedelta

import dex
from dex import (
    AsyncContext,
    Attribute,
    Channel,
    Flow,
    PersistenceSchema,
    RetryPolicy,
    RPCResult,
    Step,
    StepList,
    StepOptions,
    Wait,
    rpc,
)

from dex_agents_ray.engine import effect_free
from dex_agents_ray.testing import InvocationLog

Mode = Attribute("mode", str)
Go = Channel("go", str)


@dataclass(frozen=True)
class Fuse:
    state_dir: str
    waiter: str
    """``quick``, ``suspends``, ``raises``, ``streams`` or ``plain``."""


def _log(state_dir: str) -> InvocationLog:
    return InvocationLog(os.path.join(state_dir, "waits.log"))


class Decide(Step[Fuse]):
    async def execute(self, context: AsyncContext, input: Fuse) -> dex.StepDecision:
        Mode.set(context, f"written-with-{input.waiter}")
        options = StepOptions(
            wait_for_retry=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=2)
        )
        return dex.go_to_many(dex.StepMovement.of(WAITERS[input.waiter], input, options=options))


class _Waiter(Step[Fuse]):
    async def wait_for(self, context: AsyncContext, input: Fuse) -> Wait:  # type: ignore[override]
        _log(input.state_dir).record(f"{type(self).__name__}/{Mode.get(context)}")
        return Wait.until(Go.for_one())

    async def execute(self, context: AsyncContext, input: Fuse) -> dex.StepDecision:
        return dex.force_complete(Mode.get(context) or "")


@effect_free
class QuickWaiter(_Waiter):
    """Returns its condition without awaiting: fused."""


@effect_free
class SuspendingWaiter(_Waiter):
    """Awaits before it returns: evaluated by its own task."""

    async def wait_for(self, context: AsyncContext, input: Fuse) -> Wait:  # type: ignore[override]
        await asyncio.sleep(0)
        return await super().wait_for(context, input)


@effect_free
class RaisingWaiter(_Waiter):
    """Raises every time: each of its own attempts fails, and the run with them."""

    async def wait_for(self, context: AsyncContext, input: Fuse) -> Wait:  # type: ignore[override]
        _log(input.state_dir).record("RaisingWaiter/raised")
        raise ValueError("no condition")


@effect_free
class StreamingWaiter(_Waiter):
    """Writes to a Stream as it evaluates: evaluated by its own task."""

    async def wait_for(self, context: AsyncContext, input: Fuse) -> Wait:  # type: ignore[override]
        Progress.write(context, "waiting")
        return await super().wait_for(context, input)


class PlainWaiter(_Waiter):
    """Not marked effect-free: evaluated by its own task."""


Progress = dex.Stream("progress", str, stream_capacity_bytes=1024)

WAITERS: dict[str, type[_Waiter]] = {
    "quick": QuickWaiter,
    "suspends": SuspendingWaiter,
    "raises": RaisingWaiter,
    "streams": StreamingWaiter,
    "plain": PlainWaiter,
}


class FusionFlow(Flow[Fuse]):
    def get_steps(self) -> StepList[Fuse]:
        return StepList.start_step(Decide()).other_steps(*(cls() for cls in WAITERS.values()))

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(Mode, Go, Progress)

    @rpc
    def go(self, context: dex.Context) -> RPCResult[str]:
        Go.publish(context, "go")
        return RPCResult("sent")
