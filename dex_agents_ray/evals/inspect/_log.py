"""A finished run as an Inspect log, written by ``inspect_ai.log``'s own writer.

One sample per case row: the case's input and target, the session's messages (its
stored transcript when given, else the case's turns and the last answer), each
scorer's value as an Inspect score, the session's usage as the model's, and a
failed case's error. ``inspect view`` shows the file; ``read_eval_log`` reads it.

Inspect's synchronous ``write_eval_log`` enters a running event loop through
``nest_asyncio`` (patching asyncio for the whole process); this module never calls
it. It awaits ``write_eval_log_async`` on an event loop of its own, in a thread of
its own, so asyncio is left as it was whatever the caller runs.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dex_agents_ray.evals import (
    CASES_FILE,
    CaseResult,
    CaseStatus,
    EvalCase,
    EvalReport,
    EvalRunReader,
    EvalRunRecord,
)
from dex_agents_ray.evals.inspect._loader import load_inspect
from dex_agents_ray.evals.inspect._messages import chat_messages
from dex_agents_ray.session import AgentMessage

if TYPE_CHECKING:
    from inspect_ai.log import EvalLog, EvalSample, EvalScore, EvalSpec
    from inspect_ai.model import ModelUsage

__all__ = ["DEFAULT_MODEL_PREFIX", "build_inspect_log", "write_inspect_log"]

DEFAULT_MODEL_PREFIX = "dex-agents-ray/"
"""The log's model when none is given: this prefix and the agent's Flow type."""
META_KEY = "dex_agents_ray"
"""The key of each sample's metadata that holds its row (status, session, counts)."""


class _Run:
    """What a log is built from: the rows, the cases, and the run's record."""

    def __init__(
        self, run: EvalReport | str | os.PathLike[str], cases: Iterable[EvalCase] | None
    ) -> None:
        reader: EvalRunReader | None = None
        if isinstance(run, EvalReport):
            self.report = run
            if run.out is not None:
                reader = EvalRunReader(run.out)
                reader.refresh()
        else:
            reader = EvalRunReader(run)
            reader.refresh()
            if reader.record is None and not reader.rows:
                raise FileNotFoundError(f"{os.fspath(run)} holds no eval run (run.json)")
            self.report = reader.report()
        record: EvalRunRecord | None = reader.record if reader else None
        self.agent = record.agent if record else "agent"
        """The agent's Flow type (``run.json``); ``"agent"`` when unknown."""
        self.started_at = record.started_at if record else datetime.now(UTC)
        """When the run's latest call started (``run.json``); now when unknown."""
        self.completed_at = reader.summary_mtime if reader else None
        """When ``summary.json`` was last written; ``None``: unknown (the log says now)."""
        if cases is not None:
            self.cases = {case.id: case for case in cases}
        else:
            self.cases = reader.cases() if reader else {}
        missing = [row.case_id for row in self.report.results if row.case_id not in self.cases]
        if missing:
            raise ValueError(
                f"run {self.report.run_id!r}: no case for row {missing[0]!r} (neither "
                f"given nor in the run directory's {CASES_FILE}); pass cases=[...]"
            )


