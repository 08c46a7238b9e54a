"""``run_eval``: many sessions from a list or a stream of cases, durable and resumable.

Each case's session ID derives from the run and case IDs
(``session_id_for(run_id, case_id)``), so running the same ``run_id`` again
skips cases already scored (their rows in ``results.jsonl``), resumes
unfinished sessions where they are (mid-turn: the engine re-activates them)
and starts the rest. A bounded number of cases is driven at once; a case
waiting for a person gives its slot back.

Cases given as a list are checked whole before anything starts, and the rows are
kept in memory for the report. Cases given as any other iterable (a generator,
``EvalCase.iter_dataset(dataset)``) are a stream, read a bounded number ahead of
the running ones (``_stream``); with ``out``, a streamed run keeps no row in
memory: each is written to ``results.jsonl`` as it finishes, the summary is
gathered as rows come (``Tally``), and the report reads its rows back from the
file (``_rows``). The driver's memory then grows by about 130 bytes per case (its ID, for
the duplicate check, and where its row is).

A driver that is interrupted (its task cancelled: Ctrl-C, ``SIGTERM`` in
``dex-agents-ray eval``, ``ray job stop``) or fails stops driving, writes the
rows of the cases that finished and closes the run in the control actor; the
running cases' sessions go on in their hosts, and a rerun of the run ID picks
them up where they are.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dex_agents_ray.engine import EngineOptions, FlowEngine
from dex_agents_ray.evals._cases import EvalCase
from dex_agents_ray.evals._control import EvalControl, RunState
from dex_agents_ray.evals._driver import (
    SessionOutcome,
    drive_session,
    last_answer,
    latency_seconds,
    tool_call_count,
)
from dex_agents_ray.evals._limits import EVAL_RUN_MODEL_LIMIT, EvalModelLimiter, ModelRateLimit
from dex_agents_ray.evals._policies import InterruptPolicy
from dex_agents_ray.evals._results import CaseResult, CaseStatus, EvalReport, ResultsWriter
from dex_agents_ray.evals._rows import PUBLISH_SECONDS, RunRows
from dex_agents_ray.evals._runs import CasesLog, write_run_record
from dex_agents_ray.evals._scorers import EvalSample, Score, Scorer, ScorerLike, as_scorer
from dex_agents_ray.evals._stream import CaseList, CaseStream
from dex_agents_ray.session import (
    SPEND_LIMIT_REFUSED_PREFIX,
    AgentSessionClient,
    AgentSessionFlow,
    AgentUsage,
    RaySpendLimit,
)

__all__ = ["EvalProgress", "ScoringContext", "run_eval", "session_id_for"]

logger = logging.getLogger("dex_agents_ray.evals")

_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
DEFAULT_CONCURRENCY = 16
DEFAULT_NAMESPACE = "dex-agents-ray"
"""The engine's default Ray namespace (``FlowEngine.start``'s), where the run's actors live."""


def session_id_for(run_id: str, case_id: str) -> str:
    """The session of case ``case_id`` in run ``run_id``: ``eval:<run_id>:<case_id>``
    (a run ID has no ``:``, so two pairs never share a session)."""
    return f"eval:{run_id}:{case_id}"


def check_run_id(run_id: str) -> str:
    if not isinstance(run_id, str) or not _RUN_ID.match(run_id):
        raise ValueError(
            f"run_id must be 1-128 letters, digits, '.', '_' or '-' (starting with a letter "
            f"or digit), got {run_id!r}"
        )
    return run_id


@dataclass(frozen=True, kw_only=True)
class EvalProgress:
    """Where a run stands (given to the ``progress`` callback after each case)."""

    total: int
    """Cases in the run; for streamed cases, those read so far until ``total_known``."""
    done: int
    """Cases scored or failed, in this run or (scored) in earlier ones."""
    failed: int
    """Of those, failed."""
    needs_person: int
    """Cases waiting for a person."""
    running: int
    """Cases being driven now."""
    steps: int
    """Model and tool calls of the finished cases."""
    input_tokens: int
    output_tokens: int
    elapsed_s: float
    """Seconds since this call of ``run_eval`` began."""
    state: RunState
    """Running, paused or cancelled (``dex-agents-ray eval pause|resume|cancel``)."""
    total_known: bool = True
    """``False`` while the cases come from a stream not read to its end (``total``
    counts the cases read so far)."""


