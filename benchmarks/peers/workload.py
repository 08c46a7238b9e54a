"""The peers' workload: an agent loop with a scripted model, and how a job is measured.

A session has ``TURNS`` turns. A turn is a model step that asks for ``TOOLS`` tool
calls, the tool steps (in parallel where the system allows), and a model step that
answers: ``2 + TOOLS`` durable steps a turn, ``STEPS_PER_SESSION`` a session. Model
and tools are instant and payloads are fixed (~0.4 KB answer, ~0.2 KB tool result),
so every system stores the same bytes and only its overhead is timed.

Measuring (as in shared/research/perf-peers.md): 2 untimed warm-up sessions, then at
C=1 ``sessions`` sequential sessions, each timed (ms/step = median session time /
``STEPS_PER_SESSION``); at C>1, C sessions at once (steps/s = C x steps / wall time).
CPU time counts every thread of the process; peak RSS is the process's ``ru_maxrss``.
A system that runs its steps in other processes names them (``helper_processes``):
their CPU and peak RSS (``VmHWM``) count too; ``platform_rss_mb`` is the peak RSS of
the platform's own processes (``ray_system_processes``), reported apart.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, NotRequired, Protocol, TypedDict

TURNS = 10
TOOLS = 3
STEPS_PER_TURN = 2 + TOOLS
STEPS_PER_SESSION = TURNS * STEPS_PER_TURN
WARMUP_SESSIONS = 2

FINAL_TEXT = "A" * 400
TOOL_TEXT = "r" * 200
QUERY_TEXT = "q" * 64


class ToolCall(TypedDict):
    """One tool call the scripted model asks for."""

    id: str
    name: str
    args: dict[str, str]


class Message(TypedDict):
    """A chat message as the workload passes it between steps."""

    role: str
    content: str
    tool_calls: NotRequired[list[ToolCall]]
    tool_call_id: NotRequired[str]


class PeerUnavailable(RuntimeError):
    """Raised by ``open_system`` before it starts anything when something the system
    needs outside Python (a server binary) is missing: the job is reported skipped
    with this message (the install hint), as when its packages are missing."""


class PeerSystem(Protocol):
    """A system under test: runs one whole workload session per call.

    Opened by its module's ``open_system(workdir, variant)`` (an async context
    manager); ``session`` may be called concurrently from one event loop.
    """

    async def session(self, session_id: str) -> None:
        """Run one session of ``TURNS`` turns under ``session_id`` (unique per job)."""
        ...


def user_message(turn: int) -> Message:
    return {"role": "user", "content": f"question number {turn}"}


def scripted_model(messages: list[Message]) -> Message:
    """The instant model: a user message gets ``TOOLS`` tool calls, tool results an answer."""
    turn = sum(1 for m in messages if m["role"] == "user")
    if messages[-1]["role"] == "user":
        calls: list[ToolCall] = [
            {"id": f"call_{turn}_{i}", "name": "lookup", "args": {"query": QUERY_TEXT}}
            for i in range(TOOLS)
        ]
        return {"role": "assistant", "content": "", "tool_calls": calls}
    return {"role": "assistant", "content": FINAL_TEXT, "tool_calls": []}


def run_tool(call: ToolCall) -> Message:
    """The instant no-op tool."""
    return {"role": "tool", "tool_call_id": call["id"], "content": TOOL_TEXT}


def encode(value: Message) -> str:
    """The stored form of a step result (compact JSON)."""
    return json.dumps(value, separators=(",", ":"))


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (nearest rank, no interpolation)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def peak_rss_mb() -> float:
    # ru_maxrss is in KiB on Linux.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _process_cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds of ``pids`` so far (from /proc; gone ones count 0)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def _peak_rss_mb(pids: list[int]) -> float:
    """The sum of the processes' peak RSS (VmHWM) in MiB."""
    total = 0.0
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                total += int(line.split()[1]) / 1024
    return total


def _pss_mb(pids: list[int]) -> float:
    """The sum of the processes' proportional set size now (smaps_rollup) in MiB:
    pages shared between Ray's processes count once in all."""
    total = 0.0
    for pid in pids:
        try:
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue
        for line in rollup.splitlines():
            if line.startswith("Pss:"):
                total += int(line.split()[1]) / 1024
    return total


async def _warm_up(system: PeerSystem) -> float:
    """The untimed warm-up sessions; returns the peak RSS after them."""
    for i in range(WARMUP_SESSIONS):
        await system.session(f"warm-{i}")
    return peak_rss_mb()


def _helpers(system: PeerSystem) -> list[int]:
    """The processes that run the system's steps (their CPU counts)."""
    found: list[int] = getattr(system, "helper_processes", list)()
    return found


def _cpu_s(helpers: list[int]) -> float:
    return time.process_time() + _process_cpu_s(helpers)


ROLES = ("client", "host", "executor")
"""The processes whose CPU per turn a system that names its roles reports."""


def _roles(system: PeerSystem) -> dict[int, str]:
    """``{pid: role}`` of the system's step-running processes (``process_roles``)."""
    found: dict[int, str] = getattr(system, "process_roles", dict)()
    return found


def _role_cpu_s(roles: dict[int, str]) -> dict[str, float]:
    """CPU seconds so far by role: this process is the client."""
    totals = {role: 0.0 for role in ROLES}
    totals["client"] = time.process_time()
    for pid, role in roles.items():
        totals[role] = totals.get(role, 0.0) + _process_cpu_s([pid])
    return totals


