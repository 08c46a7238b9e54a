"""A session fleet on a loopback cluster: many registered sessions, thousands active, a node killed.

A head and ``--nodes`` worker nodes (``ray.cluster_utils.Cluster`` on this
machine, as ``tests/cluster/node_chaos_driver.py`` sets it up): the worker nodes
offer the ``sessions`` resource that every session host and the scheduler ask
for (``host_resources={"sessions": 0.01}``), so they run on worker nodes, and the
health checks are the failover test's (a check every 500 ms, dead after 2
failures) unless ``--ray-health-checks`` keeps Ray's. Ray packs ``num_cpus=0``
actors onto one node, so by default (``--placement spread``) the shared hosts
are started round-robin over the worker nodes, a placeholder actor holding the
other nodes' ``sessions`` while each starts; ``--placement ray`` leaves it to Ray.

The store (``--store sqlite|postgres``; PostgreSQL is a throwaway server, as in
``benchmarks/chaos.py``) is filled with ``--registered`` session runs written
through the store as ``benchmarks/many_sessions.py`` writes them: every one
passivated, 100 waiting for an approval, 10% with a durable timer an hour or
more away. Real sessions run one turn each and passivate beside them.

Then two phases of ``--active`` sessions at once on the workload of
``benchmarks/concurrency.py`` (a turn: a model call that sleeps LAT, three no-op
read tools on pooled executors, a second model call that sleeps LAT), ``--turns``
turns each, with a client per session waiting for each turn's
``turn_completed`` on the event stream:

- ``steady``: nothing fails;
- ``node killed``: once ``--kill-at`` of the phase's turns have completed, the
  worker node whose hosts hold the most of the phase's sessions (the scheduler's
  node on a tie) is killed, its raylet and every process on it
  (``LoopbackClusterNodes.kill``); once the cluster has declared it dead a node
  is added back, as the chaos kit's node fault does.

Between the phases the steady phase's sessions passivate. ``--quick``: 2,000
registered, 100 active, LAT 0.5 s, 2 turns, 10 tries. Every figure printed is
measured by this run; the one-node figures of ``many_sessions.py`` and
``concurrency.py`` beside them are quoted from docs/benchmarks.md and say so.

    .venv/bin/python benchmarks/fleet.py [--quick] [--store sqlite|postgres]
        [--registered 100000] [--active 2000] [--lat 2] [--turns 2] [--nodes 2]
        [--hosts N] [--repeat 20] [--kill-at 0.5] [--passivate-after 10]
        [--placement spread|ray] [--ray-health-checks]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import os
import statistics
import sys
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.peers.ray_env import use_repository  # noqa: E402

use_repository()

from dex.runtime_errors import LongPollTimeoutError  # noqa: E402

from benchmarks.concurrency import MODEL_CALLS_PER_TURN, Clock, bench_flow, client  # noqa: E402
from benchmarks.fleet_cluster import (  # noqa: E402
    HOST_PREFIX,
    HOST_SHARE,
    inventory,
    loopback_cluster,
    node_of,
    resident_sessions,
    spread_hosts,
    store_location,
)
from benchmarks.many_sessions import APPROVALS, fill_store  # noqa: E402
from benchmarks.peers.workload import percentile  # noqa: E402
from dex_agents_ray import AgentEventType, AgentSessionClient  # noqa: E402
from dex_agents_ray.engine import FlowEngine  # noqa: E402
from dex_agents_ray.testing._actors import EXECUTOR_PREFIX, SCHEDULER_NAME  # noqa: E402
from dex_agents_ray.testing.chaos import LoopbackClusterNodes, wait_until_dead  # noqa: E402

APPROVAL_QUERY = 'ActiveStepTypes = "AwaitToolApproval"'
QUIET_S = 10.0
"""At least this long without an event before a client asks the session's snapshot
whether its turn is over (5 x LAT when that is longer)."""
LOST_AFTER_S = 60.0
"""How long after the snapshot says a turn is over its ``turn_completed`` may take
to come before it counts as lost."""
PASSIVATION_WAIT_S = 600.0
FULL = {"registered": 100_000, "active": 2_000, "lat": 2.0, "turns": 2, "repeat": 20}
QUICK = {"registered": 2_000, "active": 100, "lat": 0.5, "turns": 2, "repeat": 10}
"""The sizes by default and with ``--quick`` (a size given as a flag wins)."""
REFERENCE_SIZE = 100_000
REFERENCE = {
    "sqlite": {"activation": "9.2 ms", "search": "0.59 ms", "due": "< 0.01 ms"},
    "postgres": {"activation": "9.8 ms", "search": "1.03 ms", "due": "< 0.01 ms"},
}
"""``benchmarks/many_sessions.py`` at 100,000 registered sessions on one node
(docs/benchmarks.md): the first call to a passivated session, the approval
search, the scheduler's read per due timer."""
REFERENCE_EFFICIENCY = (
    "concurrency.py, one node, 2,000 sessions, LAT 2 s, 2 turns: 0.21 "
    "(docs/benchmarks.md, 2026-12-07, a loaded machine)"
)


