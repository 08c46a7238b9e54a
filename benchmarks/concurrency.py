"""Thousands of agent sessions in flight on one node, each waiting on a slow model.

N sessions at once (``--sessions``; 500, 2,000 and 5,000 by default), each of
TURNS turns. A turn is a model call that takes LAT seconds (a scripted model
that sleeps), three read tools (no-ops, on pooled executors: the default
configuration), then a second model call that sleeps LAT. A client per session
starts it (or sends the next user message) and reads the session's
``AgentEvents`` stream (long poll) until the turn's ``turn_completed``.

**Efficiency** = (TURNS x 2 model calls x LAT) / the wall time from the first
``start_session`` to the last ``turn_completed``: 1.0 when the runtime adds
nothing. Printed per run: wall against the ideal, efficiency, a turn's p50 and
p99 against the ideal turn (2 x LAT), turns/s against the ideal (N / (2 x LAT)),
and memory per resident session: the RSS and PSS of every process of the run's
Ray (GCS, raylet, agents, host and executor actors; not the driver) over N,
and the PSS growth since the warmed engine over N (by kind of process, with the
executors the pool started under the load). Then the CPU each kind of process
spent during the run, per turn (where the time goes), the turns/s and the
efficiency that CPU allows on this machine's cores (what a quiet machine would
reach when CPU is all that limits; on a shared machine the measured efficiency
is about that times this run's share of the cores), and the issue's targets with
met / NOT met and the CPU a turn may take for each.

Each run has a Ray of its own (``address="local"``) and a fresh SQLite store in
a temporary directory, with the engine's default configuration (shared hosts);
every shared host is warmed by one session before the run. The defaults match
the issue: (500 sessions, LAT 1 s, 3 turns), (2,000, 2 s, 2), (5,000, 2 s, 2);
another N gets LAT 2 s and 2 turns unless ``--latency`` / ``--turns`` say.
``--quick``: one run of 50 sessions, LAT 0.5 s, 2 turns. ``--profile-driver``:
the driver's cProfile (the clients' side) on stderr. DBOS and Restate are not
run on this workload (the script prints why).

    .venv/bin/python benchmarks/concurrency.py [--quick] [--sessions 500 2000 5000]
        [--latency S] [--turns T] [--profile-driver]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import os
import pstats
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.peers.ray_env import use_repository  # noqa: E402

use_repository()

import psutil  # type: ignore[import-untyped]  # noqa: E402

from benchmarks.peers.workload import percentile  # noqa: E402
from dex_agents_ray import AgentEventType, AgentSessionClient, AgentSessionFlow, ToolEffect  # noqa: E402
from dex_agents_ray.builtin_loop import (  # noqa: E402
    AgentDefinition,
    ModelRequest,
    ScriptedModelClient,
    ScriptedModelReply,
    ScriptedToolCall,
    builtin_agent_session_flow,
    function_tool,
)
from dex_agents_ray.engine import FlowEngine  # noqa: E402

TOOLS_PER_TURN = 3
MODEL_CALLS_PER_TURN = 2
DEFAULT_RUNS: dict[int, tuple[float, int]] = {500: (1.0, 3), 2_000: (2.0, 2), 5_000: (2.0, 2)}
"""N -> (LAT seconds, turns), as in the issue's table."""
OTHER_RUN = (2.0, 2)
QUICK_RUN = (50, 0.5, 2)
"""``--quick``: N, LAT, turns."""
READ_TIMEOUT_S = 600.0
MUST = ((2_000, 2.0, 0.4),)
STRETCH = ((2_000, 2.0, 0.6), (5_000, 2.0, 0.45))
"""The issue's targets: (N, LAT, least efficiency)."""
TARGET_CORES = 2
"""The machine the targets are set for."""


# -- the workload ------------------------------------------------------------------------


async def probe(key: str) -> str:
    """A read tool."""
    return f"ok {key}"


