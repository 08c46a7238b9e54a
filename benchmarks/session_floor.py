"""Where a turn goes at C=1: the design's primitives, counted and priced in one run.

An agent turn of the agent-loop workload (model -> 3 no-op tools on pooled
executors -> model) is built from a few primitives: Ray actor calls (the
client's RPC and long polls to the session's host, the host's call to an
executor and the executor's start acknowledgement), durable store commits,
and the Steps' own Python. This benchmark

1. runs real sessions one after another (the default configuration, as
   ``dex:session-shared-ray`` in ``benchmarks/agent_loop.py``) and counts, per
   turn: the client's actor calls by method and its direct store reads
   (counted in this process), the store's commits (distinct commit times in
   the run's Step history) and the events the client read;
2. prices the primitives on the same Ray and disk: a sequential actor call
   from this process to an async actor (wall time, and the CPU of both
   processes), and one small SQLite commit (WAL, synchronous=FULL, as the
   store writes; the mean of 300, ``engine_step_overhead.raw_sqlite``);
3. runs DBOS on the same workload in a fresh process, when the ``bench``
   extra is installed (one in-process workflow per session: no client round
   trip and no event stream per turn).

Printed: each primitive's count per turn, its unit price, their sum (the
serial cost of the primitives alone, with no Step code), the measured turn, and
the ratios measured turn / primitive sum and DBOS turn / primitive sum. The
executor's two calls per fan-out are its protocol (``engine/actors/_executor.py``),
not counted here. The sum is not a strict floor: the client's long polls
partly overlap the host's work. Medians; asserts nothing.

    .venv/bin/python benchmarks/session_floor.py [--sessions 8]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

_REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(_REPO))

from benchmarks.engine_step_overhead import raw_sqlite  # noqa: E402
from benchmarks.peers.run import PeerJobError, run_job  # noqa: E402
from benchmarks.peers.workload import STEPS_PER_TURN, TURNS, _process_cpu_s  # noqa: E402

EXECUTOR_CALLS_PER_FAN_OUT = 2
"""``run_many`` (host -> executor) and ``ack_remote_starts`` (executor -> host)."""


class _Echo:
    async def ping(self, payload: bytes) -> bytes:
        return payload

    def pid(self) -> int:
        return os.getpid()


async def _price_actor_call(calls: int) -> tuple[float, float]:
    """(median wall ms, CPU ms of caller and callee) of one sequential actor call."""
    import ray

    actor = ray.remote(_Echo).remote()  # type: ignore[attr-defined]
    pid = await actor.pid.remote()
    payload = b"x" * 500
    for _ in range(50):
        await actor.ping.remote(payload)
    walls: list[float] = []
    cpu_start = time.process_time() + _process_cpu_s([pid])
    for _ in range(calls):
        start = time.perf_counter()
        await actor.ping.remote(payload)
        walls.append(time.perf_counter() - start)
    cpu = time.process_time() + _process_cpu_s([pid]) - cpu_start
    ray.kill(actor)
    return statistics.median(walls) * 1e3, cpu * 1e3 / calls


def _counting(
    counts: Counter[str], name: Callable[..., str], call: Callable[..., Awaitable[Any]]
) -> Callable[..., Awaitable[Any]]:
    async def counted(*args: Any, **kwargs: Any) -> Any:
        counts[name(*args, **kwargs)] += 1
        return await call(*args, **kwargs)

    return counted


def _commits_per_turn(history: list[Any]) -> list[int]:
    """Distinct commit times between one applied RPC (a user message) and the next."""
    marks = [i for i, entry in enumerate(history) if entry.event_type == "rpc_applied"]
    counts = []
    for begin, end in zip(marks, marks[1:], strict=False):
        counts.append(len({entry.at for entry in history[begin:end]}))
    return counts


async def _measure(sessions: int) -> dict[str, Any]:
    from benchmarks.peers import dex_engine

    with tempfile.TemporaryDirectory(prefix="dex-floor-") as workdir:
        async with dex_engine.open_system(Path(workdir), "session-shared-ray") as system:
            engine = system._engine
            client = engine.client
            calls: Counter[str] = Counter()
            reads: Counter[str] = Counter()
            for i in range(2):
                await dex_engine.run_session(system.sessions, f"warm-{i}")
            client._call = _counting(calls, lambda *a, **k: str(a[1]), client._call)
            engine.store.streams.read_stream = _counting(
                reads, lambda *a, **k: "read_stream", engine.store.streams.read_stream
            )
            turn_ms: list[float] = []
            events: list[int] = []
            for i in range(sessions):
                ms: list[float] = []
                await dex_engine.run_session(system.sessions, f"s-{i}", turn_ms=ms, events=events)
                turn_ms += ms[1:]  # turn 1 starts the session
            commits: list[int] = []
            for i in range(sessions):
                commits += _commits_per_turn(await client.read_step_history(f"s-{i}"))
            turns = sessions * TURNS
            call_ms, call_cpu_ms = await _price_actor_call(500)
            commit_ms = raw_sqlite(Path(workdir), 300) * 1e3
    return {
        "turn_ms": statistics.median(turn_ms),
        "client_calls": {method: n / turns for method, n in sorted(calls.items())},
        "store_reads": reads["read_stream"] / turns,
        "events": sum(events) / turns,
        "commits": statistics.median(commits),
        "call_ms": call_ms,
        "call_cpu_ms": call_cpu_ms,
        "commit_ms": commit_ms,
    }


def _dbos_turn_ms(sessions: int) -> float | None:
    try:
        result = run_job("dbos:wal", 1, sessions)
    except PeerJobError as error:
        print(f"dbos:wal failed: {error}", file=sys.stderr)
        return None
    if "skipped" in result:
        print(f"dbos:wal skipped: {result['skipped']}", file=sys.stderr)
        return None
    return float(result["ms_per_step"]) * STEPS_PER_TURN


def main(sessions: int) -> None:
    figures = asyncio.run(_measure(sessions))
    dbos = _dbos_turn_ms(sessions)
    client_calls = sum(figures["client_calls"].values())
    rows = [
        (
            "client -> host actor calls ("
            + ", ".join(f"{m} {n:.1f}" for m, n in figures["client_calls"].items())
            + ")",
            client_calls,
            figures["call_ms"],
            figures["call_cpu_ms"],
        ),
        (
            "host <-> executor actor calls (protocol: run_many, ack)",
            float(EXECUTOR_CALLS_PER_FAN_OUT),
            figures["call_ms"],
            figures["call_cpu_ms"],
        ),
        ("store commits (SQLite, WAL, FULL)", float(figures["commits"]), figures["commit_ms"], 0.0),
    ]
    print(f"Per turn, at C=1 ({sessions} sessions x {TURNS - 1} turns after the first):")
    print("| primitive | per turn | ms each (wall) | ms each (CPU) | ms per turn |")
    print("|---|---|---|---|---|")
    floor = 0.0
    for label, count, wall, cpu in rows:
        floor += count * wall
        cpu_text = f"{cpu:.3f}" if cpu else "-"
        print(f"| {label} | {count:.1f} | {wall:.3f} | {cpu_text} | {count * wall:.2f} |")
    print(f"| **primitives alone** | | | | **{floor:.2f}** |")
    print()
    print(
        f"events read per turn: {figures['events']:.1f}; "
        f"direct store reads by the client per turn: {figures['store_reads']:.1f}"
    )
    turn = figures["turn_ms"]
    print(f"measured turn (median): {turn:.2f} ms = {turn / floor:.2f}x the primitives alone")
    if dbos is not None:
        print(
            f"DBOS turn (dbos:wal, same workload in one process, median): {dbos:.2f} ms "
            f"= {dbos / floor:.2f}x the primitives alone; measured turn / DBOS turn: "
            f"{turn / dbos:.2f}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sessions", type=int, default=8, help="sequential sessions timed")
    args = parser.parse_args()
    if args.sessions < 1:
        parser.error(f"--sessions must be >= 1, got {args.sessions}")
    main(args.sessions)