# -- what a phase saw ------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Sample:
    """The fleet once ``--kill-at`` of a phase's turns have completed."""

    at_s: float
    """Seconds since the phase's first ``start_session``."""
    actors: dict[str, str | None]
    """The engine's named actors (hosts, executors, the scheduler) -> their node
    (``None``: not answering within 30 s)."""
    resident: dict[str, str]
    """The phase's sessions a host holds in memory -> the host's node."""
    in_turn: int
    """The phase's sessions started and not yet done with their last turn."""
    store_resident: int
    """Every session run started so far (filled ones included) less the store's
    passivated count: the runs some host holds, across the fleet."""


@dataclass(frozen=True, kw_only=True)
class Kill:
    node: str
    at_s: float
    """Seconds since the phase's first ``start_session``."""
    instant: float
    """``time.perf_counter()`` at the kill."""
    actors: list[str]
    """The engine's actors on the node when it was killed."""
    resident: int
    """The phase's sessions the node's hosts held (``Sample.resident``)."""
    affected: list[str]
    """Of those, the ones not done with their last turn at the kill."""
    declared_dead_s: float | None
    hosts_back_s: float | None
    """Kill -> every host of the node answering from another node (``None``: not
    within 120 s)."""
    added: str
    """What became of the node added back."""


@dataclass
class Phase:
    name: str
    ids: list[str]
    turns: int
    latency: float
    turn_s: list[float] = field(default_factory=list)
    completions: dict[str, list[float]] = field(default_factory=dict)
    """Session -> the instants (``perf_counter``) of its ``turn_completed`` events."""
    finished: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)
    events_lost: list[str] = field(default_factory=list)
    """Turns over per the session's snapshot whose ``turn_completed`` never came."""
    delivery_s: list[float] = field(default_factory=list)
    """Per ``turn_completed`` read: seconds from its ``created_at`` to its reading."""
    first_start: float = math.inf
    last_completed: float = 0.0
    activation_ms: list[float] = field(default_factory=list)
    search_ms: list[float] = field(default_factory=list)
    sample: Sample | None = None
    kill: Kill | None = None
    after: dict[str, str | None] = field(default_factory=dict)
    """The engine's actors -> their node once the phase is over."""

    @property
    def quiet_s(self) -> float:
        return max(QUIET_S, 5 * self.latency)

    @property
    def ideal_s(self) -> float:
        return self.turns * MODEL_CALLS_PER_TURN * self.latency

    @property
    def wall_s(self) -> float:
        return self.last_completed - self.first_start

    @property
    def efficiency(self) -> float:
        return self.ideal_s / self.wall_s if self.wall_s > 0 else 0.0

    def since_start(self, instant: float) -> float:
        return instant - self.first_start

    def recovery_s(self) -> tuple[list[float], list[float], list[str]]:
        """Per affected session, kill -> its next ``turn_completed`` read on the
        stream; the same for the sessions whose next turn's event never came (its
        end noticed by the snapshot); the affected sessions that never finished a
        turn after the kill."""
        if self.kill is None:
            return [], [], []
        seen: list[float] = []
        noticed: list[float] = []
        never: list[str] = []
        for session_id in self.kill.affected:
            done = self.completions.get(session_id, [])
            later = [i for i, t in enumerate(done) if t > self.kill.instant]
            if not later:
                never.append(session_id)
                continue
            delay = done[later[0]] - self.kill.instant
            lost = f"{session_id} turn {later[0]}" in self.events_lost
            (noticed if lost else seen).append(delay)
        return seen, noticed, never


