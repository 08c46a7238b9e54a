"""A ``ray job submit`` job on the engine alone: runs that fan out to Ray and join.

Each run squares its numbers in Steps sent to Ray (pooled executors), collects
the squares from a Channel, and completes with their sum. Run it on a cluster (or
a local head from ``cluster/local-head.sh``)::

    cluster/local-head.sh
    RAY_AUTH_MODE=token .venv/bin/ray job submit --address http://127.0.0.1:8265 \\
        --working-dir . --runtime-env-json '{"excludes": [".venv", ".git", "tests"]}' \\
        -- "$PWD/.venv/bin/python" examples/engine_job.py --store /tmp/dex-jobs.db

(the entrypoint names the interpreter that has the package installed; on a
cluster whose image installs ``dex-agents-ray``, plain ``python`` does), or
directly with ``.venv/bin/python examples/engine_job.py`` (starts a local Ray).
The store must be reachable from every node (a shared disk for SQLite).
For agent sessions, see ``examples/session_job.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import os

import dex
from dex import (
    Channel,
    Context,
    Flow,
    PersistenceSchema,
    Step,
    StepList,
    StepMovement,
    Wait,
)

from dex_agents_ray.engine import FlowEngine, RayTaskOptions, RemoteStepOptions

Squares = Channel("squares", int)


class Split(Step[int]):
    """Fan out: one remote ``Square`` per number, and ``Sum`` to join them."""

    def execute(self, context: Context, input: int) -> dex.StepDecision:
        remote = RemoteStepOptions(ray=RayTaskOptions(num_cpus=0.25))
        squares = [StepMovement.of(Square, n, options=remote) for n in range(1, input + 1)]
        return dex.go_to_many(*squares, StepMovement.of(Sum, input))


class Square(Step[int]):
    """Runs on a Ray executor; publishes its result to the run's Channel."""

    def execute(self, context: Context, input: int) -> dex.StepDecision:
        Squares.publish(context, input * input)
        return dex.dead_end()


class Sum(Step[int]):
    """Waits durably for every square (no process held), then completes."""

    def wait_for(self, context: Context, input: int) -> Wait:
        return Wait.until(Squares.for_n(input))

    def execute(self, context: Context, input: int) -> dex.StepDecision:
        total = sum(Squares.results(context))
        return dex.force_complete(f"sum of squares 1..{input} = {total} (pid {os.getpid()})")


class SquaresFlow(Flow[int]):
    def get_steps(self) -> StepList[int]:
        return StepList.start_step(Split()).other_steps(Square(), Sum())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(Squares)


async def main(store: str | None, count: int) -> None:
    flow = SquaresFlow()
    engine = await FlowEngine.start([flow], store=store, namespace="examples")
    try:
        ids = [f"job-squares-{i}" for i in range(count)]
        for i, flow_id in enumerate(ids):
            await engine.client.start_flow(flow, flow_id, 3 + i)
        for flow_id in ids:
            result = await engine.client.wait_for_flow(flow_id, timeout=300)
            print(flow_id, result.status.value, result.single_output(str))
    finally:
        await engine.shutdown(stop_hosts=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Run a few fan-out runs on the engine.")
    parser.add_argument("--store", default=None)
    parser.add_argument("--count", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.store, args.count))