class ScoringContext:
    """What scorers may use: the run and its engine (for LLM judges)."""

    def __init__(self, runner: _Run) -> None:
        self._runner = runner
        self.run_id = runner.run_id

    async def run_judge(
        self, flow: AgentSessionFlow, session_id: str, prompt: str, case: EvalCase
    ) -> str:
        """Run ``prompt`` as one turn of a ``flow`` session (resumed if it exists);
        the last assistant text. Raises ``RuntimeError`` when the turn fails or
        asks for a person."""
        sessions = self._runner.sessions_for(flow)
        judge_case = EvalCase(id=case.id, turns=(prompt,))
        outcome = await drive_session(sessions, session_id, judge_case, None, settings={})
        if outcome.status != "done":
            raise RuntimeError(f"judge session {session_id} {outcome.status}: {outcome.error}")
        return last_answer(outcome.messages)


def _eval_flow(flow: AgentSessionFlow, limiter: EvalModelLimiter | None) -> AgentSessionFlow:
    """``flow`` with the eval's limiter as its spend limit (same Flow type)."""
    if limiter is None:
        return flow
    options = flow.config.options
    wrapped = EvalModelLimiter(
        limiter.name,
        limiter.limits,
        namespace=limiter.namespace,
        inner=options.spend_limit,
        ceiling=limiter.ceiling,
    )
    run_model_limit = options.run_model_limit
    if limiter.limits and run_model_limit.maximum_attempts < EVAL_RUN_MODEL_LIMIT.maximum_attempts:
        run_model_limit = EVAL_RUN_MODEL_LIMIT
    new_options = dataclasses.replace(options, spend_limit=wrapped, run_model_limit=run_model_limit)
    return AgentSessionFlow(flow.config.runner, flow_type=flow.get_flow_type(), options=new_options)


def _run_key(request: Any) -> str:
    return "run"