async def turn_done(sessions: AgentSessionClient, session_id: str, turn: int) -> bool:
    """Whether the session's snapshot says turn ``turn`` (0-based) is over."""
    state = (await sessions.get_agent_snapshot(session_id)).state
    return state is not None and state.turn_count > turn and state.active_turn_id is None


async def read_turn(
    sessions: AgentSessionClient, session_id: str, turn: int, token: str, phase: Phase
) -> tuple[str, float]:
    """Read the session's events until turn ``turn``'s (0-based) ``turn_completed``;
    the next resume token and the instant the turn counts as done.

    Streams are best effort: a host killed between a Step's commit and the append
    of the events it wrote loses them. So after ``phase.quiet_s`` without an
    event the client asks the session's snapshot whether the turn is over; once
    it is, and no ``turn_completed`` has come ``LOST_AFTER_S`` later, the event
    counts as lost and the turn as done when the snapshot said so."""
    turn_id = f"turn-{turn + 1}"
    noticed: float | None = None
    while True:
        try:
            message = await sessions.read_event(session_id, token, phase.quiet_s)
        except LongPollTimeoutError:
            now = time.perf_counter()
            if noticed is None and await turn_done(sessions, session_id, turn):
                noticed = now
            elif noticed is not None and now - noticed >= LOST_AFTER_S:
                phase.events_lost.append(f"{session_id} turn {turn}")
                return token, noticed
            continue
        token = message.resume_token
        event = message.value
        if event.turn_id != turn_id:
            continue
        if event.type is AgentEventType.TURN_FAILED:
            raise RuntimeError(f"turn {turn} failed: {event}")
        if event.type is AgentEventType.TURN_COMPLETED:
            phase.delivery_s.append(time.time() - event.created_at.timestamp())
            return token, time.perf_counter()


async def drive(sessions: AgentSessionClient, session_id: str, phase: Phase) -> None:
    """One session of the phase's turns (``concurrency.client``'s loop, with each
    completion's instant kept and a client error recorded instead of raised)."""
    token = ""
    try:
        for turn in range(phase.turns):
            sent = time.perf_counter()
            text = f"{session_id} turn {turn}"
            if turn == 0:
                phase.first_start = min(phase.first_start, sent)
                await sessions.start_session(session_id, text)
            else:
                await sessions.send_user_message(session_id, text)
            token, done = await read_turn(sessions, session_id, turn, token, phase)
            phase.turn_s.append(done - sent)
            phase.completions.setdefault(session_id, []).append(done)
            phase.last_completed = max(phase.last_completed, done)
    except Exception as error:  # reported with the phase; the others go on
        phase.errors.append(f"{session_id}: {type(error).__name__}: {error}"[:300])
    finally:
        phase.finished.add(session_id)


# -- the fleet -------------------------------------------------------------------------


