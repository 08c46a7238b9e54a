"""The campaign runner: sessions driven through scripted turns while faults hit."""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from typing import Any, TypeVar

from dex_agents_ray.engine import FlowEngine
from dex_agents_ray.session import (
    AgentInterrupt,
    AgentSessionClient,
    AgentSessionFlow,
    AgentSnapshot,
    InterruptKind,
)
from dex_agents_ray.testing.chaos._checker import (
    check_invariants,
    repeated_events,
    uncommitted_results,
)
from dex_agents_ray.testing.chaos._faults import FaultInjector
from dex_agents_ray.testing.chaos._nodes import ClusterNodes
from dex_agents_ray.testing.chaos._record import (
    CampaignRecord,
    FaultKind,
    FaultRecord,
    ResolutionRecord,
    SessionRecord,
    ToolInvocation,
    Violation,
)

__all__ = ["ChaosCampaign", "ChaosReport", "DEFAULT_FAULT_WEIGHTS"]

T = TypeVar("T")

DEFAULT_FAULT_WEIGHTS: Mapping[FaultKind, float] = {
    FaultKind.SESSION_HOST: 4.0,
    FaultKind.TOOL_EXECUTOR: 3.0,
    FaultKind.SCHEDULER: 1.0,
}
"""Session hosts, executors and the scheduler; add the PostgreSQL kinds for that store."""

_POLL_SECONDS = 0.1


def _first_choice(interrupt: AgentInterrupt) -> str:
    return interrupt.choices[0] if interrupt.choices else "yes"