@dataclass(frozen=True)
class SleepingScript:
    """The scripted model: every call sleeps ``latency`` seconds; a user message
    gets three tool calls, their results an answer."""

    latency: float

    async def __call__(self, request: ModelRequest) -> ScriptedModelReply:
        await asyncio.sleep(self.latency)
        if ScriptedModelClient.tool_results(request):
            return ScriptedModelReply(text="answered")
        text = ScriptedModelClient.user_texts(request)[-1]
        return ScriptedModelReply(
            tool_calls=[
                ScriptedToolCall(tool_name="probe", arguments={"key": f"{text}-{i}"})
                for i in range(TOOLS_PER_TURN)
            ]
        )


def bench_flow(latency: float) -> AgentSessionFlow:
    agent = AgentDefinition(
        name="concurrency",
        instructions="Probe, then answer.",
        model=ScriptedModelClient(SleepingScript(latency)),
        tools=[function_tool(probe, effect=ToolEffect.READ)],
    )
    return builtin_agent_session_flow(agent, flow_type="ConcurrencyBench")


@dataclass
class Clock:
    """What the clients saw: each turn's latency and the run's first and last instants."""

    turn_s: list[float] = field(default_factory=list)
    first_start: float = float("inf")
    last_completed: float = 0.0


async def client(sessions: AgentSessionClient, session_id: str, turns: int, clock: Clock) -> None:
    """One session of ``turns`` turns, each waited for on the event stream."""
    token = ""
    for turn in range(turns):
        sent = time.perf_counter()
        if turn == 0:
            clock.first_start = min(clock.first_start, sent)
            await sessions.start_session(session_id, f"{session_id} turn {turn}")
        else:
            await sessions.send_user_message(session_id, f"{session_id} turn {turn}")
        while True:
            message = await sessions.read_event(session_id, token, READ_TIMEOUT_S)
            token = message.resume_token
            kind = message.value.type
            if kind is AgentEventType.TURN_FAILED:
                raise RuntimeError(f"{session_id} turn {turn} failed: {message.value}")
            if kind is AgentEventType.TURN_COMPLETED:
                break
        done = time.perf_counter()
        clock.turn_s.append(done - sent)
        clock.last_completed = max(clock.last_completed, done)


# -- the Ray processes ---------------------------------------------------------------------

ROLES = ("driver", "hosts", "executors", "raylet", "gcs", "other ray")


def ray_processes() -> list[psutil.Process]:
    """Every process of this driver's own Ray (``address="local"`` starts GCS and
    the raylet as children of the driver, and the raylet starts the workers), so
    another job's Ray on a shared machine never counts."""
    return list(psutil.Process(os.getpid()).children(recursive=True))


def role(process: psutil.Process) -> str:
    try:
        text = " ".join([process.name(), *process.cmdline()[:2]])
    except psutil.Error:
        return "other ray"
    if "FlowHost" in text:
        return "hosts"
    if "StepExecutor" in text:
        return "executors"
    if "raylet" in text:
        return "raylet"
    if "gcs_server" in text:
        return "gcs"
    return "other ray"


def cpu_by_process() -> dict[int, tuple[str, float]]:
    """PID -> (role, user + system CPU seconds so far), the driver included."""
    found: dict[int, tuple[str, float]] = {}
    me = psutil.Process(os.getpid())
    for process, kind in [(me, "driver")] + [(p, role(p)) for p in ray_processes()]:
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue
        found[process.pid] = (kind, times.user + times.system)
    return found


def cpu_spent(before: dict[int, tuple[str, float]]) -> dict[str, float]:
    """CPU seconds per role since ``before`` (a process started since counts whole)."""
    spent = dict.fromkeys(ROLES, 0.0)
    for pid, (kind, seconds) in cpu_by_process().items():
        spent[kind] += seconds - before.get(pid, (kind, 0.0))[1]
    return spent