class _Run:
    def __init__(
        self,
        *,
        run_id: str,
        source: CaseList | CaseStream,
        scorers: Sequence[Scorer],
        interrupts: InterruptPolicy | Sequence[InterruptPolicy] | None,
        concurrency: int,
        max_failures: int | None,
        max_spend_tokens: int | None,
        writer: ResultsWriter | None,
        progress: Callable[[EvalProgress], None] | None,
    ) -> None:
        self.run_id = run_id
        self.source = source
        self.scorers = scorers
        self.interrupts = interrupts
        self.concurrency = concurrency
        self.max_failures = max_failures
        self.max_spend_tokens = max_spend_tokens
        self.progress = progress
        self.rows = RunRows(run_id, source, writer)
        """The rows, their totals and their files."""
        self.source_error: Exception | None = None
        """What reading the stream raised (``run_eval`` raises it at the end)."""
        self.running = 0
        self.started = time.monotonic()
        self.flows: dict[str, AgentSessionFlow] = {}
        self.clients: dict[str, AgentSessionClient] = {}
        self.engine: FlowEngine | None = None
        self.control: EvalControl | None = None
        self.ceiling: RaySpendLimit | None = None
        self.state = RunState.RUNNING
        self.driving: set[asyncio.Task[None]] = set()
        """The tasks of the cases being driven (``abandon`` cancels them)."""
        self.watcher: asyncio.Task[None] | None = None
        """The task following the run's state (``_watch``)."""
        self._state_changed = asyncio.Event()
        self._publisher: asyncio.Task[None] | None = None
        self._published = -PUBLISH_SECONDS

    @property
    def stopped(self) -> str | None:
        """Why the run stopped before its end (``None``: it did not)."""
        return self.rows.stopped

    @stopped.setter
    def stopped(self, reason: str | None) -> None:
        self.rows.stopped = reason

    def sessions_for(self, flow: AgentSessionFlow) -> AgentSessionClient:
        flow_type = flow.get_flow_type()
        client = self.clients.get(flow_type)
        if client is None:
            assert self.engine is not None
            client = self.clients[flow_type] = AgentSessionClient(
                self.engine.client, self.flows[flow_type]
            )
        return client

    # -- progress ----------------------------------------------------------------

    def snapshot(self) -> EvalProgress:
        return EvalProgress(
            total=self.source.read,
            running=self.running,
            elapsed_s=time.monotonic() - self.started,
            state=self.state,
            total_known=self.source.ended,
            **self.rows.totals,
        )

    def _finish(self, row: CaseResult) -> None:
        self.rows.add(row)
        now = time.monotonic()
        if self.control is not None and now - self._published >= PUBLISH_SECONDS:
            self._published = now
            if self._publisher is None or self._publisher.done():
                if self._publisher is not None:
                    self._publisher.result()  # a failed publish fails the run, as it did inline
                # In the background: a case's slot never waits for the control actor.
                self._publisher = asyncio.create_task(self.publish())
        if self.progress is not None:
            self.progress(self.snapshot())

    async def publish(self) -> None:
        assert self.control is not None
        await self.control.publish(self.snapshot())

    async def finish(self) -> EvalReport:
        """The report, once its files are written; raises what reading the stream raised."""
        report = self.rows.report()
        await self.rows.write_files(report)
        if self.source_error is not None:
            raise self.source_error
        return report

    async def abandon(self) -> None:
        """The driver stops before the end (cancelled or failed): write the rows of the
        cases that finished and ``summary.json``, and close the run in the control
        actor (its driver is gone; a rerun opens it again). Never raises.

        The running cases' tasks are cancelled (their sessions go on in their hosts,
        and a rerun picks them up where they are)."""
        if self.watcher is not None:
            self.watcher.cancel()
        driving = list(self.driving)
        for task in driving:
            task.cancel()
        try:
            if driving:
                await asyncio.wait(driving)
            await self.rows.write_rest()
        except Exception:
            logger.warning("eval %s: could not write the finished rows", self.run_id, exc_info=True)
        if self.control is not None:
            try:
                await self.control.close()
            except Exception:  # a control actor of an older release has no ``close``
                logger.warning("eval %s: could not close the run", self.run_id, exc_info=True)

    # -- one case ----------------------------------------------------------------

    async def run_case(self, case: EvalCase, flow: AgentSessionFlow) -> CaseResult:
        session_id = session_id_for(self.run_id, case.id)
        sessions = self.sessions_for(flow)
        try:
            outcome = await drive_session(sessions, session_id, case, self.interrupts)
        except Exception as error:  # a session that failed as a run, or an RPC error
            return CaseResult(
                case_id=case.id,
                session_id=session_id,
                status=CaseStatus.FAILED,
                error=f"{type(error).__name__}: {error}",
                metadata=case.metadata,
            )
        return await self._result(case, session_id, outcome)

    async def _result(self, case: EvalCase, session_id: str, outcome: SessionOutcome) -> CaseResult:
        snapshot = outcome.snapshot
        usage = snapshot.usage if snapshot is not None else None
        state = snapshot.state if snapshot is not None else None
        messages = outcome.messages
        base: dict[str, Any] = {
            "case_id": case.id,
            "session_id": session_id,
            "turns": state.turn_count if state is not None else 0,
            "answer": last_answer(messages),
            "input_tokens": usage.input_tokens if usage else 0,
            "output_tokens": usage.output_tokens if usage else 0,
            "cached_input_tokens": usage.cached_input_tokens if usage else 0,
            "reasoning_tokens": usage.reasoning_tokens if usage else 0,
            "model_calls": usage.model_calls if usage else 0,
            "tool_calls": tool_call_count(messages),
            "interrupts_answered": outcome.interrupts_answered,
            "latency_s": latency_seconds(snapshot, messages) if snapshot else None,
            "metadata": case.metadata,
            "cost_usd": _cost(case),
        }
        if outcome.status == "needs_person":
            return CaseResult(status=CaseStatus.NEEDS_PERSON, error=outcome.error, **base)
        if outcome.status != "done":
            return CaseResult(status=CaseStatus.FAILED, error=outcome.error, **base)
        sample = EvalSample(
            case=case,
            session_id=session_id,
            answer=base["answer"],
            messages=messages,
            usage=usage if usage is not None else AgentUsage(),
        )
        scores: dict[str, float] = {}
        reasons: dict[str, str] = {}
        passed = True
        context = ScoringContext(self)
        for scorer in self.scorers:
            try:
                score: Score = await scorer.score(sample, context)
            except Exception as error:
                return CaseResult(
                    status=CaseStatus.FAILED,
                    error=f"scorer {scorer.name!r}: {type(error).__name__}: {error}",
                    scores=scores,
                    reasons=reasons,
                    **base,
                )
            scores[scorer.name] = score.value
            if score.reason:
                reasons[scorer.name] = score.reason
            passed = passed and score.passed
        return CaseResult(
            status=CaseStatus.SCORED, scores=scores, reasons=reasons, passed=passed, **base
        )

    # -- scheduling --------------------------------------------------------------

    async def _should_stop(self) -> bool:
        # The state comes from the watcher (no actor call per case).
        while True:
            self._state_changed.clear()  # before the check: a change after it wakes the wait
            if self.state is not RunState.PAUSED:
                break
            if self.control is not None:
                await self.publish()  # what a paused run has done
            await self._state_changed.wait()
        if self.state is RunState.CANCELLED:
            self.stopped = "cancelled"
            return True
        failed = self.rows.totals["failed"]
        if self.max_failures is not None and failed >= self.max_failures:
            self.stopped = f"max_failures ({self.max_failures}) reached"
            return True
        if self.ceiling is not None and self.max_spend_tokens is not None:
            spent = await self.ceiling.spent("run")
            if spent >= self.max_spend_tokens:
                self.stopped = f"spend ceiling of {self.max_spend_tokens} tokens reached"
                return True
        return False

    async def _watch(self, running: dict[str, asyncio.Task[None]]) -> None:
        """Follow the run's state (``eval pause|resume|cancel``); on cancel, cancel the
        running cases."""
        assert self.control is not None
        while True:
            state = await self.control.state()
            if state is not self.state:
                self.state = state
                self._state_changed.set()
            if state is RunState.CANCELLED:
                self.stopped = "cancelled"
                for task in list(running.values()):
                    task.cancel()
                return
            await self.control.wait_changed(timeout=5.0)

    async def _cancelled_row(self, case: EvalCase, flow: AgentSessionFlow) -> CaseResult:
        """Cancel the case's running turn (``cancel_turn``) and report it cancelled."""
        session_id = session_id_for(self.run_id, case.id)
        sessions = self.sessions_for(flow)
        detail = "the run was cancelled"
        try:
            snapshot = await sessions.get_agent_snapshot(session_id)
            turn = snapshot.state.active_turn_id if snapshot.state is not None else None
            if turn is not None and await sessions.cancel_turn(session_id, turn):
                detail += f"; {turn} cancelled"
        except Exception as error:  # the session may not exist yet
            detail += f" ({type(error).__name__}: {error})"
        return CaseResult(
            case_id=case.id,
            session_id=session_id,
            status=CaseStatus.CANCELLED,
            error=detail,
            metadata=case.metadata,
        )

    async def _next_case(self) -> EvalCase | None:
        """The next case to run; ``None`` at the end of the cases, or when the stream
        failed (``source_error``)."""
        while True:
            try:
                case = await self.source.next()
            except Exception as error:  # a bad row, a duplicate ID, the iterator's own
                self.source_error = error
                self.stopped = f"reading the cases failed: {type(error).__name__}: {error}"
                return None
            if case is None or self.rows.admit(case):
                return case

    async def schedule(self, flow: AgentSessionFlow) -> None:
        slots = asyncio.Semaphore(self.concurrency)
        tasks = self.driving
        running: dict[str, asyncio.Task[None]] = {}
        watcher = self.watcher = asyncio.create_task(self._watch(running)) if self.control else None

        async def one(case: EvalCase) -> None:
            try:
                try:
                    row = await self.run_case(case, flow)
                except asyncio.CancelledError:
                    if self.state is not RunState.CANCELLED:
                        raise
                    row = await self._cancelled_row(case, flow)
                if SPEND_LIMIT_REFUSED_PREFIX in (row.error or ""):
                    self.stopped = self.stopped or "spend ceiling reached"
                running.pop(case.id, None)
                self.running -= 1
                self._finish(row)
            finally:
                if case.id in running:  # it raised: the slot is free all the same
                    running.pop(case.id, None)
                    self.running -= 1
                slots.release()

        while (case := await self._next_case()) is not None:
            await slots.acquire()
            if await self._should_stop():
                slots.release()
                break
            self.running += 1
            task = asyncio.create_task(one(case))
            running[case.id] = task
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        self.rows.prepare_files()  # as the last cases run and free the CPUs
        try:
            if tasks:
                await asyncio.gather(*tasks)
        finally:
            if watcher is not None:
                watcher.cancel()
        await self.rows.drain()
        if self.control is not None:
            if self._publisher is not None:
                await self._publisher  # the last word is the final progress
            await self.publish()