def build_inspect_log(
    run: EvalReport | str | os.PathLike[str],
    *,
    cases: Iterable[EvalCase] | None = None,
    transcripts: Mapping[str, Sequence[AgentMessage]] | None = None,
    model: str | None = None,
) -> EvalLog:
    """The Inspect ``EvalLog`` of a run.

    Args:
        run: The ``EvalReport`` that ``run_eval`` returned, or a run directory
            (``run_eval(out=...)``; the newest row of each case).
        cases: The run's cases; ``None``: the run directory's ``cases.jsonl``.
        transcripts: Each case's stored session messages, by case ID
            (:func:`read_transcripts`); a case without one gets its turns and its
            last answer as its messages.
        model: The log's model; ``None``: ``dex-agents-ray/<agent Flow type>``. A
            case whose ``session_settings`` name a ``model`` counts its usage there.

    Raises:
        ValueError: A row whose case is not known.
        FileNotFoundError: ``run`` is a directory that holds no run.
        ImportError: ``inspect-ai`` is not installed.
    """
    load_inspect()
    from inspect_ai.log import EvalLog, EvalPlan, EvalPlanStep, EvalResults, EvalStats

    source = _Run(run, cases)
    report = source.report
    model = model or f"{DEFAULT_MODEL_PREFIX}{source.agent}"
    samples = [
        _sample(row, source.cases[row.case_id], (transcripts or {}).get(row.case_id), model)
        for row in report.results
    ]
    total = max(len(source.cases), len(report.results))
    status, error = _status(report, total)
    return EvalLog(
        status=status,
        eval=_spec(source, model, total),
        plan=EvalPlan(steps=[EvalPlanStep(solver=source.agent)]),
        results=EvalResults(
            total_samples=total,
            completed_samples=sum(row.status is CaseStatus.SCORED for row in report.results),
            scores=_scores(report.results),
            metadata={k: v for k, v in report.summary().items() if k != "schema_version"},
        ),
        stats=EvalStats(
            started_at=source.started_at.isoformat(),
            completed_at=(source.completed_at or datetime.now(UTC)).isoformat(),
            model_usage=_total_usage(samples),
        ),
        error=error,
        samples=samples,
    )


def _spec(source: _Run, model: str, total: int) -> EvalSpec:
    from inspect_ai.log import EvalConfig, EvalDataset, EvalSpec

    run_id, out = source.report.run_id, source.report.out
    return EvalSpec(
        eval_id=run_id,
        run_id=run_id,
        created=source.started_at.isoformat(),
        task=run_id,
        task_id=run_id,
        solver=source.agent,
        dataset=EvalDataset(
            name=run_id,
            location=str(out / CASES_FILE) if out else None,
            samples=total,
            sample_ids=list(source.cases),
        ),
        model=model,
        config=EvalConfig(),
        metadata={"agent": source.agent, "out": str(out) if out else None},
    )


def write_inspect_log(
    run: EvalReport | str | os.PathLike[str],
    path: str | os.PathLike[str],
    *,
    cases: Iterable[EvalCase] | None = None,
    transcripts: Mapping[str, Sequence[AgentMessage]] | None = None,
    model: str | None = None,
) -> Path:
    """Write a run as an Inspect log (:func:`build_inspect_log`) with Inspect's writer.

    Args:
        run: As :func:`build_inspect_log`.
        path: A ``.eval`` or ``.json`` file, or a directory (created if missing)
            that gets ``<run_id>.eval``; ``inspect view --log-dir`` lists it.
        cases: As :func:`build_inspect_log`.
        transcripts: As :func:`build_inspect_log`.
        model: As :func:`build_inspect_log`.

    Returns:
        The file written.

    Blocks while it writes (from async code: ``await asyncio.to_thread(...)``).
    """
    log = build_inspect_log(run, cases=cases, transcripts=transcripts, model=model)
    target = Path(path)
    if target.suffix not in (".eval", ".json"):
        target = target / f"{log.eval.run_id}.eval"
    target.parent.mkdir(parents=True, exist_ok=True)
    _run_apart(_write(log, target))
    return target


async def _write(log: EvalLog, target: Path) -> None:
    from inspect_ai.log import write_eval_log_async

    await write_eval_log_async(log, target.as_posix())


def _run_apart(coroutine: Coroutine[Any, Any, None]) -> None:
    """Run ``coroutine`` with ``asyncio.run`` in a thread of its own (no loop of the
    caller's is entered, none is patched); its exception is raised here."""
    failure: list[BaseException] = []

    def main() -> None:
        try:
            asyncio.run(coroutine)
        except BaseException as error:  # re-raised in the caller's thread
            failure.append(error)

    thread = threading.Thread(target=main, name="inspect-log-writer")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]


def _target(expected: Any) -> str | list[str]:
    if expected is None:
        return ""
    if isinstance(expected, str):
        return expected
    if isinstance(expected, list) and all(isinstance(item, str) for item in expected):
        return list(expected)
    return json.dumps(expected)


