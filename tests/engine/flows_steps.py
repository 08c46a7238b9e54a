"""Flows for the Step construct tests: handler forms, options, retries, failure routes."""

from __future__ import annotations

import time
from collections.abc import Generator
from dataclasses import dataclass
from datetime import timedelta

import dex
from dex import (
    AsyncContext,
    Channel,
    Context,
    Flow,
    PersistenceSchema,
    RetryPolicy,
    RPCResult,
    Step,
    StepDecision,
    StepList,
    StepMovement,
    StepOptions,
    StepOutput,
    Wait,
    WaitForFailurePolicy,
    rpc,
)

from dex_agents_ray.engine import EngineRecoveryErrorInfo
from dex_agents_ray.testing import FileGate, InvocationLog

ONE_SECOND = timedelta(seconds=1)


def quick_retry(attempts: int) -> RetryPolicy:
    """Whole-second retries, 1 s apart, at most ``attempts`` attempts in all."""
    return RetryPolicy(
        initial_interval=ONE_SECOND, backoff_coefficient=1.0, maximum_attempts=attempts
    )


# -- handler forms and step-execution locals ------------------------------------------


class SyncForm(Step[list[str]]):
    def wait_for(self, context: Context, input: list[str]) -> Wait:
        context.set_step_execution_local("seen", "sync-wait")
        return Wait.skip_immediately()

    def execute(self, context: Context, input: list[str]) -> StepDecision:
        local = context.get_step_execution_local("seen", str)
        return dex.go_to(GeneratorForm, [*input, f"{context.step_execution_id}:{local}"])


class GeneratorForm(Step[list[str]]):
    def wait_for(self, context: Context, input: list[str]) -> Generator[StepOutput, None, Wait]:
        yield dex.heartbeat()
        context.set_step_execution_local("seen", "generator-wait")
        return Wait.skip_immediately()

    def execute(
        self, context: Context, input: list[str]
    ) -> Generator[StepOutput, None, StepDecision]:
        yield dex.heartbeat("progress")
        local = context.get_step_execution_local("seen", str)
        return dex.go_to(AsyncForm, [*input, f"{context.step_execution_id}:{local}"])


class AsyncForm(Step[list[str]]):
    async def wait_for(self, context: AsyncContext, input: list[str]) -> Wait:
        await context.heartbeat()
        context.set_step_execution_local("seen", "async-wait")
        return Wait.skip_immediately()

    async def execute(self, context: AsyncContext, input: list[str]) -> StepDecision:
        await context.heartbeat(1)
        local = context.get_step_execution_local("seen", str)
        return dex.go_to(MixedForm, [*input, f"{context.step_execution_id}:{local}"])


class MixedForm(Step[list[str]]):
    """An async ``wait_for`` with a sync ``execute``."""

    async def wait_for(self, context: AsyncContext, input: list[str]) -> Wait:
        context.set_step_execution_local("seen", "mixed-wait")
        return Wait.skip_immediately()

    def execute(self, context: Context, input: list[str]) -> StepDecision:
        local = context.get_step_execution_local("seen", str)
        return dex.go_to(NoWaitForm, [*input, f"{context.step_execution_id}:{local}"])


class NoWaitForm(Step[list[str]]):
    """No ``wait_for``: the engine skips it and runs ``execute`` at once."""

    def execute(self, context: Context, input: list[str]) -> StepDecision:
        local = context.get_step_execution_local("seen", str)
        return dex.force_complete([*input, f"{context.step_execution_id}:{local}"])


class FormsFlow(Flow[list[str]]):
    def get_steps(self) -> StepList[list[str]]:
        return StepList.start_step(SyncForm()).other_steps(
            GeneratorForm(), AsyncForm(), MixedForm(), NoWaitForm()
        )


# -- step execution IDs ---------------------------------------------------------------


@dataclass(frozen=True)
class LoopInput:
    remaining: int
    seen: list[str]


class Loop(Step[LoopInput]):
    def execute(self, context: Context, input: LoopInput) -> StepDecision:
        seen = [*input.seen, f"{context.from_step_execution_id}>{context.step_execution_id}"]
        if input.remaining == 0:
            return dex.go_to(Renamed, seen)
        return dex.go_to(Loop, LoopInput(input.remaining - 1, seen))


