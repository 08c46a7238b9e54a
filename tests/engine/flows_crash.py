"""Flows for crash tests: each records real invocations and stops at gates."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import dex
from dex import (
    AsyncContext,
    Attribute,
    Channel,
    Context,
    Flow,
    PersistenceSchema,
    RetryPolicy,
    RPCResult,
    Step,
    StepList,
    StepMovement,
    StepOptions,
    Timer,
    Wait,
    rpc,
)

from dex_agents_ray.engine import RayTaskOptions, RemoteStepOptions
from dex_agents_ray.testing import FileGate, InvocationLog


@dataclass(frozen=True)
class Job:
    state_dir: str
    attempts: int = 3
    remote: bool = False
    env: dict[str, str] | None = None


Written = Attribute("written", str)
Outcome = Attribute("outcome", str)
WorkerPid = Attribute("worker_pid", int)
Log = Channel("log", str)
Wake = Channel("wake", str)


def _log(context: Context, job: Job, name: str) -> InvocationLog:
    return InvocationLog(os.path.join(job.state_dir, f"{name}.log"))


class Begin(Step[Job]):
    async def execute(self, context: AsyncContext, input: Job) -> dex.StepDecision:
        options = StepOptions(
            execute_retry=RetryPolicy(
                initial_interval=timedelta(seconds=1),
                backoff_coefficient=1.0,
                maximum_attempts=input.attempts,
            )
        ).on_execute_failure_proceed_to(Recover)
        if input.remote:
            options = RemoteStepOptions(
                execute_retry=options.execute_retry,
                ray=RayTaskOptions(
                    num_cpus=0.5,
                    runtime_env=None if input.env is None else {"env_vars": input.env},
                ),
            ).on_execute_failure_proceed_to(Recover)
        return dex.go_to_many(StepMovement.of(Work, input, options=options))


class Work(Step[Job]):
    """Writes, publishes, records its invocation, then waits at gate ``work-<attempt>``."""

    async def execute(self, context: AsyncContext, input: Job) -> dex.StepDecision:
        Written.set(context, f"attempt-{context.attempt}")
        Log.publish(context, f"attempt-{context.attempt}")
        WorkerPid.set(context, os.getpid())
        _log(context, input, "work").record(f"{context.step_execution_id}/{context.attempt}")
        _log(context, input, "first").record(context.first_attempt_at.isoformat())
        await FileGate(input.state_dir, f"work-{context.attempt}").wait_for_release()
        return dex.go_to(Finish, input)


class Recover(Step[Job]):
    async def execute(self, context: AsyncContext, input: Job) -> dex.StepDecision:
        error = context.recovery_error
        assert error is not None
        progress = getattr(error, "attempt_progress", "missing")
        Outcome.set(context, f"recovered:{progress}:{error.error_type}")
        return dex.force_complete(f"recovered:{progress}")


class Finish(Step[Job]):
    def wait_for(self, context: Context, input: Job) -> Wait:
        return Wait.until(Log.at_least(1))

    async def execute(self, context: AsyncContext, input: Job) -> dex.StepDecision:
        seen = list(Log.results(context))
        Outcome.set(context, "finished")
        return dex.force_complete(seen)


class CrashFlow(Flow[Job]):
    def get_steps(self) -> StepList[Job]:
        return StepList.start_step(Begin()).other_steps(Work(), Recover(), Finish())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(Written, Outcome, WorkerPid, Log, Wake)

    @rpc
    def snapshot(self, context: Context) -> RPCResult[str]:
        return RPCResult(f"{Written.get(context)}|{Outcome.get(context)}")


@dataclass(frozen=True)
class TimerJob:
    seconds: int


@dataclass(frozen=True)
class SlowWake:
    state_dir: str
    text: str


class StartTimer(Step[TimerJob]):
    def execute(self, context: Context, input: TimerJob) -> dex.StepDecision:
        return dex.go_to(AwaitTimer, input)


class AwaitTimer(Step[TimerJob]):
    def wait_for(self, context: Context, input: TimerJob) -> Wait:
        return Wait.any_of(Timer.by_duration(timedelta(seconds=input.seconds)), Wake.for_one())

    def execute(self, context: Context, input: TimerJob) -> dex.StepDecision:
        woke = list(Wake.results(context))
        return dex.force_complete({"timer_fired": context.has_timer_fired(0), "woke": woke})


class TimerFlow(Flow[TimerJob]):
    def get_steps(self) -> StepList[TimerJob]:
        return StepList.start_step(StartTimer()).other_steps(AwaitTimer())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(Wake)

    @rpc
    def wake(self, context: Context, text: str) -> RPCResult[bool]:
        Wake.publish(context, text)
        return RPCResult(True)

    @rpc
    async def slow_wake(self, context: Context, request: SlowWake) -> RPCResult[bool]:
        """``wake``, after waiting at gate ``slow-wake`` (an RPC still in progress)."""
        await FileGate(request.state_dir, "slow-wake").wait_for_release()
        Wake.publish(context, request.text)
        return RPCResult(True)
