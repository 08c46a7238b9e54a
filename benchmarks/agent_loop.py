"""The agent-loop workload through this project and its peers, one table, one run.

Workload (``benchmarks/peers/workload.py``, as in shared/research/perf-peers.md): a
session is 10 turns of model -> 3 parallel tools -> model, 50 durable steps; the
model is scripted and the tools are no-ops, so only the runtime is timed. Every job
runs in a fresh process (``benchmarks.peers.run.run_job``) with a fresh store and 2
warm-up sessions: at C=1 sequential sessions, each timed (ms/step = median session
time / 50); at C=50 and C=500 that many sessions at once (steps/s).

Rows: the floors (plain asyncio; raw SQLite, one fsync per step and group commit),
DBOS and LangGraph when the ``bench`` extra is installed, Restate when its server is
installed too (``scripts/install-restate``; the server's and the service's CPU and
RSS count), and this project: the workload as one engine Flow per session (the
peers' shape: one workflow per session) and as real agent sessions
(``builtin_agent_session_flow``; the client sends each user message and reads the
event stream). The headline row is the default configuration,
``dex:session-shared-ray``: shared hosts, tool Steps sent to Ray on pooled
executors, and the client's and hosts' calls on one node by Unix sockets after
the first (``engine/actors/_channel.py``); ``session-shared-ray-nosockets`` is the same with every
call a Ray call. The others run tools inline in the host, on dedicated hosts, or as
one Ray task per attempt (``session-shared-tasks``). Dedicated placement is not run
at C=500 (an actor per session: 500 processes), nor are Ray-task tools (tens of
steps/s at C=50). ``dex:pydantic-ai`` is the headline row's configuration with an
unchanged ``pydantic_ai.Agent`` in place of the built-in loop
(``pydantic_ai_session_flow``; ``benchmarks/peers/pydantic_ai_peer.py``): a
``FunctionModel`` scripted to ask for the same 3 calls in one response and then
answer, 3 no-op ``@agent.tool_plain`` tools, ``read`` by policy. Its floor,
``pydantic-ai``, is the same agent run plainly in one process (Pydantic AI's own
``agent.run`` loop runs the tools; no durability). ``dex:openai-agents`` is the
same with an unchanged OpenAI Agents SDK ``agents.Agent``
(``openai_agents_session_flow``; ``benchmarks/peers/openai_agents_peer.py``): a
scripted ``agents`` ``Model`` asks for the same 3 calls and answers, 3 no-op
``@function_tool`` tools; its floor, ``openai-agents``, runs the agent with the
SDK's own ``Runner.run`` in one process. Peak RSS counts the host and
executor actors; Ray's own processes are reported apart, and "Ray PSS" sums the
proportional set size of every Ray process (hosts, executors, task workers, GCS,
raylet, agents) at the end of the C=50 job. CPU ms/step is the CPU time of the
client process (all threads) plus its host and executor actors over the timed
sessions, divided by their steps (not Ray's own processes); the table shows C=1's.
A second table splits our rows' CPU per turn by process: the client (this
job's process), the hosts, the executors.
The run ends with the fan-out issue's must-meet targets for the headline row,
computed from this run (a turn's p99 against its median counts the turns of the
timed sessions, after the warm-up ones), then each framework adapter's figures
(``dex:pydantic-ai``, ``dex:openai-agents``, where run): its CPU ms/step at C=50
against the headline row's from the same run (target: at most 1.5x), its C=1
ms/step against its plain row (what durability costs that framework's user), and
the bytes of ``framework_run_state`` (and of stored messages) per ``RunModel``.
Those bytes are not from the jobs: this process drives 10 turns of each runner
(the adapter's and the built-in loop's) by hand, storing messages as the session
does, and weighs each ``run_model_step`` outcome (``benchmarks/peers/run_state.py``).

Interleaved rounds (``--rounds``) give medians; the machine is shared and noisy:
on one machine the same job's ms/step moved between 2.5 and 4.5 from one minute
to the next, for DBOS and for us alike. So each of our C=1 jobs runs paired with
a DBOS job (``run_paired``): both processes open, then their timed sessions
alternate one at a time, and the "DBOS C=1" ratio (and the C=1 target) is DBOS's
median over ours from the same minutes. The DBOS row's own C=1 figure is its solo
job, like every other row's (``--unpaired`` runs our C=1 jobs solo too).

    .venv/bin/python benchmarks/agent_loop.py [--rounds 1] [--sessions 5] [--skip-500]
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.peers.run import PeerJobError, run_job, run_paired  # noqa: E402
from benchmarks.peers.workload import ROLES  # noqa: E402

FLOORS = ("plain", "pydantic-ai", "openai-agents", "sqlite:full", "sqlite:group")
PEERS = ("dbos:wal", "langgraph:async", "restate")
OURS = (
    "dex:session-shared-ray",
    "dex:session-shared-ray-nosockets",
    "dex:flow-shared",
    "dex:flow-dedicated",
    "dex:session-shared",
    "dex:session-dedicated",
    "dex:session-shared-tasks",
    "dex:pydantic-ai",
    "dex:openai-agents",
)
HEADLINE = "dex:session-shared-ray"
"""The default configuration: agent sessions whose tools go to Ray (pooled executors)."""
ANCHOR = "dbos:wal"
"""The peer that our C=1 jobs are paired with."""
ADAPTER_CPU_TARGET = 1.5
"""An adapter row's CPU ms/step at C=50 at most this many times the headline's."""


@dataclass(frozen=True)
class _Adapter:
    """A row that runs an unchanged framework agent in the headline configuration."""

    framework: str
    plain: str
    """The row of the same agent run plainly in process: no durability."""
    plain_loop: str
    """What runs the plain row's agent loop."""
    module: str
    """The peer module whose ``run_state_bytes()`` weighs the adapter's runner."""


