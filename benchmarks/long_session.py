"""A long session: what turn 2,000 costs next to turn 100, and whether its stored
state stops growing.

One built-in loop session (the scripted model calling one inline read tool each
turn, then answering) runs ``--turns`` turns on a local Ray and SQLite with
compaction on (a small context window, so it compacts every few dozen turns),
message retention (``retained_message_limit``) and engine retention
(``RetentionOptions``). The client sends each message and reads the
``AgentEvents`` stream until ``turn_completed``, as an application does.

Printed, at turns 10, 100, 1,000 and 2,000: the median turn latency of the ten
turns up to it, and the run's stored bytes (its rows in every store table, see
``tests/builtin_loop/test_long_session.py``). Targets: turn 2,000 within 1.2x of
turn 100, and stored bytes flat once retention applies.

    .venv/bin/python benchmarks/long_session.py [--turns 2000] [--retained 100]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.peers.ray_env import use_repository  # noqa: E402

use_repository()

MARKS = (10, 100, 1000, 2000)


async def main(turns: int, retained: int) -> None:
    import ray

    from dex_agents_ray import AgentSessionClient
    from dex_agents_ray.engine import FlowEngine, RetentionOptions
    from dex_agents_ray.engine._engine import task_worker_system_config
    from tests.builtin_loop.agents import build_compacting_flow
    from tests.builtin_loop.test_long_session import QUESTION, stored

    workdir = Path(tempfile.mkdtemp(prefix="dex-long-"))
    store = workdir / "engine.db"
    ray.init(
        include_dashboard=False, log_to_driver=False, _system_config=task_worker_system_config()
    )
    flow = build_compacting_flow(
        str(workdir),
        window_tokens=900,
        retained_message_limit=retained,
        event_stream_capacity_bytes=64 * 1024,
        inline_tools=True,
    )
    engine = await FlowEngine.start(
        [flow],
        store=store,
        namespace=f"dex-long-{uuid.uuid4().hex[:6]}",
        retention=RetentionOptions(keep_finished_executions=200, keep_rpc_requests=100),
    )
    sessions = AgentSessionClient(engine.client, flow)
    latencies: list[float] = []
    rows: dict[int, tuple[float, int, dict[str, int]]] = {}
    token = ""
    try:
        for turn in range(1, turns + 1):
            start = time.perf_counter()
            if turn == 1:
                await sessions.start_session("long", QUESTION)
            else:
                await sessions.send_user_message("long", QUESTION)
            while True:
                message = await sessions.read_event("long", token, timeout=300)
                token = message.resume_token
                if message.value.type.value in ("turn_completed", "turn_failed"):
                    break
            latencies.append((time.perf_counter() - start) * 1e3)
            if turn in MARKS:
                nbytes, counts = stored(store, "long")
                rows[turn] = (statistics.median(latencies[-10:]), nbytes, counts)
                print(f"  turn {turn}: done", flush=True)
        calls = _summaries(workdir)
    finally:
        await engine.shutdown(stop_hosts=True)
        ray.shutdown()
    print(f"\nlong session: {turns} turns, retained_message_limit={retained}, {calls} compactions")
    print(f"{'turn':>6} {'median ms (10 turns)':>22} {'stored KiB':>11}  rows")
    for turn, (ms, nbytes, counts) in rows.items():
        shown = ", ".join(f"{t}={n}" for t, n in counts.items() if n)
        print(f"{turn:>6} {ms:>22.2f} {nbytes / 1024:>11.1f}  {shown}")
    if 100 in rows and turns in rows:
        ratio = rows[turns][0] / rows[100][0]
        growth = rows[turns][1] / rows[100][1]
        met = "met" if ratio <= 1.2 else "NOT met"
        print(f"\nturn {turns} / turn 100 latency: {ratio:.2f} (target <= 1.2: {met})")
        print(f"stored bytes, turn {turns} / turn 100: {growth:.2f}")


def _summaries(workdir: Path) -> int:
    """How many summary calls the model log shows (one per compaction attempt)."""
    return Path(workdir, "model.log").read_text().split().count("summary")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--retained", type=int, default=100)
    args = parser.parse_args()
    asyncio.run(main(args.turns, args.retained))