def _per_turn(start: dict[str, float], end: dict[str, float], sessions: int) -> dict[str, float]:
    """``cpu_ms_per_turn_<role>`` for each role, over ``sessions`` x ``TURNS`` turns."""
    turns = sessions * TURNS
    return {
        f"cpu_ms_per_turn_{role}": (end.get(role, 0.0) - start.get(role, 0.0)) * 1e3 / turns
        for role in ROLES
    }


async def measure(system: PeerSystem, concurrency: int, sessions: int) -> dict[str, Any]:
    """Run one job on an open system and return its figures.

    Args:
        system: The open system under test.
        concurrency: 1 runs ``sessions`` sessions one after another, each timed; more
            runs that many sessions at once (``sessions`` is then unused).
        sessions: Sequential sessions timed at C=1.
    """
    rss_after_warmup = await _warm_up(system)
    latencies: list[float] = []

    async def timed(session_id: str) -> None:
        start = time.perf_counter()
        await system.session(session_id)
        latencies.append(time.perf_counter() - start)

    count = sessions if concurrency == 1 else concurrency
    helpers = _helpers(system)
    roles = _roles(system)
    cpu_start = _cpu_s(helpers)
    role_start = _role_cpu_s(roles)
    wall_start = time.perf_counter()
    if concurrency == 1:
        for i in range(count):
            await timed(f"s-{i}")
    else:
        await asyncio.gather(*(timed(f"s-{i}") for i in range(count)))
    wall = time.perf_counter() - wall_start
    helpers = sorted(set(helpers) | set(_helpers(system)))
    cpu = _cpu_s(helpers) - cpu_start
    figures = _figures(system, concurrency, latencies, wall, cpu, helpers, rss_after_warmup)
    if roles or _roles(system):
        # Processes started during the job (an executor the pool added) count from 0.
        roles = {**roles, **_roles(system)}
        figures.update(_per_turn(role_start, _role_cpu_s(roles), count))
    return figures


async def measure_paced(
    system: PeerSystem,
    next_command: Callable[[], Awaitable[str]],
    report: Callable[[dict[str, Any]], None],
) -> dict[str, Any]:
    """A C=1 job whose sessions start when told: for pairing with another system.

    After the warm-up ``report`` gets ``{"ready": True}``; then each ``"go"`` from
    ``next_command`` runs one timed session and reports ``{"session_ms": ...}``,
    and anything else ends the job. Two paced jobs whose sessions alternate, one
    at a time, see the same state of a noisy machine within a second of each
    other. CPU counts the timed sessions only; steps/s is the steps over the
    sessions' own time.
    """
    rss_after_warmup = await _warm_up(system)
    report({"ready": True})
    latencies: list[float] = []
    cpu = 0.0
    helpers = _helpers(system)
    roles = _roles(system)
    by_role = {role: 0.0 for role in ROLES}
    while await next_command() == "go":
        cpu_start = _cpu_s(helpers)
        role_start = _role_cpu_s(roles)
        start = time.perf_counter()
        await system.session(f"s-{len(latencies)}")
        latencies.append(time.perf_counter() - start)
        cpu += _cpu_s(helpers) - cpu_start
        role_end = _role_cpu_s(roles)
        for role in ROLES:
            by_role[role] += role_end[role] - role_start[role]
        report({"session_ms": latencies[-1] * 1e3})
    if not latencies:
        raise ValueError("a paced job ended before its first timed session")
    helpers = sorted(set(helpers) | set(_helpers(system)))
    figures = _figures(system, 1, latencies, sum(latencies), cpu, helpers, rss_after_warmup)
    if roles:
        zero = {role: 0.0 for role in ROLES}
        figures.update(_per_turn(zero, by_role, len(latencies)))
    return figures


def _figures(
    system: PeerSystem,
    concurrency: int,
    latencies: list[float],
    wall: float,
    cpu: float,
    helpers: list[int],
    rss_after_warmup: float,
) -> dict[str, Any]:
    count = len(latencies)
    median = statistics.median(latencies)
    steps = count * STEPS_PER_SESSION
    extra: dict[str, Any] = {}
    if helpers:
        extra["helper_processes"] = len(helpers)
        extra["helper_peak_rss_mb"] = _peak_rss_mb(helpers)
        extra["helper_pss_mb"] = _pss_mb(helpers)
    turns: list[float] = getattr(system, "turn_latencies_ms", list)()
    if turns:  # a system that times each turn (after the warm-up sessions)
        extra["turn_ms_p50"] = statistics.median(turns)
        extra["turn_ms_p99"] = percentile(turns, 0.99)
    host_calls = getattr(system, "host_calls_per_turn", lambda: None)()
    if host_calls is not None:
        extra["host_calls_per_turn"] = host_calls
    platform: list[int] = getattr(system, "ray_system_processes", list)()
    if platform:
        extra["platform_rss_mb"] = _peak_rss_mb(platform)
        extra["platform_pss_mb"] = _pss_mb(platform)
    return {
        **extra,
        "C": concurrency,
        "sessions": count,
        "session_ms_median": median * 1e3,
        "ms_per_step": median * 1e3 / STEPS_PER_SESSION,
        "steps_per_s": steps / wall,
        "cpu_ms_per_step": cpu * 1e3 / steps,
        "wall_s": wall,
        "rss_after_warmup_mb": rss_after_warmup,
        "peak_rss_mb": peak_rss_mb() + extra.get("helper_peak_rss_mb", 0.0),
    }