def _cost(case: EvalCase) -> float | None:
    value = case.metadata.get("cost_usd")
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


async def run_eval(
    flow: AgentSessionFlow,
    cases: Iterable[EvalCase],
    *,
    run_id: str,
    concurrency: int = DEFAULT_CONCURRENCY,
    scorers: Sequence[ScorerLike] = (),
    interrupts: InterruptPolicy | Sequence[InterruptPolicy] | None = None,
    model_limits: Mapping[str, ModelRateLimit] | None = None,
    max_failures: int | None = None,
    max_spend_tokens: int | None = None,
    out: str | Path | None = None,
    store: str | Path | None = None,
    namespace: str | None = None,
    ray_address: str | None = None,
    progress: Callable[[EvalProgress], None] | None = None,
    engine_options: EngineOptions | None = None,
) -> EvalReport:
    """Run every case as a session of ``flow`` and score it; returns the report.

    Durable and resumable: the same ``run_id`` again skips the cases ``out``
    already holds a scored row for, resumes unfinished sessions where they are,
    and starts the rest. A case needing a person is reported ``needs_person``
    and its session left waiting.

    A list of cases is checked whole before anything starts; any other iterable
    is a stream (``EvalCase.iter_dataset(dataset)``), read at most ``concurrency``
    cases ahead of the running ones (see the module's docstring). A bad case in a
    stream stops the scheduling; the running cases finish, then it is raised.

    Args:
        flow: The agent (its Flow type names the sessions' type).
        cases: The cases (``EvalCase.from_jsonl``, or a stream such as
            ``EvalCase.iter_dataset``); IDs must be unique.
        run_id: Names the run; with a case ID it names the case's session.
        concurrency: Most cases driven at once.
        scorers: ``Scorer`` objects or plain callables (see ``dex_agents_ray.evals``).
        interrupts: Who answers approvals and questions (``approve_all()``,
            ``reject_all()``, a callable, or a list tried in order), after the
            case's scripted ``answers``; ``None``: nobody (such cases need a person).
        model_limits: Per model (the session setting ``model``, ``"default"``
            without one, ``"*"`` for any other): requests and tokens per
            minute shared by every session on the cluster.
        max_failures: Stop scheduling new cases once this many failed.
        max_spend_tokens: The run's spend ceiling in tokens (input plus output);
            past it every model call is refused and scheduling stops.
        out: Where ``results.jsonl`` and ``summary.json`` go (needed to resume:
            without it a rerun scores every case again, though its sessions
            still resume).
        store: The engine's store (default ``./.dex-agents-ray/engine.db``).
        namespace: The engine's Ray namespace (default ``dex-agents-ray``).
        ray_address: Ray to join when Ray is not initialized.
        progress: Called with an ``EvalProgress`` after each case.
        engine_options: How the run's engine starts (``FlowEngine.start``'s
            options: ``host_resources`` to keep session hosts on certain nodes
            of a cluster, ``shared_hosts``, ``passivate_after``...); ``store``,
            ``namespace`` and ``ray_address`` given here win over its fields.

    Raises:
        ValueError: A bad ``run_id``, ``concurrency``, duplicate case IDs in a
            list; nothing is started.
        EvalCaseError: A bad or duplicate case in a stream (naming its row, from 1).
    """
    listed, scorer_objects = _checked(
        flow, cases, run_id, concurrency, scorers, model_limits, max_failures, max_spend_tokens
    )
    run = _Run(
        run_id=run_id,
        source=CaseList(listed) if listed is not None else CaseStream(cases, concurrency),
        scorers=scorer_objects,
        interrupts=interrupts,
        concurrency=concurrency,
        max_failures=max_failures,
        max_spend_tokens=max_spend_tokens,
        writer=ResultsWriter(Path(out)) if out is not None else None,
        progress=progress,
    )
    options = _engine_options(engine_options, store, namespace, ray_address)
    return await _drive(run, flow, model_limits, options, out)


