"""Flows for the executor-pool tests: a fan-out of remote Steps and a join."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from datetime import timedelta

import dex
from dex import (
    AsyncContext,
    Channel,
    Context,
    Flow,
    PersistenceSchema,
    RetryPolicy,
    Step,
    StepList,
    StepMovement,
    Wait,
)

from dex_agents_ray.engine import RayTaskOptions, RemoteExecution, RemoteStepOptions
from dex_agents_ray.testing import FileGate, InvocationLog


@dataclass(frozen=True)
class Fan:
    """``count`` remote calls of one shape; each sleeps, or waits at a gate."""

    state_dir: str
    count: int
    concurrency: int | None = None
    sleep_seconds: float = 0.0
    timeout_seconds: int = 60
    gate: str | None = None
    gated: tuple[int, ...] | None = None
    """Which calls wait at the gate; ``None``: all of them."""
    task: bool = False
    resources: dict[str, float] = field(default_factory=dict)
    in_thread: bool = False
    """Gated calls wait in a thread (``asyncio.to_thread``), as a sync tool runs."""
    attempts: int = 1
    """Each call's attempts: more than one, and every attempt but the last starts
    early (its start is recorded at dispatch)."""


@dataclass(frozen=True)
class CallInput:
    fan: Fan
    index: int


Results = Channel("results", str)


class FanOut(Step[Fan]):
    async def execute(self, context: AsyncContext, input: Fan) -> dex.StepDecision:  # type: ignore[override]
        options = RemoteStepOptions(
            execute_method_timeout=timedelta(seconds=input.timeout_seconds),
            execute_retry=RetryPolicy(maximum_attempts=input.attempts),
            ray=RayTaskOptions(
                num_cpus=0.1,
                max_concurrency=input.concurrency,
                resources=dict(input.resources),
                execution=RemoteExecution.TASK if input.task else RemoteExecution.POOL,
            ),
        ).on_execute_failure_proceed_to(Failed)
        return dex.go_to_many(
            *(
                StepMovement.of(RemoteCall, CallInput(input, i), options=options)
                for i in range(input.count)
            ),
            StepMovement.of(Join, input),
        )


class RemoteCall(Step[CallInput]):
    async def execute(self, context: AsyncContext, input: CallInput) -> dex.StepDecision:  # type: ignore[override]
        fan = input.fan
        InvocationLog(os.path.join(fan.state_dir, "calls.log")).record(
            f"{input.index}/{context.attempt}"
        )
        if fan.gate is not None and (fan.gated is None or input.index in fan.gated):
            gate = FileGate(fan.state_dir, f"{fan.gate}-{input.index}")
            if fan.in_thread:
                await asyncio.to_thread(gate.wait_for_release_sync)
            else:
                await gate.wait_for_release()
        elif fan.sleep_seconds:
            await asyncio.sleep(fan.sleep_seconds)
        import ray

        node = ray.get_runtime_context().get_node_id()
        Results.publish(context, f"{input.index}:{os.getpid()}:{node}")
        return dex.dead_end()


class Failed(Step[CallInput]):
    async def execute(self, context: AsyncContext, input: CallInput) -> dex.StepDecision:  # type: ignore[override]
        error = context.recovery_error
        assert error is not None
        Results.publish(context, f"{input.index}:failed:{error.error_type}")
        return dex.dead_end()


class Join(Step[Fan]):
    def wait_for(self, context: Context, input: Fan) -> Wait:
        return Wait.until(Results.for_n(input.count))

    def execute(self, context: Context, input: Fan) -> dex.StepDecision:
        return dex.force_complete(sorted(Results.results(context)))


class FanFlow(Flow[Fan]):
    def get_steps(self) -> StepList[Fan]:
        return StepList.start_step(FanOut()).other_steps(RemoteCall(), Failed(), Join())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(Results)
