"""Per-step overhead of the engine against a plain asyncio loop and raw SQLite.

A minimal flow chains N Steps (each returns ``go_to`` itself), once with the
Steps in the host actor, once on pooled executors and once as Ray tasks.
Floors, measured in the same run: a plain asyncio loop of N awaited coroutines,
and one SQLite INSERT+COMMIT per step (WAL, synchronous=FULL) in the same
directory as the engine's store.

Prints medians over rounds and ratios; asserts nothing.

    .venv/bin/python benchmarks/engine_step_overhead.py [--steps 200] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

import dex
from dex import AsyncContext, Flow, IdReusePolicy, StartFlowOptions, Step, StepList

from dex_agents_ray.engine import FlowEngine, RayTaskOptions, RemoteExecution, RemoteStepOptions


class Tick(Step[int]):
    async def execute(self, context: AsyncContext, input: int) -> dex.StepDecision:  # type: ignore[override]
        if input <= 1:
            return dex.graceful_complete(context.step_execution_id)
        return dex.go_to(Tick, input - 1)


class RemoteTick(Step[int]):
    def get_step_options(self) -> RemoteStepOptions:
        return RemoteStepOptions(ray=RayTaskOptions(num_cpus=0.1))

    async def execute(self, context: AsyncContext, input: int) -> dex.StepDecision:  # type: ignore[override]
        if input <= 1:
            return dex.graceful_complete(context.step_execution_id)
        return dex.go_to(RemoteTick, input - 1)


class TaskTick(Step[int]):
    def get_step_options(self) -> RemoteStepOptions:
        return RemoteStepOptions(ray=RayTaskOptions(num_cpus=0.1, execution=RemoteExecution.TASK))

    async def execute(self, context: AsyncContext, input: int) -> dex.StepDecision:  # type: ignore[override]
        if input <= 1:
            return dex.graceful_complete(context.step_execution_id)
        return dex.go_to(TaskTick, input - 1)


class LocalChain(Flow[int]):
    def get_steps(self) -> StepList[int]:
        return StepList.start_step(Tick())


class RemoteChain(Flow[int]):
    def get_steps(self) -> StepList[int]:
        return StepList.start_step(RemoteTick())


class TaskChain(Flow[int]):
    def get_steps(self) -> StepList[int]:
        return StepList.start_step(TaskTick())


async def plain_asyncio(steps: int) -> float:
    async def step(i: int) -> int:
        return i - 1

    start = time.perf_counter()
    value = steps
    while value > 0:
        value = await step(value)
    return (time.perf_counter() - start) / steps


def raw_sqlite(directory: Path, steps: int) -> float:
    path = directory / f"floor-{os.getpid()}.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE IF NOT EXISTS steps (id INTEGER PRIMARY KEY, doc TEXT)")
    doc = "x" * 400
    start = time.perf_counter()
    for _ in range(steps):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO steps (doc) VALUES (?)", (doc,))
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - start
    conn.close()
    return elapsed / steps


async def engine_run(engine: FlowEngine, flow: Flow[int], flow_id: str, steps: int) -> float:
    options = StartFlowOptions(id_reuse_policy=IdReusePolicy.ALLOW_IF_NOT_RUNNING)
    start = time.perf_counter()
    await engine.client.start_flow(flow, flow_id, steps, options)
    result = await engine.client.wait_for_flow(flow_id, timeout=600)
    elapsed = time.perf_counter() - start
    assert result.status is dex.FlowStatus.COMPLETED, result.status
    return elapsed / steps


async def concurrent_runs(
    engine: FlowEngine, flow: Flow[int], prefix: str, runs: int, steps: int
) -> float:
    """Steps per second with ``runs`` chains at once (hosts already warm)."""
    options = StartFlowOptions(id_reuse_policy=IdReusePolicy.ALLOW_IF_NOT_RUNNING)
    start = time.perf_counter()
    ids = [f"{prefix}-{i}" for i in range(runs)]
    await asyncio.gather(*(engine.client.start_flow(flow, i, steps, options) for i in ids))
    await asyncio.gather(*(engine.client.wait_for_flow(i, timeout=600) for i in ids))
    return runs * steps / (time.perf_counter() - start)


async def throughput(directory: Path, runs: int, steps: int, rounds: int) -> dict[str, float]:
    """Steps/s at ``runs`` concurrent runs, dedicated vs shared placement."""
    local = LocalChain()
    results: dict[str, float] = {}
    for mode, kwargs in (("dedicated", {}), ("shared", {"placement": "shared"})):
        engine = await FlowEngine.start(
            [local], store=directory / f"{mode}.db", namespace=f"bench-{mode}", **kwargs
        )
        try:
            await concurrent_runs(engine, local, mode, runs, 3)  # create and warm the hosts
            figures = [
                await concurrent_runs(engine, local, mode, runs, steps) for _ in range(rounds)
            ]
        finally:
            await engine.shutdown(stop_hosts=True)
        results[mode] = statistics.median(figures)
    return results


async def main(steps: int, rounds: int, remote_steps: int, runs: int) -> None:
    directory = Path(tempfile.mkdtemp(prefix="dex-bench-"))
    local, remote, task = LocalChain(), RemoteChain(), TaskChain()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    engine = await FlowEngine.start(
        [local, remote, task], store=directory / "engine.db", namespace="bench"
    )
    try:
        # Warm the hosts (actor creation is a one-time cost per run ID).
        await engine_run(engine, local, "local", 5)
        await engine_run(engine, remote, "remote", 5)
        await engine_run(engine, task, "task", 5)
        figures: dict[str, list[float]] = {
            "plain asyncio": [],
            "sqlite insert+commit": [],
            "engine, in-actor steps": [],
            "engine, pooled remote": [],
            "engine, Ray-task remote": [],
        }
        for _ in range(rounds):  # interleave so noise hits every system alike
            figures["plain asyncio"].append(await plain_asyncio(steps))
            figures["sqlite insert+commit"].append(raw_sqlite(directory, steps))
            figures["engine, in-actor steps"].append(
                await engine_run(engine, local, "local", steps)
            )
            figures["engine, pooled remote"].append(
                await engine_run(engine, remote, "remote", remote_steps)
            )
            figures["engine, Ray-task remote"].append(
                await engine_run(engine, task, "task", remote_steps)
            )
    finally:
        await engine.shutdown(stop_hosts=True)
    medians = {name: statistics.median(v) * 1000 for name, v in figures.items()}
    sqlite_ms = medians["sqlite insert+commit"]
    plain_ms = medians["plain asyncio"]
    print(f"\nsteps per run: {steps} (remote: {remote_steps}); rounds: {rounds}; medians")
    print(f"{'system':<26}{'ms/step':>10}{'x sqlite commit':>17}{'x asyncio':>12}")
    for name, ms in medians.items():
        print(f"{name:<26}{ms:>10.4f}{ms / sqlite_ms:>17.2f}{ms / plain_ms:>12.0f}")
    print(
        "\nAn in-host step is one durable commit (its result, the next step, and that "
        "step's start mark) on SQLite WAL synchronous=FULL; a remote step adds a call to "
        "its executor and the start acknowledgement (pooled), or a Ray task (task)."
    )
    rates = await throughput(directory, runs, steps // 2, max(1, rounds // 2))
    print(f"\n{runs} concurrent runs of {steps // 2} in-actor steps (medians, steps/s):")
    for mode, rate in rates.items():
        print(f"  {mode:<10} {rate:>10.0f}")
    print(f"  shared / dedicated: {rates['shared'] / rates['dedicated']:.2f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--remote-steps", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=16, help="concurrent runs for throughput")
    args = parser.parse_args()
    asyncio.run(main(args.steps, args.rounds, args.remote_steps, args.runs))