def _engine_options(
    given: EngineOptions | None,
    store: str | Path | None,
    namespace: str | None,
    ray_address: str | None,
) -> EngineOptions:
    """``engine_options`` with ``run_eval``'s own ``store``, ``namespace`` and
    ``ray_address`` in place of its fields where given."""
    options = given or EngineOptions()
    return dataclasses.replace(
        options,
        store=options.store if store is None else store,
        namespace=options.namespace if namespace is None else namespace,
        ray_address=options.ray_address if ray_address is None else ray_address,
    )


async def _drive(
    run: _Run,
    flow: AgentSessionFlow,
    model_limits: Mapping[str, ModelRateLimit] | None,
    options: EngineOptions,
    out: str | Path | None,
) -> EvalReport:
    """Start the run's engine, drive its cases and finish it (or, interrupted or
    failed, leave it for a rerun)."""
    run.rows.read_earlier()
    engine = await _start(run, flow, model_limits, options, out)
    try:
        await run.schedule(run.flows[flow.get_flow_type()])
        return await run.finish()
    except BaseException:  # cancelled (interrupted) or failed: a rerun goes on
        await run.abandon()
        raise
    finally:
        # The sessions stay in the store; waiting ones hold no process.
        await engine.shutdown(stop_hosts=False)


def _checked(
    flow: AgentSessionFlow,
    cases: Iterable[EvalCase],
    run_id: str,
    concurrency: int,
    scorers: Sequence[ScorerLike],
    model_limits: Mapping[str, ModelRateLimit] | None,
    max_failures: int | None,
    max_spend_tokens: int | None,
) -> tuple[list[EvalCase] | None, list[Scorer]]:
    """``run_eval``'s arguments checked (before anything starts): the cases (``None``
    for a stream, checked as it is read) and scorers."""
    check_run_id(run_id)
    if not isinstance(flow, AgentSessionFlow):
        raise TypeError("run_eval: flow must be an AgentSessionFlow")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError(f"run_eval: concurrency must be an int >= 1, got {concurrency!r}")
    if max_failures is not None and max_failures < 1:
        raise ValueError("run_eval: max_failures must be >= 1 or None")
    if max_spend_tokens is not None and max_spend_tokens < 1:
        raise ValueError("run_eval: max_spend_tokens must be >= 1 or None")
    listed: list[EvalCase] | None = None
    if isinstance(cases, Sequence):
        listed = list(cases)
        seen: set[str] = set()
        for case in listed:
            if not isinstance(case, EvalCase):
                raise TypeError(f"run_eval: cases must be EvalCase, got {type(case).__name__}")
            if case.id in seen:
                raise ValueError(f"run_eval: duplicate case id {case.id!r}")
            seen.add(case.id)
    elif not isinstance(cases, Iterable):
        raise TypeError(f"run_eval: cases must be an iterable of EvalCase, got {cases!r}")
    for key, limit in (model_limits or {}).items():
        if not isinstance(limit, ModelRateLimit):
            raise TypeError(f"run_eval: model_limits[{key!r}] must be a ModelRateLimit")
    scorer_objects = [as_scorer(s) for s in scorers]
    names = [s.name for s in scorer_objects]
    if len(set(names)) != len(names):
        raise ValueError(f"run_eval: scorer names must be unique, got {names}")
    return listed, scorer_objects


