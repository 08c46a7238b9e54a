"""Flows whose first Step hands over to a second: effect-free, or not.

``Second`` looks in the store file for the first Step's completion when it
starts and records what it saw, so a test can tell whether it started before
that completion was durable.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from datetime import timedelta

import dex
from dex import AsyncContext, Flow, RetryPolicy, Step, StepList, StepOptions

from dex_agents_ray.engine import effect_free
from dex_agents_ray.testing import FileGate, InvocationLog


@dataclass(frozen=True)
class Chain:
    state_dir: str
    store: str
    """The SQLite store file the engine writes."""
    second_attempts: int = 3


@dataclass(frozen=True)
class Handover:
    state_dir: str
    store: str
    first: str
    """The first Step's type."""


def _log(state_dir: str) -> InvocationLog:
    return InvocationLog(os.path.join(state_dir, "chain.log"))


def _first_completed(store: str, flow_id: str, step_type: str) -> bool:
    db = sqlite3.connect(store, timeout=30)
    try:
        row = db.execute(
            "SELECT status FROM executions WHERE flow_id=? AND exec_id LIKE ?",
            (flow_id, f"{step_type}-%"),
        ).fetchone()
    finally:
        db.close()
    return row is not None and row[0] == "completed"


def _retry(attempts: int) -> RetryPolicy:
    return RetryPolicy(
        initial_interval=timedelta(seconds=1),
        backoff_coefficient=1.0,
        maximum_attempts=attempts,
    )


class _First(Step[Chain]):
    """Records its invocation, waits at gate ``first-<attempt>``, passes gate
    ``first-done-<attempt>``, moves to ``Second``."""

    def get_step_options(self) -> StepOptions | None:
        return StepOptions(execute_retry=_retry(5))

    async def execute(self, context: AsyncContext, input: Chain) -> dex.StepDecision:
        name = type(self).__name__
        _log(input.state_dir).record(f"{name}/{context.attempt}")
        await FileGate(input.state_dir, f"first-{context.attempt}").wait_for_release()
        # A signal that this attempt's code is done (the tests release it beforehand).
        await FileGate(input.state_dir, f"first-done-{context.attempt}").wait_for_release()
        options = StepOptions(execute_retry=_retry(input.second_attempts))
        handover = Handover(input.state_dir, input.store, name)
        return dex.go_to_many(dex.StepMovement.of(Second, handover, options=options))


@effect_free
class EffectFreeFirst(_First):
    pass


class PlainFirst(_First):
    pass


class Second(Step[Handover]):
    """Records whether the first Step's completion was in the store when it
    started, then waits at gate ``second-<attempt>``."""

    async def execute(self, context: AsyncContext, input: Handover) -> dex.StepDecision:
        durable = _first_completed(input.store, context.flow_id, input.first)
        seen = "durable" if durable else "pending"
        _log(input.state_dir).record(f"Second/{context.attempt}/{seen}")
        await FileGate(input.state_dir, f"second-{context.attempt}").wait_for_release()
        return dex.force_complete(seen)


class EffectFreeChain(Flow[Chain]):
    def get_steps(self) -> StepList[Chain]:
        return StepList.start_step(EffectFreeFirst()).other_steps(Second())

    @dex.rpc
    def ping(self, context: dex.Context) -> dex.RPCResult[str]:
        """Reads the run (changes nothing)."""
        return dex.RPCResult("pong")


class PlainChain(Flow[Chain]):
    def get_steps(self) -> StepList[Chain]:
        return StepList.start_step(PlainFirst()).other_steps(Second())