def memory_mib() -> dict[str, tuple[float, float]]:
    """Role -> the summed RSS and PSS (smaps_rollup) of its Ray processes, in MiB;
    the driver's under ``"driver"`` (not a Ray process: not in the totals)."""
    found = {kind: (0.0, 0.0) for kind in ROLES}
    me = psutil.Process(os.getpid())
    for process, kind in [(me, "driver")] + [(p, role(p)) for p in ray_processes()]:
        try:
            rollup = Path(f"/proc/{process.pid}/smaps_rollup").read_text()
        except OSError:
            continue
        rss, pss = found[kind]
        for line in rollup.splitlines():
            if line.startswith("Rss:"):
                rss += int(line.split()[1]) / 1024
            elif line.startswith("Pss:"):
                pss += int(line.split()[1]) / 1024
        found[kind] = (rss, pss)
    return found


def process_counts() -> dict[str, int]:
    """Role -> how many processes it has now (the driver is one)."""
    found = dict.fromkeys(ROLES, 0)
    found["driver"] = 1
    for process in ray_processes():
        found[role(process)] += 1
    return found


def ray_total(memory: dict[str, tuple[float, float]]) -> tuple[float, float]:
    """The RSS and PSS of the Ray processes (the driver left out)."""
    kept = [v for k, v in memory.items() if k != "driver"]
    return sum(v[0] for v in kept), sum(v[1] for v in kept)


def busy_share(before: Any) -> float:
    """The share of the machine's CPU time since ``before`` that was not idle."""
    after = psutil.cpu_times()

    def total(times: Any) -> float:  # guest time is counted in user time already
        return float(sum(times)) - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)

    elapsed = total(after) - total(before)
    idle = (after.idle - before.idle) + (after.iowait - before.iowait)
    return 1 - idle / elapsed if elapsed > 0 else 0.0


# -- one run ---------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Result:
    sessions: int
    latency: float
    turns: int
    wall_s: float
    turn_s: list[float]
    rss_mib: float
    pss_mib: float
    pss_growth_mib: float
    pss_growth_by_role: dict[str, float]
    """PSS growth since the warmed engine per role, in MiB (the driver's included)."""
    processes: dict[str, tuple[int, int]]
    """Role -> its processes before the run and after it."""
    cpu_s: dict[str, float]
    machine_busy: float
    """The share of the machine's CPU time that was not idle during the run
    (every process's, another job's included)."""
    load: float
    """The 1-minute load average at the end of the run."""

    @property
    def ideal_s(self) -> float:
        return self.turns * MODEL_CALLS_PER_TURN * self.latency

    @property
    def efficiency(self) -> float:
        return self.ideal_s / self.wall_s

    @property
    def turns_per_s(self) -> float:
        return self.sessions * self.turns / self.wall_s

    @property
    def ideal_turns_per_s(self) -> float:
        return self.sessions / (MODEL_CALLS_PER_TURN * self.latency)


async def warm(engine: FlowEngine, sessions: AgentSessionClient) -> None:
    """Start every shared host and run one session on each, so that the Flow
    definition, the modules its Steps import and an executor are loaded, as in a
    long-lived pool."""
    names: dict[str, str] = {}
    for i in range(1000):
        names.setdefault(engine.placement.host_name(f"warm-{i}"), f"warm-{i}")
    clock = Clock()
    await asyncio.gather(*(client(sessions, sid, 1, clock) for sid in names.values()))


