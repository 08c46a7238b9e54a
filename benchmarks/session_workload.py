"""Agent sessions on the engine: the peers' workload, through real sessions.

Workload (as in shared/research/perf-peers.md): a session of 10 turns; a turn
is a model call that asks for 3 tools, the 3 tool calls (parallel Steps), and
a model call that answers: 5 workload steps per turn, 50 per session. The
model is scripted and the tools are no-ops, so only the runtime is timed.

Prints, for each configuration measured in this run: ms per workload step at
C=1 (median session time / 50), steps/s at C concurrent sessions, the engine
Steps one session really executes, and the floors (plain asyncio, one SQLite
INSERT+COMMIT per step). Also: the activation latency of a passivated session,
and resident actors after 1,000 sessions go idle with passivation on.

    .venv/bin/python benchmarks/session_workload.py [--sessions 5] [--concurrency 50]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import ray

from dex_agents_ray import AgentSessionClient, ToolCallStepOptions, ToolEffect
from dex_agents_ray.builtin_loop import (
    AgentDefinition,
    ModelRequest,
    ScriptedModelClient,
    ScriptedModelReply,
    ScriptedToolCall,
    builtin_agent_session_flow,
    function_tool,
)
from dex_agents_ray.engine import FlowEngine, RayTaskOptions
from dex_agents_ray.engine._engine import task_worker_system_config

TURNS = 10
TOOLS = 3
WORKLOAD_STEPS = TURNS * (TOOLS + 2)


def _reply(request: ModelRequest) -> ScriptedModelReply:
    if ScriptedModelClient.tool_results(request):
        return ScriptedModelReply(text="x" * 400)
    return ScriptedModelReply(
        tool_calls=[
            ScriptedToolCall(tool_call_id=f"c{i}", tool_name=f"tool_{i}", arguments={"n": i})
            for i in range(TOOLS)
        ]
    )


def build_flow(inline: bool) -> Any:
    options = (
        ToolCallStepOptions(run_inline=True)
        if inline
        else ToolCallStepOptions(ray=RayTaskOptions(num_cpus=0.1))
    )

    def make(i: int) -> Any:
        async def tool(n: int) -> str:
            return "y" * 200

        tool.__name__ = f"tool_{i}"
        tool.__doc__ = "A no-op tool."
        return function_tool(effect=ToolEffect.READ, step_options=options)(tool)

    agent = AgentDefinition(
        name="bench",
        instructions="Benchmark agent.",
        model=ScriptedModelClient(_reply),
        tools=[make(i) for i in range(TOOLS)],
    )
    return builtin_agent_session_flow(agent, flow_type=f"Bench{'Inline' if inline else 'Tasks'}")


async def run_session(sessions: AgentSessionClient, session_id: str) -> float:
    """One session of ``TURNS`` turns; waits on the AgentEvents stream (a long poll)."""
    start = time.perf_counter()
    token = ""
    await sessions.start_session(session_id, "turn 1")
    for turn in range(1, TURNS + 1):
        if turn > 1:
            await sessions.send_user_message(session_id, f"turn {turn}")
        while True:
            message = await sessions.read_event(session_id, token, timeout=120)
            token = message.resume_token
            if message.value.type.value in ("turn_completed", "turn_failed"):
                break
    return time.perf_counter() - start


async def measure(
    directory: Path, inline: bool, placement: str, sessions_c1: int, concurrency: int
) -> dict[str, float]:
    flow = build_flow(inline)
    name = f"{'inline' if inline else 'tasks'}-{placement}"
    engine = await FlowEngine.start(
        [flow], store=directory / f"{name}.db", namespace=f"bench-{name}", placement=placement
    )
    sessions = AgentSessionClient(engine.client, flow)
    try:
        await run_session(sessions, f"{name}-warm")
        c1 = [await run_session(sessions, f"{name}-c1-{i}") for i in range(sessions_c1)]
        history = await engine.client.read_step_history(f"{name}-c1-0")
        engine_steps = len({h.step_execution_id for h in history if h.step_execution_id})
        start = time.perf_counter()
        await asyncio.gather(*(run_session(sessions, f"{name}-cN-{i}") for i in range(concurrency)))
        rate = concurrency * WORKLOAD_STEPS / (time.perf_counter() - start)
    finally:
        await engine.shutdown(stop_hosts=True)
    return {
        "ms_per_step_c1": statistics.median(c1) / WORKLOAD_STEPS * 1000,
        "steps_per_s": rate,
        "engine_steps": engine_steps,
    }


async def passivation_figures(directory: Path, idle_sessions: int) -> dict[str, float]:
    """Activation latency of a passivated session; resident actors for idle sessions."""
    flow = build_flow(inline=True)
    engine = await FlowEngine.start(
        [flow],
        store=directory / "idle.db",
        namespace="bench-idle",
        placement="shared",
        passivate_after=timedelta(seconds=1),
    )
    sessions = AgentSessionClient(engine.client, flow)
    try:
        ids = [f"idle-{i}" for i in range(idle_sessions)]
        for chunk in range(0, len(ids), 100):
            await asyncio.gather(*(sessions.start_session(i) for i in ids[chunk : chunk + 100]))
        while await engine.store.passivated_count() < len(ids):  # noqa: ASYNC110
            await asyncio.sleep(0.2)
        actors = [
            a["name"]
            for a in ray.util.list_named_actors(all_namespaces=True)
            if a["namespace"] == "bench-idle" and a["name"].startswith("dexrun:")
        ]
        latencies = []
        for session_id in ids[:20]:
            start = time.perf_counter()
            await sessions.get_agent_snapshot(session_id)
            latencies.append(time.perf_counter() - start)
    finally:
        await engine.shutdown(stop_hosts=True)
    return {
        "idle_sessions": idle_sessions,
        "resident_session_actors": len(actors),
        "activation_ms": statistics.median(latencies) * 1000,
    }


def sqlite_floor(directory: Path, steps: int = 500) -> float:
    conn = sqlite3.connect(directory / "floor.db", isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE IF NOT EXISTS s (id INTEGER PRIMARY KEY, doc TEXT)")
    start = time.perf_counter()
    for _ in range(steps):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO s (doc) VALUES (?)", ("x" * 400,))
        conn.execute("COMMIT")
    conn.close()
    return (time.perf_counter() - start) / steps * 1000


async def main(sessions_c1: int, concurrency: int, idle_sessions: int) -> None:
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    directory = Path(tempfile.mkdtemp(prefix="dex-session-bench-"))
    ray.init(
        include_dashboard=False,
        namespace="bench",
        log_to_driver=False,
        _system_config=task_worker_system_config(),
    )
    try:
        floor = sqlite_floor(directory)
        rows = {}
        for inline, placement in ((True, "dedicated"), (True, "shared"), (False, "shared")):
            label = f"{'inline' if inline else 'Ray-task'} tools, {placement}"
            rows[label] = await measure(directory, inline, placement, sessions_c1, concurrency)
        idle = await passivation_figures(directory, idle_sessions)
    finally:
        ray.shutdown()
    print(f"\nworkload: {TURNS} turns x (model + {TOOLS} tools + model) = {WORKLOAD_STEPS} steps")
    print(f"floor: one SQLite INSERT+COMMIT (WAL, FULL) = {floor:.3f} ms")
    print(
        f"{'configuration':<28}{'ms/step C=1':>13}{'x sqlite':>10}{f'steps/s C={concurrency}':>16}"
        f"{'engine Steps/session':>22}"
    )
    for label, row in rows.items():
        print(
            f"{label:<28}{row['ms_per_step_c1']:>13.2f}{row['ms_per_step_c1'] / floor:>10.1f}"
            f"{row['steps_per_s']:>16.0f}{row['engine_steps']:>22.0f}"
        )
    print(
        f"\n{idle['idle_sessions']} idle sessions with passivation: "
        f"{idle['resident_session_actors']} resident session actors; "
        f"activation of a passivated session (first snapshot call), median "
        f"{idle['activation_ms']:.1f} ms"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=5, help="sequential sessions at C=1")
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--idle-sessions", type=int, default=1000)
    args = parser.parse_args()
    asyncio.run(main(args.sessions, args.concurrency, args.idle_sessions))