async def median_ms(call: Callable[[], Awaitable[Any]], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        await call()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def progress(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


@dataclass
class Fleet:
    args: argparse.Namespace
    engine: FlowEngine
    sessions: AgentSessionClient
    cluster: Any
    nodes: LoopbackClusterNodes
    started: int = 0
    """Session runs written or started so far (filled ones included)."""
    fill_s: float = 0.0
    reals: list[str] = field(default_factory=list)
    idle: dict[str, float] = field(default_factory=dict)
    head: str = ""
    """The head node's ID."""
    workers: list[str] = field(default_factory=list)
    """The worker nodes' IDs at the start."""
    added: list[str] = field(default_factory=list)
    """The nodes added back after a kill."""

    @classmethod
    async def start(
        cls, args: argparse.Namespace, location: str, cluster: Any, nodes: LoopbackClusterNodes
    ) -> Fleet:
        flow = bench_flow(args.lat)
        engine = await FlowEngine.start(
            [flow],
            store=location,
            namespace=f"fleet-{uuid.uuid4().hex[:8]}",
            shared_hosts=args.hosts,
            passivate_after=timedelta(seconds=args.passivate_after),
            host_resources={"sessions": HOST_SHARE},
        )
        fleet = cls(args, engine, AgentSessionClient(engine.client, flow), cluster, nodes)
        fleet.head = str(cluster.head_node.node_id)
        fleet.workers = [str(n.node_id) for n in cluster.worker_nodes]
        return fleet

    async def prepare(self) -> None:
        """Hosts placed and warmed, the store filled, real sessions passivated."""
        engine, args = self.engine, self.args
        if args.placement == "spread":
            await spread_hosts(engine, self.workers)
        names: dict[str, str] = {}
        for i in range(100_000):
            names.setdefault(engine.placement.host_name(f"warm-{i}"), f"warm-{i}")
            if len(names) == engine.placement.shared_hosts:
                break
        self.reals = [f"real-{i}" for i in range(2 * args.repeat)]
        first_turns = [*names.values(), *self.reals]
        progress(f"warming {len(names)} hosts; {len(self.reals)} real sessions, one turn each")
        await asyncio.gather(*(client(self.sessions, s, 1, Clock()) for s in first_turns))
        self.started += len(first_turns)
        progress(f"filling the store with {args.registered:,} passivated session runs")
        _, flow_hash = engine.registered(self.sessions.flow)
        start = time.perf_counter()
        flow_type = self.sessions.flow.get_flow_type()
        await fill_store(engine.store, args.registered, flow_type, flow_hash, time.time())
        self.fill_s = time.perf_counter() - start
        self.started += args.registered
        progress(f"filled in {self.fill_s:.0f} s")
        await self.wait_passivated()

    async def wait_passivated(self) -> float:
        """Until every run started so far is passivated; the seconds it took."""
        start = time.perf_counter()
        while time.perf_counter() - start < PASSIVATION_WAIT_S:
            if await self.engine.store.passivation.passivated_count() >= self.started:
                return time.perf_counter() - start
            await asyncio.sleep(0.2)
        passivated = await self.engine.store.passivation.passivated_count()
        raise RuntimeError(f"{self.started - passivated} runs still resident after 600 s")

    async def measure_idle(self) -> None:
        """Before any load: first calls to passivated sessions, the approval
        search, the scheduler's read per due timer (``many_sessions.py``'s)."""
        repeat, store = self.args.repeat, self.engine.store
        activation = []
        for session_id in self.reals[:repeat]:
            start = time.perf_counter()
            await self.sessions.get_agent_snapshot(session_id)
            activation.append((time.perf_counter() - start) * 1e3)
        client_ = self.engine.client
        search = await median_ms(lambda: client_.search_flows(APPROVAL_QUERY, 50), repeat)
        hits = await client_.search_flows(APPROVAL_QUERY, 50)
        later = time.time() + 3600 + self.args.registered  # every filled timer is due
        due = await store.passivation.due_passivated(later)

        async def scheduler_read() -> None:
            await store.passivation.due_passivated(later)
            await store.passivation.next_passivated_wake()

        timers = await median_ms(scheduler_read, max(3, repeat // 4))
        self.idle = {
            "activation_ms": statistics.median(activation),
            "search_ms": search,
            "search_hits": float(len(hits.flows)),
            "due_timer_ms": timers / max(1, len(due)),
            "due": float(len(due)),
        }

    async def probe(self, phase: Phase, session_ids: list[str]) -> None:
        """While the phase runs: a first call to a passivated session and an
        approval search, one of each every LAT / 2 seconds."""
        for session_id in session_ids:
            await asyncio.sleep(self.args.lat / 2)
            if len(phase.finished) == len(phase.ids):
                return
            start = time.perf_counter()
            await self.sessions.get_agent_snapshot(session_id)
            middle = time.perf_counter()
            await self.engine.client.search_flows(APPROVAL_QUERY, 50)
            phase.activation_ms.append((middle - start) * 1e3)
            phase.search_ms.append((time.perf_counter() - middle) * 1e3)

    async def sample(self, phase: Phase) -> Sample:
        """Wait until ``--kill-at`` of the phase's turns completed; what the fleet holds."""
        wanted = math.ceil(self.args.kill_at * len(phase.ids) * phase.turns)
        while len(phase.turn_s) < wanted and len(phase.finished) < len(phase.ids):  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        at = time.perf_counter()
        actors = await inventory(self.engine.namespace)
        resident = await resident_sessions(
            self.engine.namespace, phase.ids, self.engine.placement.host_name, actors
        )
        passivated = await self.engine.store.passivation.passivated_count()
        return Sample(
            at_s=phase.since_start(at),
            actors=actors,
            resident=resident,
            in_turn=sum(1 for s in phase.ids if s not in phase.finished),
            store_resident=self.started - passivated,
        )

    async def kill_busiest(self, phase: Phase, sample: Sample) -> Kill:
        """Kill the worker node whose hosts hold the most of the phase's sessions
        (the scheduler's on a tie); add a node back once it is declared dead."""
        counts = Counter(sample.resident.values())
        scheduler = sample.actors.get(SCHEDULER_NAME)
        killable = await asyncio.to_thread(self.nodes.killable)
        target = max(killable, key=lambda n: (counts.get(n, 0), n == scheduler))
        instant = time.perf_counter()
        affected = sorted(
            s for s, n in sample.resident.items() if n == target and s not in phase.finished
        )
        progress(f"killing node {target[:8]} ({len(affected)} sessions in a turn on it)")
        await self.nodes.kill(target)
        dead = await wait_until_dead(target)
        adding = asyncio.create_task(self.nodes.add())
        hosts = [a for a, n in sample.actors.items() if n == target and a.startswith(HOST_PREFIX)]
        hosts_back = await self.moved(hosts, target, instant)
        try:
            added = await adding
            self.added.append(added)
            back = f"node {added[:8]} joined {time.perf_counter() - instant:.1f} s after the kill"
        except RuntimeError as error:
            back = f"no node added: {error}"[:300]
        return Kill(
            node=target,
            at_s=phase.since_start(instant),
            instant=instant,
            actors=sorted(name for name, node in sample.actors.items() if node == target),
            resident=counts.get(target, 0),
            affected=affected,
            declared_dead_s=dead,
            hosts_back_s=hosts_back,
            added=back,
        )

    async def moved(self, hosts: list[str], gone: str, since: float) -> float | None:
        """Seconds from ``since`` until every one of ``hosts`` answers from a node
        other than ``gone``; ``None`` when not within 120 s."""
        pending = set(hosts)
        while pending and time.perf_counter() - since < 120:
            where = await asyncio.gather(*(node_of(self.engine.namespace, h) for h in pending))
            pending = {h for h, n in zip(pending, where, strict=True) if n in (None, gone)}
            if pending:
                await asyncio.sleep(0.1)
        return None if pending else time.perf_counter() - since

    async def run_phase(self, name: str, prefix: str, kill: bool) -> Phase:
        args = self.args
        phase = Phase(name, [f"{prefix}-{i}" for i in range(args.active)], args.turns, args.lat)
        progress(f"phase {name}: {args.active:,} sessions x {args.turns} turns, LAT {args.lat} s")

        async def watch() -> None:
            phase.sample = await self.sample(phase)
            if kill:
                phase.kill = await self.kill_busiest(phase, phase.sample)

        watcher = asyncio.create_task(watch())
        probes = None if kill else asyncio.create_task(self.probe(phase, self.reals[args.repeat :]))
        self.started += len(phase.ids)
        await asyncio.gather(*(drive(self.sessions, s, phase) for s in phase.ids))
        await watcher
        if probes is not None:
            await probes
        phase.after = await inventory(self.engine.namespace)
        progress(f"phase {name}: wall {phase.wall_s:.1f} s, efficiency {phase.efficiency:.2f}")
        return phase


# -- the report ------------------------------------------------------------------------


def short(node: str | None) -> str:
    return "-" if node is None else node[:8]


def ms(values: list[float]) -> str:
    if not values:
        return "not measured"
    return f"{statistics.median(values):.1f} ms (median of {len(values)}, max {max(values):.1f})"


def print_setup(fleet: Fleet) -> None:
    args, placement = fleet.args, fleet.engine.placement
    checks = "Ray's defaults" if args.ray_health_checks else "500 ms x 2 (the failover test's)"
    print(
        f"\nfleet: a head and {args.nodes} worker nodes on loopback "
        f"(ray.cluster_utils.Cluster), {args.store} store, {placement.shared_hosts} shared "
        f"hosts ({args.placement} placement), health checks {checks}, passivate_after "
        f"{args.passivate_after:g} s"
    )
    print(
        f"registered: {args.registered:,} filled through the store as many_sessions.py "
        f"does ({APPROVALS} waiting for an approval, every 10th with a timer; filled in "
        f"{fleet.fill_s:.0f} s) + {len(fleet.reals) + placement.shared_hosts} real sessions "
        f"passivated after one turn; {fleet.started:,} session runs in the store at the end"
    )


def print_idle(fleet: Fleet, phase: Phase) -> None:
    reference = REFERENCE[fleet.args.store]
    idle = fleet.idle
    size = f"{fleet.args.registered:,}"
    print(f"\nidle fleet ({size} registered; medians of {fleet.args.repeat}) and under load:")
    print(
        f"| figure | idle, this run | during the steady phase | many_sessions.py, one node, "
        f"{REFERENCE_SIZE:,} ({fleet.args.store}) |"
    )
    print("|---|---|---|---|")
    print(
        f"| first call to a passivated session | {idle['activation_ms']:.1f} ms "
        f"| {ms(phase.activation_ms)} | {reference['activation']} |"
    )
    print(
        f"| approval search ({int(idle['search_hits'])} hits) | {idle['search_ms']:.2f} ms "
        f"| {ms(phase.search_ms)} | {reference['search']} |"
    )
    print(
        f"| scheduler read per due timer ({int(idle['due']):,} due) "
        f"| {idle['due_timer_ms']:.4f} ms | - | {reference['due']} |"
    )


def node_rows(fleet: Fleet, phase: Phase) -> None:
    """Per node: the engine's actors at the sample point and after the phase."""
    sample = phase.sample
    if sample is None:
        return
    resident = Counter(sample.resident.values())
    killed = phase.kill.node if phase.kill else None
    seen = {fleet.head, *fleet.workers, *fleet.added, *sample.actors.values()}
    seen |= set(phase.after.values())
    print(
        f"\nnodes at {sample.at_s:.1f} s ({fleet.args.kill_at:.0%} of the turns completed) "
        "-> after the phase:"
    )
    print("| node | role | host actors | executors | scheduler | resident sessions |")
    print("|---|---|---|---|---|---|")
    for node in sorted(n for n in seen if n):
        role = "head" if node == fleet.head else "worker"
        role += " (killed)" if node == killed else " (added)" if node in fleet.added else ""

        def count(where: dict[str, str | None], prefix: str, node: str = node) -> int:
            return sum(1 for a, n in where.items() if n == node and a.startswith(prefix))

        cells = [
            f"{count(sample.actors, p)} -> {count(phase.after, p)}"
            for p in (HOST_PREFIX, EXECUTOR_PREFIX, SCHEDULER_NAME)
        ]
        print(f"| {short(node)} | {role} | {' | '.join(cells)} | {resident.get(node, 0):,} |")
    unanswered = [a for a, n in phase.after.items() if n is None]
    print(
        f"resident sessions: the phase's sessions a host held (its epoch_of) at the sample "
        f"point; {sample.in_turn:,} of the phase's sessions were in a turn; across the fleet "
        f"{sample.store_resident:,} runs were not passivated (the store's count)"
        + (f"; not answering after the phase: {', '.join(unanswered)}" if unanswered else "")
    )


def print_phase(fleet: Fleet, phase: Phase) -> None:
    expected = len(phase.ids) * phase.turns
    ideal_turn = MODEL_CALLS_PER_TURN * phase.latency
    print(f"\nphase: {phase.name}")
    print(
        "| sessions | LAT | turns | wall / ideal | efficiency | turn p50 / p99 / ideal "
        "| turns completed | client errors |"
    )
    print("|---|---|---|---|---|---|---|---|")
    p50 = percentile(phase.turn_s, 0.5) if phase.turn_s else math.nan
    p99 = percentile(phase.turn_s, 0.99) if phase.turn_s else math.nan
    print(
        f"| {len(phase.ids):,} | {phase.latency:g} s | {phase.turns} "
        f"| {phase.wall_s:.1f} / {phase.ideal_s:.1f} s | {phase.efficiency:.2f} "
        f"| {p50:.2f} / {p99:.2f} / {ideal_turn:.1f} s | {len(phase.turn_s):,} / {expected:,} "
        f"| {len(phase.errors)} |"
    )
    for error in phase.errors[:5]:
        print(f"  error: {error}")
    if phase.delivery_s:
        lag = phase.delivery_s
        print(
            f"turn_completed written (its created_at) -> read by its client: p50 "
            f"{percentile(lag, 0.5):.2f} s, p99 {percentile(lag, 0.99):.2f} s, max {max(lag):.2f} s"
        )
    print(
        f"turn_completed lost (the turn over per its snapshot, no event {LOST_AFTER_S:g} s "
        f"later): {len(phase.events_lost)}"
        + (
            f" ({', '.join(phase.events_lost[:5])}); each turn counted done when its "
            "snapshot said so"
            if phase.events_lost
            else ""
        )
    )
    if phase.kill is not None:
        print_kill(phase, phase.kill)
    node_rows(fleet, phase)


def print_kill(phase: Phase, kill: Kill) -> None:
    recovered, noticed, lost = phase.recovery_s()
    hosts = [a for a in kill.actors if a.startswith(HOST_PREFIX)]
    executors = [a for a in kill.actors if a.startswith(EXECUTOR_PREFIX)]
    dead = "not within 60 s" if kill.declared_dead_s is None else f"{kill.declared_dead_s:.1f} s"
    back = "not within 120 s" if kill.hosts_back_s is None else f"{kill.hosts_back_s:.1f} s"
    print(
        f"killed: worker node {short(kill.node)} at {kill.at_s:.1f} s after the first "
        f"start_session, holding {len(hosts)} host actor(s) ({', '.join(hosts) or 'none'}), "
        f"{len(executors)} executor(s)"
        + (", the scheduler" if SCHEDULER_NAME in kill.actors else "")
        + f" and {kill.resident:,} resident sessions of the phase, {len(kill.affected):,} "
        f"of them in a turn; declared dead after {dead}; its hosts answering from another "
        f"node after {back}; {kill.added}"
    )
    if recovered:
        print(
            f"recovery (kill -> an affected session's next turn_completed): median "
            f"{statistics.median(recovered):.1f} s, p90 {percentile(recovered, 0.9):.1f} s, "
            f"max {max(recovered):.1f} s over {len(recovered):,} sessions; "
            f"{len(noticed)} more finished their turn but its turn_completed never came; "
            f"{len(lost)} never finished a turn after the kill"
        )
    else:
        print(f"recovery: no affected session completed a turn after the kill ({len(lost)})")


HOW = """
how each figure is measured (every one by this run, on this machine):
- efficiency: turns x 2 model calls x LAT over the wall time from the phase's first
  start_session to its last turn_completed (concurrency.py's); turn: start_session or
  send_user_message -> that turn's turn_completed read on the event stream (for a lost
  one: when get_agent_snapshot said the turn was over, asked after 10 s, or 5 x LAT,
  without an event).
- first call to a passivated session: get_agent_snapshot of a real session the store
  records passivated (idle: before any load; during the steady phase: one every LAT / 2 s).
- approval search: search_flows('ActiveStepTypes = "AwaitToolApproval"', 50) from the driver.
- scheduler read per due timer: the store's due_passivated() + next_passivated_wake() at a
  time when every filled timer is due, over the due runs (many_sessions.py's figure).
- host actors, executors, scheduler per node: each named actor's node_id() at the sample
  point and after the phase; resident sessions: the hosts' epoch_of() for each of the
  phase's sessions at the sample point.
- recovery: from the kill to each affected session's next turn_completed (affected: the
  phase's sessions resident on the killed node's hosts and not done at the kill).
"""


def print_report(fleet: Fleet, steady: Phase, killed: Phase) -> None:
    print_setup(fleet)
    print_idle(fleet, steady)
    for phase in (steady, killed):
        print_phase(fleet, phase)
    print(f"\nfor comparison: {REFERENCE_EFFICIENCY}")
    if fleet.args.registered != REFERENCE_SIZE:
        print(
            f"(many_sessions.py's figures are at {REFERENCE_SIZE:,} registered sessions; this "
            f"run registered {fleet.args.registered:,})"
        )
    print(HOW.rstrip())


async def main(args: argparse.Namespace) -> int:
    logging.getLogger("dex_agents_ray").setLevel(logging.CRITICAL)
    logging.getLogger("psycopg").setLevel(logging.CRITICAL)
    began = time.perf_counter()
    async with (
        store_location(args.store) as location,
        loopback_cluster(args) as (cluster, nodes),
    ):
        progress("cluster up; starting the engine")
        fleet = await Fleet.start(args, location, cluster, nodes)
        try:
            await fleet.prepare()
            await fleet.measure_idle()
            steady = await fleet.run_phase("steady", "steady", kill=False)
            progress(f"steady sessions passivated in {await fleet.wait_passivated():.0f} s")
            killed = await fleet.run_phase("node killed", "kill", kill=True)
        finally:
            await fleet.engine.shutdown(stop_hosts=True)
    print_report(fleet, steady, killed)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"\nthe whole run took {time.perf_counter() - began:.0f} s on {os.cpu_count()} cores; "
        f"load average at the end {load}"
    )
    return 0


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help=f"a small run: {QUICK}")
    parser.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--registered", type=int, default=None, help="default 100,000")
    parser.add_argument("--active", type=int, default=None, help="default 2,000")
    parser.add_argument("--lat", type=float, default=None, help="LAT in seconds (default 2)")
    parser.add_argument("--turns", type=int, default=None, help="default 2")
    parser.add_argument("--nodes", type=int, default=2, help="worker nodes (the head apart)")
    parser.add_argument("--hosts", type=int, default=None, help="shared hosts (2 per node)")
    parser.add_argument("--repeat", type=int, default=None, help="tries per figure (20)")
    parser.add_argument("--kill-at", type=float, default=0.5, help="share of the turns done")
    parser.add_argument("--passivate-after", type=float, default=10.0, help="seconds")
    parser.add_argument("--placement", choices=["spread", "ray"], default="spread")
    parser.add_argument("--ray-health-checks", action="store_true")
    args = parser.parse_args()
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.hosts is None:
        args.hosts = 2 * args.nodes
    if args.registered < APPROVALS:
        parser.error(f"--registered must be at least {APPROVALS} (the approvals it holds)")
    if args.nodes < 2:
        parser.error("--nodes must be at least 2: one is killed, the others take its hosts")
    if not 0 < args.kill_at < 1:
        parser.error("--kill-at is a share of the phase's turns, between 0 and 1")
    return args


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse())))
