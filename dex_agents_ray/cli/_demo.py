"""The engine demo: a fan-out to Ray tasks, a durable timer, and a host crash.

The flow (``OrderPipeline``):

* ``Receive`` fans out one ``Quote`` per supplier (each a Ray task) and a ``Pick``.
* ``Quote`` computes a price in a task worker and publishes it to ``quotes``.
* ``Pick`` waits for every quote, picks the cheapest, and moves to ``Cool``.
* ``Cool`` waits on a durable 2-second timer.
* ``Charge`` kills its own host process on its first attempt (SIGKILL, no
  cleanup). Ray restarts the host, the run resumes from the store, the attempt
  counts as failed, and the retry charges once.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import dex
from dex import (
    AsyncContext,
    Attribute,
    Channel,
    Context,
    Flow,
    PersistenceSchema,
    RetryPolicy,
    Step,
    StepList,
    StepMovement,
    StepOptions,
    Timer,
    Wait,
)

from dex_agents_ray.engine import FlowEngine, RayTaskOptions, RemoteStepOptions

# dex-python-sdk 1.23 types Step.execute as synchronous; its Registry accepts
# `async def` handlers with allow_async_handlers=True, hence the ignores below.

Quotes = Channel("quotes", str)
Chosen = Attribute("chosen", str)
Charged = Attribute("charged", int)

SUPPLIERS = ("acme", "globex", "initech")


@dataclass(frozen=True)
class Order:
    item: str
    cents: int


@dataclass(frozen=True)
class QuoteRequest:
    supplier: str
    order: Order


class Receive(Step[Order]):
    async def execute(self, context: AsyncContext, input: Order) -> dex.StepDecision:  # type: ignore[override]
        remote = RemoteStepOptions(ray=RayTaskOptions(num_cpus=0.25))
        return dex.go_to_many(
            *(StepMovement.of(Quote, QuoteRequest(s, input), options=remote) for s in SUPPLIERS),
            StepMovement.of(Pick, input),
        )


class Quote(Step[QuoteRequest]):
    def execute(self, context: Context, input: QuoteRequest) -> dex.StepDecision:
        price = input.order.cents + (sum(map(ord, input.supplier)) % 97)
        Quotes.publish(context, f"{input.supplier}={price} (pid {os.getpid()})")
        return dex.dead_end()


class Pick(Step[Order]):
    def wait_for(self, context: Context, input: Order) -> Wait:
        return Wait.until(Quotes.for_n(len(SUPPLIERS)))

    def execute(self, context: Context, input: Order) -> dex.StepDecision:
        quotes = list(Quotes.results(context))
        best = min(quotes, key=lambda q: int(q.split("=")[1].split()[0]))
        Chosen.set(context, best)
        return dex.go_to(Cool, input)


class Cool(Step[Order]):
    def wait_for(self, context: Context, input: Order) -> Wait:
        return Wait.until(Timer.by_duration(timedelta(seconds=2)))

    def execute(self, context: Context, input: Order) -> dex.StepDecision:
        return dex.go_to(Charge, input)


class Charge(Step[Order]):
    def get_step_options(self) -> StepOptions:
        return StepOptions(
            execute_retry=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3)
        )

    async def execute(self, context: AsyncContext, input: Order) -> dex.StepDecision:  # type: ignore[override]
        if context.attempt == 1:
            os.kill(os.getpid(), signal.SIGKILL)  # the crash: the host process dies here
        Charged.set(context, Charged.get(context) + input.cents)
        return dex.graceful_complete(f"charged {input.cents} for {input.item}")


class OrderPipeline(Flow[Order]):
    def get_steps(self) -> StepList[Order]:
        return StepList.start_step(Receive()).other_steps(Quote(), Pick(), Cool(), Charge())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(Quotes, Chosen, Charged)


async def _demo(store: str | None) -> int:
    flow = OrderPipeline()
    print("starting the engine (local Ray, SQLite store) ...", flush=True)
    engine = await FlowEngine.start(
        [flow], store=store, namespace=f"dex-demo-{uuid.uuid4().hex[:8]}"
    )
    try:
        flow_id = f"order-{uuid.uuid4().hex[:8]}"
        await engine.client.start_flow(flow, flow_id, Order("lamp", 4200))
        print(f"started run {flow_id}; store {engine.store_config.location}\n", flush=True)
        printed = 0
        started = time.monotonic()
        while True:
            history = await engine.client.read_step_history(flow_id)
            for entry in history[printed:]:
                print(_line(entry, started), flush=True)
            printed = len(history)
            info = await engine.client.describe_flow(flow_id)
            if info.status is not dex.FlowStatus.RUNNING:
                break
            await asyncio.sleep(0.2)
        result = await engine.client.wait_for_flow(flow_id)
        print(f"\nrun {flow_id}: {result.status.value}")
        for completion in result.completions:
            print(f"  output of {completion.step_execution_id}: {completion.decode(str)}")
        crashes = [h for h in history if h.detail.get("error_type") == "HostDiedError"]
        print(f"  host crashes recovered from: {len(crashes)}")
        return 0 if result.status is dex.FlowStatus.COMPLETED else 1
    finally:
        await engine.shutdown(stop_hosts=True)


def _line(entry: Any, started: float) -> str:
    detail = {k: v for k, v in entry.detail.items() if k not in ("run_id",)}
    text = ", ".join(f"{k}={v}" for k, v in detail.items())
    where = entry.step_execution_id or "(run)"
    return f"  {where:<12} {entry.event:<20} {text}"


def run_demo(store: str | None = None) -> int:
    """Run the demo; returns the process exit status."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    return asyncio.run(_demo(store))