@dataclass(kw_only=True)
class ChaosReport:
    """What a campaign did and found; ``str(report)`` is the printed summary."""

    seed: int
    faults: list[FaultRecord]
    sessions: int
    turns: int
    violations: list[Violation]
    seconds: float
    drain_seconds: float
    """From the last fault to the end of the last session's turns."""
    record: CampaignRecord
    repeated_events: list[str] = field(default_factory=list)
    """Events one Step execution wrote twice (allowed: Streams are best effort)."""
    uncommitted_results: list[str] = field(default_factory=list)
    """Result events of attempts that then failed (allowed: Streams are best effort)."""

    @property
    def injected(self) -> list[FaultRecord]:
        return [f for f in self.faults if f.injected]

    @property
    def faults_by_kind(self) -> dict[str, int]:
        return dict(sorted(Counter(str(f.kind) for f in self.injected).items()))

    def node_recovery_seconds(self) -> list[float]:
        """For each node kill that took hosts of sessions with a turn in flight, the
        time until each of those sessions had completed its next turn; sorted."""
        return sorted(
            f.recovered_seconds
            for f in self.injected
            if f.kind is FaultKind.NODE and f.affected_sessions and f.recovered_seconds is not None
        )

    def recovery_seconds(self, kind: FaultKind | None = None) -> list[float]:
        """Each injected fault's recovery time (of ``kind`` only, when given), sorted."""
        return sorted(
            f.recovered_seconds
            for f in self.injected
            if f.recovered_seconds is not None and (kind is None or f.kind is kind)
        )

    def __str__(self) -> str:
        recover = self.recovery_seconds()
        lines = [
            f"chaos campaign, seed {self.seed}: {len(self.injected)} faults injected "
            f"({len(self.faults) - len(self.injected)} found no target), {self.sessions} sessions, "
            f"{self.turns} turns, {self.seconds:.1f} s",
            f"  faults by kind: {self.faults_by_kind}",
        ]
        if recover:
            median = recover[len(recover) // 2]
            lines.append(
                f"  time to the next completed turn after a fault: median {median:.2f} s, "
                f"max {recover[-1]:.2f} s; drain after the last fault {self.drain_seconds:.1f} s"
            )
        node_faults = [f for f in self.injected if f.kind is FaultKind.NODE]
        if node_faults:
            hit = [f for f in node_faults if f.affected_sessions]
            node = self.node_recovery_seconds()
            lines.append(
                f"  node kills: {len(node_faults)}, {len(hit)} with a turn in flight on the "
                "node; those sessions' next completed turns "
                + (
                    f"after a median {node[len(node) // 2]:.2f} s, max {node[-1]:.2f} s"
                    if node
                    else "never came"
                )
                + (f" ({len(hit) - len(node)} never recovered)" if len(hit) > len(node) else "")
            )
            back = sorted(f.answered_seconds for f in hit if f.answered_seconds is not None)
            if back:
                lines.append(
                    "    of which their first call after the kill answered (the hosts back, "
                    f"the runs loaded) after a median {back[len(back) // 2]:.2f} s, "
                    f"max {back[-1]:.2f} s"
                )
        lines.append(f"  result events of failed attempts: {len(self.uncommitted_results)}")
        lines += [f"    {r}" for r in self.uncommitted_results[:20]]
        lines.append(f"  events repeated by one Step execution: {len(self.repeated_events)}")
        lines += [f"    {r}" for r in self.repeated_events[:20]]
        lines.append(f"  violations: {len(self.violations)}")
        lines += [f"    {v}" for v in self.violations]
        lines.append("  fault log:")
        lines += [
            f"    #{f.index} {f.at_seconds:7.2f} s {f.kind}: {f.target} "
            f"{'' if f.injected else '(not injected) '}{f.detail}"
            + (
                f" [next turn +{f.recovered_seconds:.2f} s]"
                if f.recovered_seconds is not None
                else ""
            )
            for f in self.faults
        ]
        return "\n".join(lines)

    def raise_for_violations(self) -> None:
        """Raise ``AssertionError`` with the whole report when anything was violated."""
        if self.violations:
            raise AssertionError(str(self))


_MISSING_TRIES = 20
"""Draws in a row of a kind not injected yet that may find no target before the
campaign draws by weight again (a kind can lack a target for a while: no busy
session, no live worker node)."""


@dataclass(kw_only=True)
class ChaosCampaign:
    """N sessions of ``flow`` driven through ``turns`` while seeded faults hit.

    ``sessions`` sessions run at once; each sends ``turns`` in order (one turn at
    a time), approves approvals (``approve``) and answers questions (``answer``)
    as they appear. Finished slots start new sessions until ``faults`` faults
    were injected. Faults come every ``interval`` (drawn uniformly), their kind
    drawn by ``fault_weights`` (the last ones go to the kinds not injected yet,
    so that every kind with a weight occurs when ``faults`` allows); a seed
    replays the schedule of kinds, targets and delays, not the interleavings.
    Then :func:`check_invariants` reads the transcripts, tool records, events,
    Step history and the tools' invocation logs (``invocations``).

    Turn texts must be distinct: the checker tells a lost or doubled message by
    its text.
    """

    engine: FlowEngine
    flow: AgentSessionFlow
    turns: Sequence[str]
    """The user messages of one session, in order."""
    sessions: int = 3
    faults: int = 50
    seed: int = 0
    fault_weights: Mapping[FaultKind, float] = field(
        default_factory=lambda: dict(DEFAULT_FAULT_WEIGHTS)
    )
    interval: tuple[timedelta, timedelta] = (timedelta(seconds=0.2), timedelta(seconds=1))
    invocations: Callable[[], Iterable[ToolInvocation]] | None = None
    """Real tool runs (read from the tools' own logs) after the campaign."""
    restart_postgres: Callable[[], Awaitable[None] | None] | None = None
    """Crash-restarts the PostgreSQL server, for ``FaultKind.POSTGRES_RESTART``."""
    nodes: ClusterNodes | None = None
    """The cluster's killable worker nodes, for ``FaultKind.NODE`` (for example
    ``LoopbackClusterNodes(cluster, node_args)``)."""
    approve: Callable[[AgentInterrupt], bool] = lambda interrupt: True
    answer: Callable[[AgentInterrupt], str] = _first_choice
    session_prefix: str = "chaos"
    turn_timeout: timedelta = timedelta(minutes=3)
    """A turn that takes longer marks its session stuck."""
    max_sessions: int = 1000
    """Stop starting sessions here even if faults are still due."""
    _record: CampaignRecord = field(default_factory=CampaignRecord, init=False)
    _busy: set[str] = field(default_factory=set, init=False)
    _completions: list[float] = field(default_factory=list, init=False)
    _completed: dict[str, list[float]] = field(default_factory=dict, init=False)
    _answered: dict[str, list[tuple[float, float]]] = field(default_factory=dict, init=False)
    """Each session's snapshot calls that answered: (sent, answered) monotonic times."""

    def __post_init__(self) -> None:
        if not self.turns:
            raise ValueError("ChaosCampaign.turns must hold at least one user message")
        if len(set(self.turns)) != len(self.turns):
            raise ValueError("ChaosCampaign.turns must be distinct texts")
        if self.sessions < 1 or self.faults < 0:
            raise ValueError("ChaosCampaign needs sessions >= 1 and faults >= 0")
        low, high = self.interval
        if low <= timedelta(0) or high < low:
            raise ValueError(f"ChaosCampaign.interval must be 0 < low <= high, got {self.interval}")
        unknown = [k for k in self.fault_weights if not isinstance(k, FaultKind)]
        if unknown or not any(w > 0 for w in self.fault_weights.values()):
            raise ValueError(
                f"ChaosCampaign.fault_weights needs FaultKind keys and a weight > 0, got "
                f"{dict(self.fault_weights)}"
            )
        if self.fault_weights.get(FaultKind.NODE, 0) > 0 and self.nodes is None:
            raise ValueError(
                "ChaosCampaign.fault_weights gives FaultKind.NODE a weight but no "
                "ChaosCampaign.nodes says which nodes to kill"
            )
        if self.nodes is not None and not isinstance(self.nodes, ClusterNodes):
            raise TypeError(
                "ChaosCampaign.nodes must have killable(), kill(node_id) and add() "
                f"(a ClusterNodes), got {type(self.nodes).__name__}"
            )

    @property
    def client(self) -> AgentSessionClient:
        return AgentSessionClient(self.engine.client, self.flow)

    async def run(self) -> ChaosReport:
        """Run the campaign and check it; never raises for a violation (see
        :meth:`ChaosReport.raise_for_violations`)."""
        rng = random.Random(self.seed)
        start = time.monotonic()
        faults_done = asyncio.Event()
        log: list[FaultRecord] = []
        counter = iter(range(self.max_sessions))
        slots = [
            asyncio.create_task(self._slot(counter, faults_done)) for _ in range(self.sessions)
        ]
        injector = FaultInjector(self.engine, rng, self.restart_postgres, self.nodes)
        try:
            await self._inject(injector, rng, log, start, faults_done, slots)
            await asyncio.gather(*slots)
        finally:
            for slot in slots:
                slot.cancel()
        end = time.monotonic()
        await self._collect()
        faults = [self._with_recovery(f, start) for f in log]
        last = max((f.at_seconds for f in faults if f.injected), default=0.0)
        report = ChaosReport(
            seed=self.seed,
            faults=faults,
            sessions=len(self._record.sessions),
            turns=sum(s.turns_completed for s in self._record.sessions.values()),
            violations=check_invariants(self._record),
            seconds=end - start,
            drain_seconds=max(0.0, end - start - last),
            record=self._record,
            repeated_events=repeated_events(self._record),
            uncommitted_results=uncommitted_results(self._record),
        )
        return report

    def _with_recovery(self, fault: FaultRecord, start: float) -> FaultRecord:
        at = start + fault.at_seconds
        recovered: float | None = None
        answered: float | None = None
        # A session that completed its last turn between the fault's look at the
        # busy sessions and the fault itself was not hit: it has no next turn.
        affected = [
            sid
            for sid in fault.affected_sessions
            if any(c >= at for c in self._completed.get(sid, []))
            or self._record.sessions[sid].turns_completed < len(self.turns)
        ]
        if fault.injected and affected:
            # Each affected session's next completed turn; the last of them.
            nexts = [
                min((c - at for c in self._completed.get(sid, []) if c >= at), default=None)
                for sid in affected
            ]
            if all(n is not None for n in nexts):
                recovered = max(n for n in nexts if n is not None)
            # When each one's host answered again: its first call sent after the fault.
            answers = [
                min(
                    (a - at for asked, a in self._answered.get(sid, []) if asked >= at),
                    default=None,
                )
                for sid in affected
            ]
            if answers and all(a is not None for a in answers):
                answered = max(a for a in answers if a is not None)
        elif fault.injected:
            after = [c - at for c in self._completions if c >= at]
            recovered = min(after) if after else None
        return FaultRecord(
            **{
                **fault.__dict__,
                "affected_sessions": tuple(affected),
                "recovered_seconds": recovered,
                "answered_seconds": answered,
            }
        )

    async def _inject(
        self,
        injector: FaultInjector,
        rng: random.Random,
        log: list[FaultRecord],
        start: float,
        done: asyncio.Event,
        slots: list[asyncio.Task[None]],
    ) -> None:
        kinds = sorted(self.fault_weights, key=str)
        weights = [self.fault_weights[k] for k in kinds]
        low, high = (d.total_seconds() for d in self.interval)
        injected = 0
        seen: set[FaultKind] = set()
        missed = 0  # draws in a row of a kind not seen yet that found no target
        while injected < self.faults and not all(s.done() for s in slots):
            await asyncio.sleep(rng.uniform(low, high))
            # The last faults go to the kinds not injected yet, so that every kind
            # with a weight occurs when ``faults`` allows (unless one keeps finding
            # no target: then the draws are weighted again).
            missing = [k for k, w in zip(kinds, weights, strict=True) if w > 0 and k not in seen]
            if missing and self.faults - injected <= len(missing) and missed < _MISSING_TRIES:
                kind = rng.choice(missing)
            else:
                kind = rng.choices(kinds, weights)[0]
            outcome = await injector.inject(kind, sorted(self._busy))
            if outcome.injected:
                seen.add(kind)
            missed = missed + 1 if kind in missing and not outcome.injected else 0
            log.append(
                FaultRecord(
                    index=len(log),
                    kind=kind,
                    at_seconds=(time.monotonic() if outcome.at is None else outcome.at) - start,
                    target=outcome.target,
                    injected=outcome.injected,
                    detail=outcome.detail,
                    affected_sessions=outcome.affected,
                )
            )
            injected += outcome.injected
        done.set()

    async def _slot(self, counter: Iterable[int], faults_done: asyncio.Event) -> None:
        for number in counter:
            session_id = f"{self.session_prefix}-{self.seed}-{number}"
            session = SessionRecord(session_id=session_id, turns_expected=len(self.turns))
            self._record.sessions[session_id] = session
            await self._drive(session)
            if faults_done.is_set() or session.stuck is not None:
                return

    async def _call(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        try:
            return await call()
        except Exception as error:
            self._record.caller_errors.append(f"{what}: {type(error).__name__}: {error}")
            raise

    async def _drive(self, session: SessionRecord) -> None:
        sid = session.session_id
        client = self.client
        for number, text in enumerate(self.turns, start=1):
            self._busy.add(sid)
            try:
                if number == 1:
                    await self._call(
                        f"start_session {sid}", partial(client.start_session, sid, text)
                    )
                    accepted: bool | None = True
                else:
                    accepted = await self._call(
                        f"send_user_message {sid}",
                        partial(client.send_user_message, sid, text),
                    )
            except Exception:
                accepted = None
            session.user_messages.append((text, accepted))
            if accepted is False:
                session.stuck = f"send_user_message refused turn {number} ({text!r})"
                return
            if not await self._finish_turn(session, number):
                return
            self._busy.discard(sid)
            session.turns_completed = number
            now = time.monotonic()
            self._completions.append(now)
            self._completed.setdefault(sid, []).append(now)
        self._busy.discard(sid)

    async def _finish_turn(self, session: SessionRecord, number: int) -> bool:
        sid = session.session_id
        client = self.client
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.turn_timeout.total_seconds()
        sent: set[tuple[str, str]] = set()
        snapshot: AgentSnapshot | None = None
        while loop.time() < deadline:
            asked = time.monotonic()
            try:
                snapshot = await self._call(
                    f"get_agent_snapshot {sid}", lambda: client.get_agent_snapshot(sid)
                )
                self._answered.setdefault(sid, []).append((asked, time.monotonic()))
            except Exception:
                await asyncio.sleep(_POLL_SECONDS)
                continue
            for call in snapshot.tool_calls:
                key = (call.turn_id, call.tool_call_id)
                session.tool_calls[key] = call
                if call.status.is_final and key not in session.first_final:
                    session.first_final[key] = call
            state = snapshot.state
            if state is not None and state.turn_count >= number and state.active_turn_id is None:
                return True
            for interrupt in snapshot.pending_interrupts:
                key = (interrupt.turn_id, interrupt.interrupt_id)
                if key not in sent:
                    sent.add(key)
                    await self._resolve(session, interrupt)
            await asyncio.sleep(_POLL_SECONDS)
        state = None if snapshot is None else snapshot.state
        session.stuck = f"turn {number} not done within {self.turn_timeout}; state: {state}"
        return False

    async def _resolve(self, session: SessionRecord, interrupt: AgentInterrupt) -> None:
        sid, iid = session.session_id, interrupt.interrupt_id
        client = self.client
        approved, answer = True, None
        try:
            if interrupt.kind is InterruptKind.QUESTION:
                answer = self.answer(interrupt)
                accepted: bool | None = await self._call(
                    f"answer_question {sid} {iid}", lambda: client.answer_question(sid, iid, answer)
                )
            else:
                approved = self.approve(interrupt)
                accepted = await self._call(
                    f"resolve_interrupt {sid} {iid}",
                    lambda: client.resolve_interrupt(sid, iid, approved=approved),
                )
        except Exception:
            accepted = None
        session.resolutions.append(
            ResolutionRecord(
                turn_id=interrupt.turn_id,
                interrupt_id=iid,
                kind=interrupt.kind,
                approved=approved,
                answer=answer,
                accepted=accepted,
            )
        )

    async def _collect(self) -> None:
        client = self.client
        for session in self._record.sessions.values():
            sid = session.session_id
            try:
                snapshot = await self._call(
                    f"get_agent_snapshot {sid} (after)",
                    partial(client.get_agent_snapshot, sid),
                )
                session.answered_after = True
                if snapshot.state is not None:
                    session.turn_count = snapshot.state.turn_count
                    session.active_turn_id = snapshot.state.active_turn_id
                session.messages = await _all_messages(client, sid)
                session.events = await _all_events(self.engine, self.flow, sid)
                session.history = await self.engine.client.read_step_history(sid)
            except Exception as error:
                self._record.caller_errors.append(f"collect {sid}: {type(error).__name__}: {error}")
        if self.invocations is not None:
            self._record.invocations = list(self.invocations())


async def _all_messages(client: AgentSessionClient, session_id: str) -> list[Any]:
    pages = []
    before: int | None = None
    while True:
        page = await client.list_agent_messages(session_id, before_sequence=before, limit=200)
        pages.append(list(page.messages))
        before = page.next_before_sequence
        if before is None or not page.messages:
            break
    return [m for page in reversed(pages) for m in page]


async def _all_events(engine: FlowEngine, flow: AgentSessionFlow, session_id: str) -> list[Any]:
    events = []
    token = ""
    while True:
        page = await engine.client.list_stream_messages(session_id, flow.agent_events, 500, token)
        events += [m.value for m in page.messages]
        token = page.next_page_token
        if not token:
            break
    return list(reversed(events))