def _sample(
    row: CaseResult,
    case: EvalCase,
    transcript: Sequence[AgentMessage] | None,
    default_model: str,
) -> EvalSample:
    from inspect_ai.log import EvalError, EvalSample
    from inspect_ai.model import ChatMessageUser, ModelOutput
    from inspect_ai.scorer import Score

    model = case.session_settings.get("model")
    model = model if isinstance(model, str) and model else default_model
    sample_input: str | list[Any] = (
        case.turns[0]
        if len(case.turns) == 1
        else [ChatMessageUser(content=turn, source="input") for turn in case.turns]
    )
    scores = None
    if row.status is CaseStatus.SCORED:
        scores = {
            name: Score(value=value, answer=row.answer, explanation=row.reasons.get(name))
            for name, value in row.scores.items()
        }
    error = None
    if row.status is not CaseStatus.SCORED:
        message = f"{row.status.value}: {row.error}" if row.error else row.status.value
        error = EvalError(message=message, traceback="", traceback_ansi="")
    usage = _usage(row)
    return EvalSample(
        id=case.id,
        epoch=1,
        input=sample_input,
        target=_target(case.expected),
        messages=chat_messages(case.turns, row.answer, transcript, model),
        output=ModelOutput.from_content(model, row.answer),
        scores=scores,
        metadata={**case.metadata, META_KEY: _row_facts(row)},
        model_usage={model: usage} if usage is not None else {},
        total_time=row.latency_s,
        error=error,
    )


def _row_facts(row: CaseResult) -> dict[str, Any]:
    return {
        "status": row.status.value,
        "passed": row.passed,
        "session_id": row.session_id,
        "turns": row.turns,
        "model_calls": row.model_calls,
        "tool_calls": row.tool_calls,
        "interrupts_answered": row.interrupts_answered,
        "cost_usd": row.cost_usd,
    }


def _usage(row: CaseResult) -> ModelUsage | None:
    """The row's usage in Inspect's terms (its ``input_tokens`` leave the cached ones
    out; ours count them)."""
    from inspect_ai.model import ModelUsage

    if not (row.model_calls or row.input_tokens or row.output_tokens):
        return None
    return ModelUsage(
        input_tokens=row.input_tokens - row.cached_input_tokens,
        output_tokens=row.output_tokens,
        total_tokens=row.input_tokens + row.output_tokens,
        input_tokens_cache_read=row.cached_input_tokens or None,
        reasoning_tokens=row.reasoning_tokens or None,
        total_cost=row.cost_usd,
    )


def _total_usage(samples: Sequence[EvalSample]) -> dict[str, ModelUsage]:

    totals: dict[str, ModelUsage] = {}
    for sample in samples:
        for model, usage in sample.model_usage.items():
            totals[model] = totals[model] + usage if model in totals else usage.model_copy()
    return totals


def _scores(rows: Sequence[CaseResult]) -> list[EvalScore]:
    """One ``EvalScore`` per scorer: the mean of its values over the scored cases."""
    from inspect_ai.log import EvalMetric, EvalScore

    values: dict[str, list[float]] = {}
    for row in rows:
        if row.status is CaseStatus.SCORED:
            for name, value in row.scores.items():
                values.setdefault(name, []).append(value)
    return [
        EvalScore(
            name=name,
            scorer=name,
            scored_samples=len(found),
            unscored_samples=len(rows) - len(found),
            metrics={"mean": EvalMetric(name="mean", value=sum(found) / len(found))},
        )
        for name, found in values.items()
    ]


def _status(report: EvalReport, total: int) -> tuple[Any, Any]:
    """Inspect's run status and error: ``cancelled`` or ``error`` when scheduling
    stopped early, ``started`` while cases have no row, else ``success``."""
    from inspect_ai.log import EvalError

    if report.stopped is not None:
        if "cancel" in report.stopped:
            return "cancelled", None
        message = f"stopped early: {report.stopped}"
        return "error", EvalError(message=message, traceback="", traceback_ansi="")
    if any(row.status is CaseStatus.CANCELLED for row in report.results):
        return "cancelled", None
    if len(report.results) < total:
        return "started", None
    return "success", None
