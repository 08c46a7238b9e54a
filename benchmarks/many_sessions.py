"""Many registered sessions: what one more costs when the store holds 100,000.

For each store (SQLite; PostgreSQL when ``scripts/services`` installed it) and
each size (1,000 and 100,000 registered sessions, ``--sizes``), a fresh store is
filled with that many session runs, written through the store as the engine
writes them: every one passivated (no process holds it), 100 of them waiting
for an approval, 10% with a durable timer. Five real agent sessions among them are
passivated too. Then, medians of ``--repeat`` tries:

- ``activation``: the first call to a passivated real session (its snapshot);
- ``search``: ``search_flows('ActiveStepTypes = "AwaitToolApproval"', 50)``,
  the query a UI runs for the sessions waiting for a person;
- ``due timers``: the scheduler's read of the due passivated runs and of the
  next wake time, per due timer.

Printed: each figure at each size, and the ratio of the largest size to the
smallest (the target is within 2x).

    .venv/bin/python benchmarks/many_sessions.py [--sizes 1000 100000] [--repeat 20]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.peers.ray_env import use_repository  # noqa: E402

use_repository()

REAL_SESSIONS = 5
APPROVALS = 100
"""Runs that wait for an approval, whatever the size (so every search reads a full page)."""
FILL_BATCH = 500


async def _median_ms(call: Callable[[], Awaitable[Any]], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        await call()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


async def fill_store(store: Any, count: int, flow_type: str, flow_hash: str, now: float) -> None:
    """``count`` passivated session runs, written as the engine writes them."""
    from dex_agents_ray.engine.store._records import Commit, RunRecord, RunStatus

    async def one(i: int) -> None:
        flow_id = f"stored-{i:07d}"
        epoch, _ = await store.runs.activate(flow_id)
        waiting = "AwaitToolApproval" if i % (count // APPROVALS) == 0 else "AwaitUserMessage"
        record = RunRecord(
            flow_id=flow_id,
            run_id=uuid.uuid4().hex,
            flow_type=flow_type,
            flow_hash=flow_hash,
            status=RunStatus.RUNNING,
            epoch=epoch,
            started_at=now,
            active_step_types=[waiting],
        )
        await store.runs.commit(Commit(flow_id=flow_id, epoch=epoch, run=record))
        wake_at = now + 3600 + i if i % 10 == 0 else None
        await store.passivation.passivate(flow_id, epoch, wake_at)

    for start in range(0, count, FILL_BATCH):
        await asyncio.gather(*(one(i) for i in range(start, min(count, start + FILL_BATCH))))


@asynccontextmanager
async def store_factories(backends: list[str]) -> AsyncIterator[dict[str, Callable[[], str]]]:
    """A factory of fresh store locations per backend."""
    factories: dict[str, Callable[[], str]] = {}
    root = Path(tempfile.mkdtemp(prefix="dex-many-"))
    if "sqlite" in backends:
        factories["sqlite"] = lambda: str(root / f"{uuid.uuid4().hex}.db")
    if "postgres" not in backends:
        yield factories
        return
    from tests.stores.postgres_server import find_bin_dir, running_server

    bin_dir = find_bin_dir()
    if bin_dir is None:
        print("postgres: not installed (scripts/services); skipped", file=sys.stderr)
        yield factories
        return
    import psycopg

    with running_server(bin_dir) as server:

        def database() -> str:
            name = f"many_{uuid.uuid4().hex[:8]}"
            with psycopg.connect(server.dsn(), autocommit=True) as conn:
                conn.execute(f"CREATE DATABASE {name}")
            return server.dsn(name)

        factories["postgres"] = database
        yield factories


async def _measure(location: str, size: int, repeat: int) -> dict[str, float]:
    import ray

    from benchmarks.peers.dex_engine import run_session, session_flow
    from dex_agents_ray import AgentSessionClient
    from dex_agents_ray.engine import FlowEngine

    flow = session_flow("inline")
    namespace = f"many-{uuid.uuid4().hex[:8]}"
    engine = await FlowEngine.start(
        [flow], store=location, namespace=namespace, passivate_after=timedelta(seconds=1)
    )
    try:
        sessions = AgentSessionClient(engine.client, flow)
        registered, flow_hash = engine.registered(flow)
        del registered
        fill_start = time.perf_counter()
        await fill_store(engine.store, size, flow.get_flow_type(), flow_hash, time.time())
        fill_s = time.perf_counter() - fill_start
        real = [f"real-{i}" for i in range(REAL_SESSIONS)]
        for session_id in real:
            await run_session(sessions, session_id)
        for _ in range(600):  # until every real session has left memory
            passivated = await engine.store.passivation.passivated_count()
            if passivated >= size + REAL_SESSIONS:
                break
            await asyncio.sleep(0.1)
        activation = []
        for session_id in real:
            start = time.perf_counter()
            await sessions.get_agent_snapshot(session_id)
            activation.append((time.perf_counter() - start) * 1e3)
        query = 'ActiveStepTypes = "AwaitToolApproval"'
        search = await _median_ms(lambda: engine.client.search_flows(query, 50), repeat)
        hits = await engine.client.search_flows(query, 50)
        assert len(hits.flows) == 50, len(hits.flows)
        later = time.time() + 3600 + size  # every timer of the filled runs is due
        due = await engine.store.passivation.due_passivated(later)

        async def scheduler_read() -> None:
            await engine.store.passivation.due_passivated(later)
            await engine.store.passivation.next_passivated_wake()

        timers = await _median_ms(scheduler_read, max(3, repeat // 4))
        return {
            "fill_s": fill_s,
            "activation_ms": statistics.median(activation),
            "search_ms": search,
            "due_timer_ms": timers / max(1, len(due)),
            "due": float(len(due)),
        }
    finally:
        await engine.shutdown(stop_hosts=True)
        if ray.is_initialized():
            ray.shutdown()


async def main(sizes: list[int], repeat: int, backends: list[str]) -> None:
    results: dict[tuple[str, int], dict[str, float]] = {}
    async with store_factories(backends) as factories:
        for backend, new_location in factories.items():
            for size in sizes:
                figures = await _measure(new_location(), size, repeat)
                results[(backend, size)] = figures
                print(
                    f"  {backend} {size:,}: filled in {figures['fill_s']:.0f} s, "
                    f"activation {figures['activation_ms']:.1f} ms, "
                    f"search {figures['search_ms']:.1f} ms",
                    file=sys.stderr,
                    flush=True,
                )
    small, large = min(sizes), max(sizes)
    print(f"\nmany registered sessions ({repeat} tries; medians, ms)")
    header = f"{'store':<10}{'figure':<24}" + "".join(f"{s:>12,}" for s in sizes)
    print(header + f"{'ratio':>8}")
    labels = (
        ("activation_ms", "first call, passivated"),
        ("search_ms", "search ActiveStepTypes"),
        ("due_timer_ms", "scheduler, per due timer"),
    )
    for backend in factories:
        for key, label in labels:
            values = [results[(backend, s)][key] for s in sizes]
            ratio = results[(backend, large)][key] / results[(backend, small)][key]
            cells = "".join(f"{v:>12.3f}" for v in values)
            print(f"{backend:<10}{label:<24}{cells}{ratio:>8.2f}")
    print(f"\nratio: the figure at {large:,} sessions over the figure at {small:,} (target <= 2)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 100_000])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--backends", nargs="+", default=["sqlite", "postgres"])
    args = parser.parse_args()
    asyncio.run(main(sorted(args.sizes), args.repeat, args.backends))