async def _start(
    run: _Run,
    flow: AgentSessionFlow,
    model_limits: Mapping[str, ModelRateLimit] | None,
    options: EngineOptions,
    out: str | Path | None,
) -> FlowEngine:
    """Make the run's flows (with its limiter), start its engine and open its control."""
    namespace = options.namespace or DEFAULT_NAMESPACE
    if out is not None:  # the eval pages read the run's agent, cases and start from it
        listed = run.source.cases if isinstance(run.source, CaseList) else None
        run.rows.record = write_run_record(
            out, run_id=run.run_id, agent=flow.get_flow_type(), cases=listed
        )
        if listed is None:
            run.rows.cases_log = CasesLog(out)
    limiter: EvalModelLimiter | None = None
    if run.max_spend_tokens is not None:
        ledger = (Path(out) if out is not None else Path(".dex-agents-ray")) / "spend.db"
        run.ceiling = RaySpendLimit(
            f"eval.{run.run_id}",
            default_budget=run.max_spend_tokens,
            key=_run_key,
            ledger_path=ledger,
            namespace=namespace,
        )
    if model_limits or run.ceiling is not None:
        limiter = EvalModelLimiter(
            f"eval.{run.run_id}",
            dict(model_limits or {}),
            namespace=namespace,
            ceiling=run.ceiling,
        )
    flows = [flow] + [f for s in run.scorers for f in getattr(s, "flows", ())]
    for each in flows:
        if each.get_flow_type() not in run.flows:
            run.flows[each.get_flow_type()] = _eval_flow(each, limiter)
    run.engine = await FlowEngine.start(
        list(run.flows.values()), options=dataclasses.replace(options, namespace=namespace)
    )
    run.control = EvalControl(run.run_id, namespace=namespace)
    # A new actor starts while the first cases run; a stream's total is not known yet.
    await run.control.open(run.source.read if run.source.ended else None)
    return run.engine