ADAPTERS = {
    "dex:pydantic-ai": _Adapter(
        framework="Pydantic AI",
        plain="pydantic-ai",
        plain_loop="agent.run",
        module="benchmarks.peers.pydantic_ai_peer",
    ),
    "dex:openai-agents": _Adapter(
        framework="OpenAI Agents SDK",
        plain="openai-agents",
        plain_loop="Runner.run",
        module="benchmarks.peers.openai_agents_peer",
    ),
}


def _jobs(systems: tuple[str, ...], with_500: bool) -> list[tuple[str, int]]:
    jobs = []
    for system in systems:
        jobs += [(system, 1), (system, 50)]
        if with_500 and "dedicated" not in system and "tasks" not in system:
            jobs.append((system, 500))
    return jobs


def _median(results: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in results if key in r]
    return statistics.median(values) if values else None


def _ratio(top: float | None, bottom: float | None) -> str:
    return "-" if top is None or not bottom else f"{top / bottom:.2f}"


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _ray_pss(figure: Any, system: str) -> float | None:
    """PSS of every Ray process of the job at C=50: hosts, executors, task
    workers and Ray's own (GCS, raylet, agents)."""
    helpers = figure(system, 50, "helper_pss_mb")
    platform = figure(system, 50, "platform_pss_mb")
    if helpers is None and platform is None:
        return None
    return (helpers or 0.0) + (platform or 0.0)


def _dbos_c1(figure: Any, system: str) -> str:
    """DBOS's C=1 ms/step over the system's: paired (the same minutes) when it ran so."""
    paired = figure(system, 1, "paired_ratio")
    if paired is not None:
        return f"{paired:.2f}"
    return _ratio(figure(ANCHOR, 1, "ms_per_step"), figure(system, 1, "ms_per_step"))


