"""Idle sessions cost no process: resident actors and activation latency.

Starts ``--idle-sessions`` agent sessions (the agent-loop benchmark's session flow)
with passivation on, waits until every one has left memory, counts the session
actors still resident, and times the first call to 20 passivated sessions (the
activation: a host takes the run back from the store). Shared placement by
default; ``--placement dedicated`` shows what an actor per session costs.

    .venv/bin/python benchmarks/passivation.py [--idle-sessions 1000] [--placement shared]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import ray

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.peers.dex_engine import session_flow  # noqa: E402
from dex_agents_ray import AgentSessionClient  # noqa: E402
from dex_agents_ray.engine import FlowEngine  # noqa: E402
from dex_agents_ray.engine._engine import task_worker_system_config  # noqa: E402

NAMESPACE = "bench-idle"


def _session_actors() -> list[str]:
    return [
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["namespace"] == NAMESPACE and a["name"].startswith("dexrun:")
    ]


async def main(idle_sessions: int, placement: str) -> None:
    directory = Path(tempfile.mkdtemp(prefix="dex-passivation-"))
    flow = session_flow(inline=True)
    engine = await FlowEngine.start(
        [flow],
        store=directory / "idle.db",
        namespace=NAMESPACE,
        placement=placement,
        passivate_after=timedelta(seconds=1),
    )
    sessions = AgentSessionClient(engine.client, flow)
    try:
        ids = [f"idle-{i}" for i in range(idle_sessions)]
        start = time.perf_counter()
        for chunk in range(0, len(ids), 100):
            await asyncio.gather(*(sessions.start_session(i) for i in ids[chunk : chunk + 100]))
        started = time.perf_counter() - start
        while await engine.store.passivation.passivated_count() < len(ids):  # noqa: ASYNC110
            await asyncio.sleep(0.2)
        resident = _session_actors()
        latencies = []
        for session_id in ids[:20]:
            begin = time.perf_counter()
            await sessions.get_agent_snapshot(session_id)
            latencies.append(time.perf_counter() - begin)
    finally:
        await engine.shutdown(stop_hosts=True)
    print(f"\n{idle_sessions} idle sessions, {placement} placement, passivate_after=1 s")
    print(f"  started in {started:.1f} s ({idle_sessions / started:.0f} sessions/s)")
    print(f"  resident session actors once idle: {len(resident)}")
    print(
        f"  activation of a passivated session (its first snapshot call): median "
        f"{statistics.median(latencies) * 1000:.1f} ms, max {max(latencies) * 1000:.1f} ms"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--idle-sessions", type=int, default=1000)
    parser.add_argument("--placement", choices=("shared", "dedicated"), default="shared")
    args = parser.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    repo = str(Path(__file__).resolve().parents[1])
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (repo, os.environ.get("PYTHONPATH", "")) if p
    )
    ray.init(
        include_dashboard=False,
        namespace="bench",
        log_to_driver=False,
        _system_config=task_worker_system_config(),
    )
    try:
        asyncio.run(main(args.idle_sessions, args.placement))
    finally:
        ray.shutdown()
