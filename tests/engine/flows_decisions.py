"""A flow whose start Step plays one decision scenario, chosen by its input."""

from __future__ import annotations

from typing import Any

import dex
from dex import (
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
    Wait,
    rpc,
)

from tests.engine.flows_steps import quick_retry

Release = Channel("release", str)
Poke = Channel("poke", str)
Inbox = Channel("inbox", str)

_ONE_ATTEMPT = RetryPolicy(maximum_attempts=1)


class Start(Step[str]):
    def execute(self, context: Context, input: str) -> StepDecision:
        if input == "go_to":
            return dex.go_to(Echo, "hello")
        if input == "per_movement":
            return dex.go_to_many(
                StepMovement.of(Flaky, "a", options=StepOptions(execute_retry=quick_retry(2))),
                StepMovement.of(Flaky, "b"),
            )
        if input == "graceful":
            return dex.go_to_many(
                StepMovement.of(Finish, "1"),
                StepMovement.of(Finish, "2"),
                StepMovement.of(Parked, "p"),
                StepMovement.of(Ends, "-"),
            )
        if input == "force_complete":
            return dex.go_to_many(StepMovement.of(Parked, "p"), StepMovement.of(ForceDone, "-"))
        if input == "force_fail":
            return dex.go_to(Rejects, "bad input")
        if input == "dead_end":
            return dex.dead_end()
        if input in ("empty", "busy"):
            return dex.go_to(Closer, input)
        if input == "cancel_snapshot":
            return dex.go_to_many(
                StepMovement.of(Parked, "old"), StepMovement.of(CancelsParked, "-")
            )
        if input == "cancel_siblings":
            return dex.go_to_many(
                StepMovement.of(Parked, "sibling"),
                StepMovement.of(CancelsSiblings, "-"),
                StepMovement.of(Uncle, "-"),
            )
        if input == "instances":
            return dex.go_to_many(
                StepMovement.of(Parked(), "old"),  # type: ignore[arg-type]
                StepMovement.of(UsesInstances(), "-"),  # type: ignore[arg-type]
            )
        raise ValueError(f"unknown scenario {input!r}")


class Echo(Step[str]):
    def execute(self, context: Context, input: str) -> StepDecision:
        return dex.force_complete(f"echo:{input}:{context.from_step_execution_id}")


class Flaky(Step[str]):
    """Fails its first attempt; its own options allow one attempt, then fall back."""

    def get_step_options(self) -> StepOptions:
        return StepOptions(execute_retry=_ONE_ATTEMPT).on_execute_failure_proceed_to(Fallback)

    def execute(self, context: Context, input: str) -> StepDecision:
        if context.attempt == 1:
            raise RuntimeError("first attempt fails")
        return dex.graceful_complete(f"{input}@{context.attempt}")


class Fallback(Step[str]):
    def execute(self, context: Context, input: str) -> StepDecision:
        return dex.graceful_complete(f"{input}:fallback")


class Finish(Step[str]):
    def execute(self, context: Context, input: str) -> StepDecision:
        return dex.graceful_complete(f"out-{input}")


class Ends(Step[str]):
    def execute(self, context: Context, input: str) -> StepDecision:
        return dex.dead_end()


class Parked(Step[str]):
    """Waits for one ``release`` message."""

    def wait_for(self, context: Context, input: str) -> Wait:
        return Wait.until(Release.for_one())

    def execute(self, context: Context, input: str) -> StepDecision:
        return dex.graceful_complete(f"parked:{input}")


class ForceDone(Step[str]):
    def execute(self, context: Context, input: str) -> StepDecision:
        return dex.force_complete("forced")


class Rejects(Step[str]):
    def execute(self, context: Context, input: str) -> StepDecision:
        return dex.force_fail(f"rejected {input}")


class Closer(Step[str]):
    def execute(self, context: Context, input: str) -> StepDecision:
        if input == "busy":
            Inbox.publish(context, "pending")
        return dex.force_complete_if_channels_empty(
            "closed", StepMovement.of(Drain, "drain"), Inbox
        )


class Drain(Step[str]):
    def wait_for(self, context: Context, input: str) -> Wait:
        return Wait.until(Inbox.at_least(1))

    def execute(self, context: Context, input: str) -> StepDecision:
        return dex.go_to(Closer, f"drained {len(Inbox.results(context))}")


class CancelsParked(Step[str]):
    """Cancels every Parked execution, then schedules a new one (which survives)."""

    def execute(self, context: Context, input: str) -> StepDecision:
        return dex.go_to(Parked, "new").with_canceling_steps(Parked)


class CancelsSiblings(Step[str]):
    """Once poked, cancels the Parked executions that share its parent."""

    def wait_for(self, context: Context, input: str) -> Wait:
        return Wait.until(Poke.for_one())

    def execute(self, context: Context, input: str) -> StepDecision:
        return dex.dead_end().with_canceling_sibling_steps(Parked)


class Uncle(Step[str]):
    def execute(self, context: Context, input: str) -> StepDecision:
        return dex.go_to(Parked, "cousin")


class UsesInstances(Step[str]):
    """Step instances as the target, the cancellation selector and the failure route."""

    def execute(self, context: Context, input: str) -> StepDecision:
        target: Any = FragileInstance()
        return dex.go_to(target, "boom").with_canceling_steps(Parked())  # type: ignore[arg-type]


class FragileInstance(Step[str]):
    def get_step_options(self) -> StepOptions:
        return StepOptions(execute_retry=_ONE_ATTEMPT).on_execute_failure_proceed_to(
            Echo()  # type: ignore[arg-type]
        )

    def execute(self, context: Context, input: str) -> StepDecision:
        raise RuntimeError(input)


class DecisionFlow(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(Start()).other_steps(
            Echo(),
            Flaky(),
            Fallback(),
            Finish(),
            Ends(),
            Parked(),
            ForceDone(),
            Rejects(),
            Closer(),
            Drain(),
            CancelsParked(),
            CancelsSiblings(),
            Uncle(),
            UsesInstances(),
            FragileInstance(),
        )

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(Release, Poke, Inbox)

    @rpc
    def release(self, context: Context) -> RPCResult[str]:
        Release.publish(context, "go")
        return RPCResult("released")

    @rpc
    def poke(self, context: Context) -> RPCResult[str]:
        Poke.publish(context, "go")
        return RPCResult("poked")

    @rpc
    def resume(self, context: Context) -> RPCResult[str]:
        return RPCResult("resumed", next_steps=(StepMovement.of(Echo, "after-dead-end"),))