class Renamed(Step[list[str]]):
    def get_step_type(self) -> str:
        return "renamed-step"

    def execute(self, context: Context, input: list[str]) -> StepDecision:
        mark = f"{context.from_step_execution_id}>{context.step_execution_id}"
        return dex.force_complete([*input, mark])


class LoopFlow(Flow[LoopInput]):
    def get_steps(self) -> StepList[LoopInput]:
        return StepList.start_step(Loop()).other_steps(Renamed())


# -- timeouts -------------------------------------------------------------------------


@dataclass(frozen=True)
class GateInput:
    state_dir: str
    gate: str


class TimesOut(Step[GateInput]):
    """Attempt 1 blocks past its 1 s method timeout; attempt 2 returns."""

    def get_step_options(self) -> StepOptions:
        return StepOptions(execute_method_timeout=ONE_SECOND, execute_retry=quick_retry(2))

    async def execute(self, context: AsyncContext, input: GateInput) -> StepDecision:
        if context.attempt == 1:
            await FileGate(input.state_dir, input.gate).wait_for_release()
        return dex.force_complete(context.attempt)


class GoesSilent(Step[GateInput]):
    """Attempt 1 heartbeats once, then goes silent past the 1 s heartbeat timeout."""

    def get_step_options(self) -> StepOptions:
        return StepOptions(heartbeat_timeout=ONE_SECOND, execute_retry=quick_retry(2))

    async def execute(self, context: AsyncContext, input: GateInput) -> StepDecision:
        if context.attempt == 1:
            await context.heartbeat("checkpoint-1")
            await FileGate(input.state_dir, input.gate).wait_for_release()
        return dex.force_complete(
            {"attempt": context.attempt, "checkpoint": context.get_last_heartbeat_value(str)}
        )


class TimeoutFlow(Flow[GateInput]):
    def get_steps(self) -> StepList[GateInput]:
        return StepList.start_step(TimesOut())


class HeartbeatTimeoutFlow(Flow[GateInput]):
    def get_steps(self) -> StepList[GateInput]:
        return StepList.start_step(GoesSilent())


@dataclass(frozen=True)
class HeartbeatInput(GateInput):
    """``gate``: where a retryable attempt waits after its heartbeat value
    (``""``: it does not wait, it completes or fails at once)."""

    fail_first: bool = False


class BeatsAValue(Step[HeartbeatInput]):
    """Attempt 1 heartbeats a value, then waits at the gate (if any) and fails
    (``fail_first``, retried a second later) or completes; a later attempt
    returns the value it finds. Three attempts: attempt 1 is retryable."""

    def get_step_options(self) -> StepOptions:
        return StepOptions(
            execute_retry=RetryPolicy(initial_interval=timedelta(hours=1), maximum_attempts=3)
        )

    async def execute(self, context: AsyncContext, input: HeartbeatInput) -> StepDecision:
        if context.attempt == 1:
            await context.heartbeat("value-1")
            if input.gate:
                await FileGate(input.state_dir, input.gate).wait_for_release()
            if input.fail_first:
                raise dex.retry_after(1, ConnectionError("busy"))
        found = None
        if context.has_last_heartbeat_value():
            found = context.get_last_heartbeat_value(str)
        return dex.force_complete({"attempt": context.attempt, "checkpoint": found})


class HeartbeatValueFlow(Flow[HeartbeatInput]):
    def get_steps(self) -> StepList[HeartbeatInput]:
        return StepList.start_step(BeatsAValue())


# -- retries --------------------------------------------------------------------------


@dataclass(frozen=True)
class RetryInput:
    log: str
    succeed_on: int
    """The attempt that succeeds; 0 = none does."""


class Flaky(Step[RetryInput]):
    def get_step_options(self) -> StepOptions:
        return StepOptions(execute_retry=quick_retry(3))

    def execute(self, context: Context, input: RetryInput) -> StepDecision:
        InvocationLog(input.log).record(f"{context.attempt}|{context.first_attempt_at.isoformat()}")
        if context.attempt != input.succeed_on:
            raise RuntimeError(f"attempt {context.attempt} failed")
        return dex.force_complete(context.attempt)


class RetryFlow(Flow[RetryInput]):
    def get_steps(self) -> StepList[RetryInput]:
        return StepList.start_step(Flaky())