async def run_one(count: int, latency: float, turns: int, workdir: Path, profile: bool) -> Result:
    import ray

    # address="local": a Ray of its own, never a `ray start` head running here.
    ray.init(address="local", include_dashboard=False, log_to_driver=False)
    engine: FlowEngine | None = None
    try:
        flow = bench_flow(latency)
        store = workdir / f"engine-{uuid.uuid4().hex[:8]}.db"
        engine = await FlowEngine.start(
            [flow], store=store, namespace=f"concurrency-{uuid.uuid4().hex[:8]}"
        )
        sessions = AgentSessionClient(engine.client, flow)
        await warm(engine, sessions)
        memory_before = memory_mib()
        processes_before = process_counts()
        cpu_before = cpu_by_process()
        machine_before = psutil.cpu_times()
        clock = Clock()
        profiler = cProfile.Profile() if profile else None
        if profiler is not None:
            profiler.enable()
        await asyncio.gather(*(client(sessions, f"s{i}", turns, clock) for i in range(count)))
        if profiler is not None:
            profiler.disable()
        wall = clock.last_completed - clock.first_start
        cpu = cpu_spent(cpu_before)
        machine_busy = busy_share(machine_before)
        memory = memory_mib()  # every session is still resident (no passivation)
        rss, pss = ray_total(memory)
        if profiler is not None:
            print_profile(profiler, count)
        return Result(
            sessions=count,
            latency=latency,
            turns=turns,
            wall_s=wall,
            turn_s=clock.turn_s,
            rss_mib=rss,
            pss_mib=pss,
            pss_growth_mib=pss - ray_total(memory_before)[1],
            pss_growth_by_role={k: memory[k][1] - memory_before[k][1] for k in ROLES},
            processes={k: (processes_before[k], n) for k, n in process_counts().items()},
            cpu_s=cpu,
            machine_busy=machine_busy,
            load=os.getloadavg()[0],
        )
    finally:
        if engine is not None:
            await engine.shutdown(stop_hosts=True)
        ray.shutdown()


def print_profile(profiler: cProfile.Profile, count: int) -> None:
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(25)
    print(f"\ndriver profile, N={count:,} (cProfile, top 25 by own time):", file=sys.stderr)
    print(out.getvalue(), file=sys.stderr, flush=True)


# -- the report --------------------------------------------------------------------------------


