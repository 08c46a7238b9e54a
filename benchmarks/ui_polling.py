"""Agent sessions watched by a UI that polls snapshots, one table, one run.

20 sessions (``--sessions``) run 5 turns each (``--turns``) of the agent-loop
workload (model -> 3 no-op tools -> model; ``benchmarks/peers/dex_engine.py``)
while, for each session, a client polls ``get_agent_snapshot`` every 50 ms
(``--interval-ms``), as a UI does, until the session's last turn completes.
Each configuration runs in a fresh process with a fresh local Ray and SQLite
store, after 2 untimed warm-up sessions:

- ``ray``: the default configuration (tools sent to Ray, pooled executors);
- ``ray-nopoll``: the same without the polling clients (what polling costs);
- ``inline``: tools in the session's host, polled.

Printed: workload steps/s (5 a turn), a turn's latency (median, p90, p99, and
p99 / median), and a snapshot's latency (median, p99, count).

    .venv/bin/python benchmarks/ui_polling.py [--sessions 20] [--turns 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(_REPO))

from benchmarks.peers.dex_engine import run_session  # noqa: E402
from benchmarks.peers.workload import percentile  # noqa: E402

CONFIGS = ("ray", "ray-nopoll", "inline")
STEPS_PER_TURN = 5


async def _poll(
    sessions: Any, session_id: str, interval: float, done: asyncio.Event, snapshot_ms: list[float]
) -> None:
    while not done.is_set():
        start = time.perf_counter()
        try:
            await sessions.get_agent_snapshot(session_id)
        except Exception:  # the session does not exist yet
            pass
        else:
            snapshot_ms.append((time.perf_counter() - start) * 1e3)
        try:
            await asyncio.wait_for(done.wait(), interval)
        except TimeoutError:
            pass


async def _session(
    sessions: Any,
    session_id: str,
    turns: int,
    interval: float | None,
    turn_ms: list[float],
    snapshot_ms: list[float],
) -> None:
    done = asyncio.Event()
    poller = None
    if interval is not None:
        poller = asyncio.create_task(_poll(sessions, session_id, interval, done, snapshot_ms))
    try:
        await run_session(sessions, session_id, turns, turn_ms)
    finally:
        done.set()
        if poller is not None:
            await poller


async def _one(config: str, count: int, turns: int, interval_ms: float) -> dict[str, Any]:
    from benchmarks.peers import dex_engine

    variant = "session-shared" if config == "inline" else "session-shared-ray"
    interval = None if config.endswith("nopoll") else interval_ms / 1e3
    with tempfile.TemporaryDirectory(prefix="dex-ui-") as workdir:
        async with dex_engine.open_system(Path(workdir), variant) as system:
            sessions = system.sessions
            for i in range(2):
                await _session(sessions, f"warm-{i}", turns, interval, [], [])
            turn_ms: list[float] = []
            snapshot_ms: list[float] = []
            start = time.perf_counter()
            await asyncio.gather(
                *(
                    _session(sessions, f"s-{i}", turns, interval, turn_ms, snapshot_ms)
                    for i in range(count)
                )
            )
            wall = time.perf_counter() - start
    result: dict[str, Any] = {
        "config": config,
        "steps_per_s": count * turns * STEPS_PER_TURN / wall,
        "turn_ms_median": statistics.median(turn_ms),
        "turn_ms_p90": percentile(turn_ms, 0.9),
        "turn_ms_p99": percentile(turn_ms, 0.99),
    }
    if snapshot_ms:
        result |= {
            "snapshot_ms_median": statistics.median(snapshot_ms),
            "snapshot_ms_p99": percentile(snapshot_ms, 0.99),
            "snapshots": len(snapshot_ms),
        }
    return result


def _run(config: str, count: int, turns: int, interval_ms: float) -> dict[str, Any]:
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--one",
        config,
        "--sessions",
        str(count),
        "--turns",
        str(turns),
        "--interval-ms",
        str(interval_ms),
    ]
    done = subprocess.run(command, cwd=_REPO, capture_output=True, text=True, timeout=1800)
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("{"):
            parsed: dict[str, Any] = json.loads(line)
            return parsed
    raise RuntimeError(f"{config} failed: {done.stderr[-3000:]}")


def _fmt(value: Any, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def main(count: int, turns: int, interval_ms: float) -> None:
    results = []
    for config in CONFIGS:
        result = _run(config, count, turns, interval_ms)
        print(f"  {config}: {result['steps_per_s']:,.0f} steps/s", file=sys.stderr, flush=True)
        results.append(result)
    print(f"\nUI polling: {count} sessions x {turns} turns, snapshots every {interval_ms:g} ms")
    print(
        f"{'config':<12}{'steps/s':>9}{'turn ms p50':>13}{'p90':>8}{'p99':>8}{'p99/p50':>9}"
        f"{'snapshot ms p50':>17}{'p99':>8}{'snapshots':>11}"
    )
    for r in results:
        print(
            f"{r['config']:<12}{r['steps_per_s']:>9,.0f}{r['turn_ms_median']:>13,.1f}"
            f"{r['turn_ms_p90']:>8,.1f}{r['turn_ms_p99']:>8,.1f}"
            f"{r['turn_ms_p99'] / r['turn_ms_median']:>9.1f}"
            f"{_fmt(r.get('snapshot_ms_median')):>17}{_fmt(r.get('snapshot_ms_p99')):>8}"
            f"{_fmt(r.get('snapshots'), 0):>11}"
        )
    by = {r["config"]: r for r in results}
    print(
        f"\npolling costs the default configuration "
        f"{1 - by['ray']['steps_per_s'] / by['ray-nopoll']['steps_per_s']:.0%} of its steps/s; "
        f"polled, it runs {by['ray']['steps_per_s'] / by['inline']['steps_per_s']:.2f}x "
        f"the inline-tool sessions"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--interval-ms", type=float, default=50.0)
    parser.add_argument("--one", choices=CONFIGS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(asyncio.run(_one(args.one, args.sessions, args.turns, args.interval_ms))))
    else:
        main(args.sessions, args.turns, args.interval_ms)