class Throttled(Step[str]):
    """Fails once with ``dex.retry_after(1, ...)``; the policy alone would wait an hour."""

    def get_step_options(self) -> StepOptions:
        return StepOptions(
            execute_retry=RetryPolicy(initial_interval=timedelta(hours=1), maximum_attempts=2)
        )

    def execute(self, context: Context, input: str) -> StepDecision:
        if context.attempt == 1:
            raise dex.retry_after(1, ConnectionError(f"{input} is busy"))
        return dex.force_complete(context.attempt)


class RetryAfterFlow(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(Throttled())


# -- failure route --------------------------------------------------------------------


class Fragile(Step[str]):
    def get_step_options(self) -> StepOptions:
        return StepOptions(execute_retry=quick_retry(2)).on_execute_failure_proceed_to(Recover)

    def execute(self, context: Context, input: str) -> StepDecision:
        raise ValueError(f"cannot handle {input} (attempt {context.attempt})")


class Recover(Step[str]):
    def execute(self, context: Context, input: str) -> StepDecision:
        error = context.recovery_error
        assert error is not None
        return dex.force_complete(
            {
                "input": input,
                "step": context.step_execution_id,
                "from": context.from_step_execution_id,
                "detail": error.detail,
                "error_type": error.error_type,
                "progress": str(getattr(error, "attempt_progress", "")),
                "engine_info": isinstance(error, EngineRecoveryErrorInfo),
            }
        )


class RecoveryFlow(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(Fragile()).other_steps(Recover())


# -- cancellation requested -----------------------------------------------------------

Go = Channel("go", str)


class Begin(Step[str]):
    def execute(self, context: Context, input: str) -> StepDecision:
        return dex.go_to_many(StepMovement.of(Busy, input), StepMovement.of(Stopper, input))


class Busy(Step[str]):
    """Runs until the engine asks it to stop, recording what it saw."""

    def execute(self, context: Context, input: str) -> StepDecision:
        log = InvocationLog(input)
        log.record(f"started:{context.is_cancellation_requested()}")
        deadline = time.monotonic() + 60
        while not context.is_cancellation_requested() and time.monotonic() < deadline:
            time.sleep(0.01)
        log.record(f"stopped:{context.is_cancellation_requested()}")
        return dex.dead_end()


class Stopper(Step[str]):
    def wait_for(self, context: Context, input: str) -> Wait:
        return Wait.until(Go.for_one())

    def execute(self, context: Context, input: str) -> StepDecision:
        return dex.graceful_complete("stopped").with_canceling_steps(Busy)


class CancelFlow(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(Begin()).other_steps(Busy(), Stopper())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(Go)

    @rpc
    def go(self, context: Context) -> RPCResult[str]:
        Go.publish(context, "go")
        return RPCResult("sent")


# -- wait_for failures ----------------------------------------------------------------


class RoutesWaitFor(Step[str]):
    def execute(self, context: Context, input: str) -> StepDecision:
        if input == "proceed":
            return dex.go_to(ProceedsAfterWaitFor, input)
        return dex.go_to(FailsInWaitFor, input)


class ProceedsAfterWaitFor(Step[str]):
    def get_step_options(self) -> StepOptions:
        return StepOptions(
            wait_for_retry=quick_retry(2), wait_for_failure=WaitForFailurePolicy.PROCEED
        )

    def wait_for(self, context: Context, input: str) -> Wait:
        first = context.first_attempt_at.isoformat()
        raise RuntimeError(f"wait_for attempt {context.attempt} failed (first attempt at {first})")

    def execute(self, context: Context, input: str) -> StepDecision:
        return dex.force_complete(
            {"wait_for_failed": context.wait_for_method_failed(), "attempt": context.attempt}
        )


class FailsInWaitFor(Step[str]):
    def get_step_options(self) -> StepOptions:
        return StepOptions(wait_for_retry=quick_retry(1))

    def wait_for(self, context: Context, input: str) -> Wait:
        raise RuntimeError(f"wait_for attempt {context.attempt} failed")

    def execute(self, context: Context, input: str) -> StepDecision:
        return dex.force_complete({"wait_for_failed": context.wait_for_method_failed()})


class WaitForFailureFlow(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(RoutesWaitFor()).other_steps(
            ProceedsAfterWaitFor(), FailsInWaitFor()
        )