def print_table(results: list[Result]) -> None:
    print(
        "\n| N sessions | LAT | turns | wall / ideal | efficiency | turn p50 / p99 / ideal "
        "| turns/s / ideal | RSS / session | PSS / session | PSS growth / session |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        p50 = percentile(r.turn_s, 0.5)
        p99 = percentile(r.turn_s, 0.99)
        ideal_turn = MODEL_CALLS_PER_TURN * r.latency
        print(
            f"| {r.sessions:,} | {r.latency:g} s | {r.turns} "
            f"| {r.wall_s:.1f} / {r.ideal_s:.1f} s | {r.efficiency:.2f} "
            f"| {p50:.2f} / {p99:.2f} / {ideal_turn:.1f} s "
            f"| {r.turns_per_s:,.0f} / {r.ideal_turns_per_s:,.0f} "
            f"| {r.rss_mib * 1024 / r.sessions:,.0f} KiB "
            f"| {r.pss_mib * 1024 / r.sessions:,.0f} KiB "
            f"| {r.pss_growth_mib * 1024 / r.sessions:,.1f} KiB |"
        )
    print(
        "RSS, PSS: every process of the run's Ray (not the driver) after the last turn, "
        "every session resident, over N;\nPSS growth: since the warmed engine, by process "
        "(MiB; the driver's apart; processes before -> after):"
    )
    for r in results:
        parts = ", ".join(
            f"{k} {r.pss_growth_by_role[k]:,.0f} ({r.processes[k][0]} -> {r.processes[k][1]})"
            for k in ROLES
        )
        print(f"  N={r.sessions:,}: {parts}")


def print_cpu(results: list[Result]) -> None:
    cores = psutil.cpu_count() or 1
    print(f"\nCPU during each run (seconds; ms per turn in brackets; {cores} cores here):")
    print(
        "| N sessions | " + " | ".join(ROLES) + " | total | CPU-bound turns/s "
        "| CPU-bound efficiency | ours / machine busy | load |"
    )
    print("|---|" + "---|" * (len(ROLES) + 5))
    for r in results:
        turns = r.sessions * r.turns
        cells = " | ".join(f"{r.cpu_s[k]:.1f} ({r.cpu_s[k] * 1e3 / turns:.1f})" for k in ROLES)
        total = sum(r.cpu_s.values())
        print(
            f"| {r.sessions:,} | {cells} | {total:.1f} ({total * 1e3 / turns:.1f}) "
            f"| {cores * turns / total:,.0f} "
            f"| {min(1.0, cores * turns / total / r.ideal_turns_per_s):.2f} "
            f"| {total / (cores * r.wall_s):.0%} / {r.machine_busy:.0%} | {r.load:.1f} |"
        )
    print(
        "CPU-bound turns/s: the cores over the CPU a turn took, what the node could "
        "reach with the cores to itself\n(CPU-bound efficiency: that over the ideal "
        "turns/s, at most 1); ours / machine busy: this run's share of "
        "cores x wall, and the share that any process kept busy (others' jobs included)."
    )


def _verdict(results: list[Result], count: int, latency: float, least: float) -> str:
    # The CPU a turn may take for the target to hold on TARGET_CORES cores when
    # CPU is all that limits: the cores over the turns/s the target asks for.
    budget = TARGET_CORES * 1e3 / (least * count / (MODEL_CALLS_PER_TURN * latency))
    for r in results:
        if r.sessions == count and r.latency == latency:
            met = "met" if r.efficiency >= least else "NOT met"
            spent = sum(r.cpu_s.values()) * 1e3 / (r.sessions * r.turns)
            return (
                f"{r.efficiency:.2f} ({met}); the CPU budget of a turn on {TARGET_CORES} "
                f"cores {budget:.1f} ms, this run {spent:.1f} ms"
            )
    return (
        f"not measured in this run (the CPU budget of a turn on {TARGET_CORES} cores "
        f"{budget:.1f} ms)"
    )


def print_targets(results: list[Result]) -> None:
    print(f"\ntargets (issue 48; {TARGET_CORES} cores):")
    for label, targets in (("must", MUST), ("stretch", STRETCH)):
        for count, latency, least in targets:
            print(
                f"  {label}: efficiency >= {least} at {count:,} sessions, LAT {latency:g} s: "
                f"{_verdict(results, count, latency, least)}"
            )
    print(
        "  must: memory per resident session reported: "
        + ("yes (above)" if results else "not measured in this run")
    )


PEERS_NOT_RUN = (
    "DBOS, Restate: not run. benchmarks/peers/ drives them with the instant workload "
    "of workload.py (a fixed module of steps per peer, Restate's served by hypercorn "
    "from restate_service.py); a sleeping-model turn needs a DBOS workflow and a Restate "
    "service of its own, and the `bench` extra and restate-server are optional installs."
)


def runs(args: argparse.Namespace) -> Iterator[tuple[int, float, int]]:
    if args.quick:
        count, latency, turns = QUICK_RUN
        yield count, args.latency or latency, args.turns or turns
        return
    for count in args.sessions:
        latency, turns = DEFAULT_RUNS.get(count, OTHER_RUN)
        yield count, args.latency or latency, args.turns or turns


async def measure(args: argparse.Namespace) -> None:
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="concurrency") as workdir:
        for count, latency, turns in runs(args):
            print(f"N={count:,} LAT={latency:g} s turns={turns}...", file=sys.stderr, flush=True)
            result = await run_one(count, latency, turns, Path(workdir), args.profile_driver)
            print(
                f"  wall {result.wall_s:.1f} s, efficiency {result.efficiency:.2f}",
                file=sys.stderr,
                flush=True,
            )
            results.append(result)
    print_table(results)
    print_cpu(results)
    print_targets(results)
    print(f"\n{PEERS_NOT_RUN}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sessions", type=int, nargs="+", default=list(DEFAULT_RUNS), metavar="N")
    parser.add_argument("--latency", type=float, default=None, help="LAT in seconds")
    parser.add_argument("--turns", type=int, default=None)
    parser.add_argument(
        "--quick", action="store_true", help=f"one small run: N, LAT, turns = {QUICK_RUN}"
    )
    parser.add_argument(
        "--profile-driver", action="store_true", help="cProfile the driver (stderr)"
    )
    args = parser.parse_args()
    asyncio.run(measure(args))


if __name__ == "__main__":
    main()