def _targets(figure: Any) -> None:
    """The fan-out issue's must-meet targets for the headline row, from this run."""
    ours, inline = HEADLINE, "dex:session-shared"
    rate, inline_rate = figure(ours, 50, "steps_per_s"), figure(inline, 50, "steps_per_s")
    dbos_rate = figure("dbos:wal", 50, "steps_per_s")
    pss, inline_pss = _ray_pss(figure, ours), _ray_pss(figure, inline)
    print(f"\ntargets for {ours} (the default: tools sent to Ray)")
    rows = [
        ("C=50 >= 0.8x inline-tool sessions", _ratio(rate, inline_rate), 0.8),
        ("C=50 >= 2x DBOS", _ratio(rate, dbos_rate), 2.0),
        ("C=1 faster than DBOS (DBOS ms / ours)", _dbos_c1(figure, ours), 1.0),
    ]
    for label, value, goal in rows:
        verdict = "-" if value == "-" else ("met" if float(value) >= goal else "NOT met")
        print(f"  {label:<40}{value:>8}  {verdict}")
    if pss is not None and inline_pss is not None:
        extra = pss - inline_pss
        verdict = "met" if extra <= 1536 else "NOT met"
        print(f"  {'Ray PSS at C=50 within 1.5 GB of inline':<40}{extra:>+7,.0f}M  {verdict}")
    for concurrency in (1, 50):
        p50 = figure(ours, concurrency, "turn_ms_p50")
        p99 = figure(ours, concurrency, "turn_ms_p99")
        value = _ratio(p99, p50)
        verdict = "-" if value == "-" else ("met" if float(value) <= 10 else "NOT met")
        label = f"C={concurrency} turn p99 within 10x its median"
        detail = "" if p50 is None or p99 is None else f"  ({p50:,.1f} / {p99:,.1f} ms)"
        print(f"  {label:<40}{value:>8}  {verdict}{detail}")
    calls = [figure(ours, c, "host_calls_per_turn") for c in (1, 50)]
    if None not in calls:
        label = "client -> host calls a turn (RPC + polls)"
        print(f"  {label:<42}C=1 {calls[0]:.2f}, C=50 {calls[1]:.2f}")


def _bytes_line(system: str, sizes: dict[str, Any]) -> str:
    low, high = sizes["run_state_bytes_min_max"]
    return (
        f"  {system} framework_run_state: {sizes['run_state_bytes_per_run_model']:,.0f} B "
        f"per RunModel ({low:,}-{high:,} B on each tool-call response, none on answers; "
        f"{sizes['run_models']} RunModels); stored messages "
        f"{sizes['message_bytes_per_run_model']:,.0f} B per RunModel "
        f"({sizes['message_bytes_per_tool_call_response']:,.0f} B on each tool-call "
        f"response, {sizes['message_bytes_per_answer']:,.0f} B on each answer)"
    )


def _adapters(figure: Any, systems: tuple[str, ...]) -> None:
    """The framework adapters' figures: CPU at C=50 against the headline row's,
    the cost of durability against the plain run, and run-state bytes per RunModel."""

    def cpu(system: str, concurrency: int) -> float | None:
        value: float | None = figure(system, concurrency, "cpu_ms_per_step")
        return value

    print(f"\nframework adapters ({HEADLINE}'s configuration, an unchanged framework agent)")
    print(
        f"  {HEADLINE} CPU ms/step at C=50: {_fmt(cpu(HEADLINE, 50))}, "
        f"at C=1: {_fmt(cpu(HEADLINE, 1))}"
    )
    builtin: dict[str, Any] | None = None
    for system, adapter in ADAPTERS.items():
        if system not in systems:
            continue
        ratio = _ratio(cpu(system, 50), cpu(HEADLINE, 50))
        verdict = ""
        if ratio != "-":
            verdict = "  met" if float(ratio) <= ADAPTER_CPU_TARGET else "  NOT met"
        print(
            f"{system} ({adapter.framework}) CPU ms/step at C=50: {_fmt(cpu(system, 50))} "
            f"({ratio} x {HEADLINE}; target <= {ADAPTER_CPU_TARGET}x){verdict}"
        )
        print(
            f"  CPU ms/step at C=1: {_fmt(cpu(system, 1))} "
            f"({_ratio(cpu(system, 1), cpu(HEADLINE, 1))}x {HEADLINE})"
        )
        ms, plain = figure(system, 1, "ms_per_step"), figure(adapter.plain, 1, "ms_per_step")
        if ms is not None and plain is not None:
            print(
                f"  C=1 ms/step: {ms:.3f} durable, {plain:.3f} plain ({adapter.plain}: "
                f"{adapter.plain_loop} in process, no durability): durability adds "
                f"{ms - plain:.3f} ms/step ({_ratio(ms, plain)}x)"
            )
        sizes = importlib.import_module(adapter.module).run_state_bytes()
        builtin = sizes.pop(HEADLINE, builtin)
        for name, figures in sizes.items():
            print(_bytes_line(name, figures))
    if builtin is not None:
        print(_bytes_line(HEADLINE, builtin))


def _run(system: str, concurrency: int, sessions: int, paired: bool) -> dict[str, Any]:
    """One job; ours at C=1 paired with the anchor when ``paired``."""
    if not (paired and concurrency == 1 and system in OURS):
        return run_job(system, concurrency, sessions)
    result, anchor = run_paired(system, ANCHOR, sessions)
    if "skipped" not in result and "skipped" not in anchor:
        result["paired_anchor_ms_per_step"] = anchor["ms_per_step"]
        result["paired_ratio"] = anchor["ms_per_step"] / result["ms_per_step"]
    return result


def main(
    rounds: int,
    sessions: int,
    with_500: bool,
    only: list[str] | None = None,
    paired: bool = True,
) -> None:
    systems: tuple[str, ...] = FLOORS + PEERS + OURS
    if only:
        unknown = sorted(set(only) - set(systems))
        if unknown:
            raise SystemExit(f"--systems: unknown {unknown}; choose from {list(systems)}")
        systems = tuple(s for s in systems if s in only)
    jobs = _jobs(systems, with_500)
    results: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    skipped: dict[str, str] = {}
    for round_number in range(rounds):
        # Rotate the order each round so slow drifts of the machine hit every system.
        shift = round_number * 3 % len(jobs)
        for system, concurrency in jobs[shift:] + jobs[:shift]:
            try:
                result = _run(system, concurrency, sessions, paired)
            except PeerJobError as error:
                skipped[system] = f"failed: {error}"
                continue
            if "skipped" in result:
                skipped[system] = result["skipped"]
                continue
            results[(system, concurrency)].append(result)
            pairing = ""
            if "paired_ratio" in result:
                pairing = (
                    f" (paired {ANCHOR}: {result['paired_anchor_ms_per_step']:.3f} ms/step, "
                    f"{result['paired_ratio']:.2f}x)"
                )
            print(
                f"  round {round_number + 1}: {system} C={concurrency}: "
                f"{result['ms_per_step']:.3f} ms/step, {result['steps_per_s']:,.0f} steps/s"
                f"{pairing}",
                file=sys.stderr,
                flush=True,
            )

    def figure(system: str, concurrency: int, key: str) -> float | None:
        return _median(results.get((system, concurrency), []), key)

    print(
        f"\nagent loop: 10 turns x (model + 3 tools + model) = 50 steps/session; {rounds} round(s)"
    )
    # The name column fits the longest row name, so every figure stays in its column.
    width = max(26, *(len(system) + 2 for system in systems))
    header = (
        f"{'system':<{width}}{'ms/step C=1':>12}{'CPU ms/step':>12}{'steps/s C=50':>14}"
        f"{'steps/s C=500':>15}{'RSS MB C=50':>13}{'Ray MB':>8}{'Ray PSS MB':>12}"
    )
    print(header)
    for system in systems:
        if system in skipped and not results.get((system, 1)):
            print(f"{system:<{width}}skipped: {skipped[system]}")
            continue
        print(
            f"{system:<{width}}{_fmt(figure(system, 1, 'ms_per_step'), 3):>12}"
            f"{_fmt(figure(system, 1, 'cpu_ms_per_step')):>12}"
            f"{_fmt(figure(system, 50, 'steps_per_s'), 0):>14}"
            f"{_fmt(figure(system, 500, 'steps_per_s'), 0):>15}"
            f"{_fmt(figure(system, 50, 'peak_rss_mb'), 0):>13}"
            f"{_fmt(figure(system, 50, 'platform_rss_mb'), 0):>8}"
            f"{_fmt(_ray_pss(figure, system), 0):>12}"
        )

    floor = figure("sqlite:full", 1, "ms_per_step")
    print("\nratios (peer / ours: above 1 means we are faster; DBOS C=1 paired where run so)")
    print(
        f"{'ours':<{width}}{'x sqlite:full':>14}{'DBOS C=1':>10}{'LG C=1':>9}{'DBOS C=50':>11}"
        f"{'LG C=50':>9}{'Restate C=1':>13}{'Restate C=50':>14}"
    )
    for system in OURS:
        ms = figure(system, 1, "ms_per_step")
        rate = figure(system, 50, "steps_per_s")
        if ms is None:
            continue
        print(
            f"{system:<{width}}{_fmt(ms / floor if floor else None):>14}"
            f"{_dbos_c1(figure, system):>10}"
            f"{_ratio(figure('langgraph:async', 1, 'ms_per_step'), ms):>9}"
            f"{_ratio(rate, figure('dbos:wal', 50, 'steps_per_s')):>11}"
            f"{_ratio(rate, figure('langgraph:async', 50, 'steps_per_s')):>9}"
            f"{_ratio(figure('restate', 1, 'ms_per_step'), ms):>13}"
            f"{_ratio(rate, figure('restate', 50, 'steps_per_s')):>14}"
        )
    _cpu_by_process(figure, systems, width)
    _targets(figure)
    if any(system in systems for system in ADAPTERS):
        _adapters(figure, systems)


def _cpu_by_process(figure: Any, systems: list[str], width: int) -> None:
    """CPU ms per turn in each process role (client, hosts, executors), so the
    trend reads across machines whose speed differs: the share of each is
    comparable where the absolute figures are not."""
    rows = [s for s in systems if s in OURS and figure(s, 50, "cpu_ms_per_turn_host") is not None]
    if not rows:
        return
    print("\nCPU ms per turn by process (a turn = model + 3 tools + model; hosts and executors")
    print("summed over the job's actors; C=1 timed sessions, C=50 the whole job)")
    columns = "".join(f"{f'{role} C={c}':>14}" for c in (1, 50) for role in ROLES)
    print(f"{'ours':<{width}}{columns}{'total C=50':>12}")
    for system in rows:
        cells = "".join(
            f"{_fmt(figure(system, c, f'cpu_ms_per_turn_{role}')):>14}"
            for c in (1, 50)
            for role in ROLES
        )
        parts = [figure(system, 50, f"cpu_ms_per_turn_{role}") for role in ROLES]
        total = sum(p for p in parts if p is not None)
        print(f"{system:<{width}}{cells}{_fmt(total):>12}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds (medians)")
    parser.add_argument("--sessions", type=int, default=5, help="sequential sessions at C=1")
    parser.add_argument("--skip-500", action="store_true", help="leave out the C=500 jobs")
    parser.add_argument(
        "--systems", nargs="+", metavar="SYSTEM", help="run only these rows (default: all)"
    )
    parser.add_argument(
        "--unpaired",
        action="store_true",
        help=f"run our C=1 jobs alone, not paired with {ANCHOR}",
    )
    args = parser.parse_args()
    main(args.rounds, args.sessions, not args.skip_500, args.systems, not args.unpaired)
