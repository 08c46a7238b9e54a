"""The inspector's eval pages: runs, a run, a case, two runs compared; their JSON API,
their live streams (SSE) and pause / resume / cancel.

The runs are the run directories in one folder (``run_eval(out=...)``'s, by
default ``evals/<run_id>``), read with :class:`dex_agents_ray.evals.EvalRunReader`
(again only where a file changed); whether a run runs, is paused or is done comes
from its control actor (``EvalControl``) in the engine's namespace.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, StreamingResponse

from dex_agents_ray.evals import (
    CaseResult,
    EvalControl,
    EvalRunReader,
    EvalRunStatus,
    RunState,
    compare_reports,
    eval_run_progress,
    eval_run_status,
    find_eval_runs,
    session_id_for,
)

EVAL_POLL_SECONDS = 0.5
"""How often a live eval stream looks at the run files and the control actors."""
_KEEPALIVE_SECONDS = 15.0
_PROGRESS_TTL = EVAL_POLL_SECONDS / 2
_STREAM_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
_CONTROL_STATES = {
    "pause": (RunState.PAUSED, {EvalRunStatus.RUNNING}),
    "resume": (RunState.RUNNING, {EvalRunStatus.PAUSED}),
    "cancel": (RunState.CANCELLED, {EvalRunStatus.RUNNING, EvalRunStatus.PAUSED}),
}
PageRenderer = Callable[[str], HTMLResponse]
SessionCheck = Callable[[Request, str], Awaitable[bool]]


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def row_json(row: CaseResult) -> dict[str, Any]:
    """A case's row as the run page's table shows it."""
    return {
        "case_id": row.case_id,
        "status": row.status.value,
        "passed": row.passed,
        "scores": dict(row.scores),
        "turns": row.turns,
        "input_tokens": row.input_tokens,
        "output_tokens": row.output_tokens,
        "tokens": row.input_tokens + row.output_tokens,
        "model_calls": row.model_calls,
        "tool_calls": row.tool_calls,
        "latency_s": row.latency_s,
        "cost_usd": row.cost_usd,
        "error": row.error,
    }


def _pending_json(case_id: str) -> dict[str, Any]:
    return {"case_id": case_id, "status": "pending", "passed": None, "scores": {}}


class EvalRuns:
    """The run directories under ``directory``, one reader each, and their status."""

    def __init__(self, directory: Path, namespace: str | None) -> None:
        self.directory = directory
        self.namespace = namespace
        self._readers: dict[str, EvalRunReader] = {}
        self._summaries: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {}
        self._progress: dict[str, tuple[float, dict[str, Any] | None]] = {}

    def readers(self) -> list[EvalRunReader]:
        """Every run, newest first, each refreshed."""
        found = []
        for path in find_eval_runs(self.directory):
            reader = self._readers.get(path.name)
            if reader is None or reader.path != path:
                reader = self._readers[path.name] = EvalRunReader(path)
            reader.refresh()
            found.append(reader)
        return found

    def reader(self, key: str) -> EvalRunReader:
        """The run ``key`` (its directory's name), refreshed; 404 when there is none."""
        for reader in self.readers():
            if reader.key == key:
                return reader
        raise HTTPException(404, f"no eval run {key!r} under {self.directory}")

    async def progress(self, readers: Sequence[EvalRunReader]) -> dict[str, dict[str, Any]]:
        """The runs' control actors' status, asked again only after ``_PROGRESS_TTL``
        (every open page polls; the pages of one inspector share the answers)."""
        now = time.monotonic()
        ids = {r.run_id for r in readers}
        stale = sorted(
            i for i in ids if now - self._progress.get(i, (-1e9, None))[0] > _PROGRESS_TTL
        )
        if stale:
            found = await eval_run_progress(stale, namespace=self.namespace)
            for run_id in stale:
                self._progress[run_id] = (now, found.get(run_id))
        result = {}
        for run_id in ids:
            value = self._progress[run_id][1]
            if value is not None:
                result[run_id] = value
        return result

    def forget_progress(self, run_id: str) -> None:
        """Ask the run's control actor again next time (its state just changed)."""
        self._progress.pop(run_id, None)

    def summary(self, reader: EvalRunReader, progress: Mapping[str, Any] | None) -> dict[str, Any]:
        """The run's figures (the runs page's row, the run page's head)."""
        live = None if progress is None else {k: v for k, v in progress.items() if k != "elapsed_s"}
        key = (reader.version, json.dumps(live, sort_keys=True))
        cached = self._summaries.get(reader.key)
        if cached is not None and cached[0] == key:
            return cached[1]
        report = reader.report()
        figures = report.summary()
        record = reader.record
        # A run of streamed cases counts the cases read so far until its stream ends
        # (run.json's "cases_known" false): the pages show that count with a "+".
        known = record is None or record.cases_known
        total = record.cases if record is not None and known else None
        if total is None and progress is not None and progress.get("total") is not None:
            total = int(progress["total"])
            known = known and bool(progress.get("total_known", True))
        if not known and total is None:
            total = len(reader.cases())
        status = eval_run_status(
            progress, rows=len(reader.rows), cases=total, stopped=report.stopped, cases_known=known
        )
        costs = [r.cost_usd for r in report.results if r.cost_usd is not None]
        data = {
            "key": reader.key,
            "run_id": reader.run_id,
            "agent": record.agent if record is not None else None,
            "status": status.value,
            "cases": total if total is not None else len(reader.rows),
            "cases_known": known,
            "rows": len(reader.rows),
            "counts": figures["counts"],
            "passed": sum(1 for r in report.results if r.passed),
            "failed": sum(1 for r in report.results if r.passed is False),
            "pass_rate": figures["pass_rate"],
            "mean_scores": figures["mean_scores"],
            "latency_s": figures["latency_s"],
            "input_tokens": figures["input_tokens"],
            "output_tokens": figures["output_tokens"],
            "tokens": figures["input_tokens"] + figures["output_tokens"],
            "model_calls": figures["model_calls"],
            "cost_usd": sum(costs) if costs else None,
            "started_at": _iso(record.started_at if record is not None else None),
            "wall_s": _wall_seconds(reader, status, progress),
            "stopped": report.stopped,
            "running": None if live is None else live.get("running"),
        }
        self._summaries[reader.key] = (key, data)
        return data

    async def runs_json(self) -> dict[str, Any]:
        readers = self.readers()
        progress = await self.progress(readers)
        return {
            "directory": str(self.directory),
            "runs": [self.summary(r, progress.get(r.run_id)) for r in readers],
        }

    async def run_summary(self, reader: EvalRunReader) -> dict[str, Any]:
        progress = await self.progress([reader])
        return self.summary(reader, progress.get(reader.run_id))


def _wall_seconds(
    reader: EvalRunReader, status: EvalRunStatus, progress: Mapping[str, Any] | None
) -> float | None:
    """The latest ``run_eval`` call's wall time; ``None`` while it runs (the page
    counts from ``started_at``) or when not known."""
    if status in (EvalRunStatus.RUNNING, EvalRunStatus.PAUSED):
        return None
    if progress is not None and isinstance(progress.get("elapsed_s"), int | float):
        return float(progress["elapsed_s"])
    record, written = reader.record, reader.summary_mtime
    if record is None or written is None or written < record.started_at:
        return None
    return (written - record.started_at).total_seconds()


def _run_rows(reader: EvalRunReader) -> list[dict[str, Any]]:
    rows = [row_json(r) for r in reader.ordered_rows()]
    rows.extend(_pending_json(c) for c in reader.cases() if c not in reader.rows)
    return rows


def _compare_json(
    before: EvalRunReader, after: EvalRunReader, a: dict[str, Any], b: dict[str, Any]
) -> dict[str, Any]:
    comparison = compare_reports(before.report(), after.report())
    changed = {c.case_id: c for c in comparison.changes}
    worse = [c.case_id for c in comparison.regressions]
    better = [c.case_id for c in comparison.improvements]
    rest = [c for c in comparison.shared_case_ids if c not in changed]
    a_rows, b_rows = before.rows, after.rows

    def shared(case_id: str) -> dict[str, Any]:
        change = changed.get(case_id)
        return {
            "case_id": case_id,
            "change": change.change if change is not None else None,
            "detail": change.detail if change is not None else "",
            "before": row_json(a_rows[case_id]),
            "after": row_json(b_rows[case_id]),
        }

    names = {n for row in (*a_rows.values(), *b_rows.values()) for n in row.scores}
    return {
        "a": a,
        "b": b,
        "scorers": sorted(names),
        "pass_rate_before": comparison.pass_rate_before,
        "pass_rate_after": comparison.pass_rate_after,
        "counts": {
            "shared": len(comparison.shared_case_ids),
            "regressed": len(worse),
            "improved": len(better),
            "unchanged": len(rest),
            "added": len(comparison.added),
            "removed": len(comparison.removed),
        },
        "shared": [shared(c) for c in (*worse, *better, *rest)],
        "added": [row_json(c.after) for c in comparison.added if c.after is not None],
        "removed": [row_json(c.before) for c in comparison.removed if c.before is not None],
    }


def _sse(data: Any) -> str:
    return f"data: {json.dumps(data, separators=(',', ':'))}\n\n"


async def _live(
    produce: Callable[[bool], Awaitable[dict[str, Any] | None]],
    limit: int | None,
    poll: float = EVAL_POLL_SECONDS,
) -> AsyncIterator[str]:
    """``produce(first)`` every ``poll`` seconds, sent as an event when it returns
    something; a keep-alive comment when nothing was sent for a while."""
    yield "retry: 1000\n\n"
    sent, first, quiet_since = 0, True, time.monotonic()
    while True:
        data = await produce(first)
        first = False
        if data is not None:
            yield _sse(data)
            sent += 1
            quiet_since = time.monotonic()
            if limit is not None and sent >= limit:
                return
        elif time.monotonic() - quiet_since > _KEEPALIVE_SECONDS:
            yield ": keep-alive\n\n"
            quiet_since = time.monotonic()
        await asyncio.sleep(poll)


def add_eval_routes(
    app: FastAPI,
    runs: EvalRuns,
    page: PageRenderer,
    check_session: SessionCheck,
    max_stream_events: int | None,
) -> None:
    """The eval pages, their API and streams (``check_session(request, session_id)``
    returns whether the session is served; it raises 403 when the caller may not see it)."""
    for path, name in (
        ("/evals", "evals.html"),
        ("/evals/runs/{key}", "eval-run.html"),
        ("/evals/runs/{key}/cases/{case_id:path}", "eval-case.html"),
        ("/evals/compare", "eval-compare.html"),
    ):
        app.add_api_route(path, _page_route(page, name), methods=["GET"], include_in_schema=False)
    _add_read_routes(app, runs, check_session)
    _add_stream_routes(app, runs, max_stream_events)
    _add_control_route(app, runs)


def _add_read_routes(app: FastAPI, runs: EvalRuns, check_session: SessionCheck) -> None:
    @app.get("/api/evals/runs")
    async def runs_list() -> dict[str, Any]:
        return await runs.runs_json()

    @app.get("/api/evals/runs/{key}")
    async def run_detail(key: str) -> dict[str, Any]:
        reader = runs.reader(key)
        return {"run": await runs.run_summary(reader), "rows": _run_rows(reader)}

    @app.get("/api/evals/runs/{key}/cases/{case_id:path}")
    async def case_detail(key: str, case_id: str, request: Request) -> dict[str, Any]:
        reader = runs.reader(key)
        case = reader.cases().get(case_id)
        row = reader.rows.get(case_id)
        if case is None and row is None:
            raise HTTPException(404, f"no case {case_id!r} in eval run {key!r}")
        session_id = row.session_id if row is not None else session_id_for(reader.run_id, case_id)
        served = await check_session(request, session_id)
        return {
            "run": await runs.run_summary(reader),
            "case": case.to_json() if case is not None else None,
            "row": row.to_json() if row is not None else None,
            "session_id": session_id,
            "session_served": served,
        }

    @app.get("/api/evals/compare")
    async def compare(a: str = Query(...), b: str = Query(...)) -> dict[str, Any]:
        before, after = runs.reader(a), runs.reader(b)
        progress = await runs.progress([before, after])
        return _compare_json(
            before,
            after,
            runs.summary(before, progress.get(before.run_id)),
            runs.summary(after, progress.get(after.run_id)),
        )


class _RunStream:
    """One connection's view of a run: the whole run first, then what changed."""

    def __init__(self, runs: EvalRuns, key: str) -> None:
        self.runs = runs
        self.key = key
        self.sent: dict[str, CaseResult] = {}
        self.last = ""

    async def __call__(self, first: bool) -> dict[str, Any] | None:
        reader = self.runs.reader(self.key)
        summary = await self.runs.run_summary(reader)
        text = json.dumps(summary, sort_keys=True)
        if first or any(c not in reader.rows for c in self.sent):
            self.sent = dict(reader.rows)
            self.last = text
            return {"run": summary, "rows": _run_rows(reader), "full": True}
        changed = [r for c, r in reader.rows.items() if self.sent.get(c) is not r]
        if not changed and text == self.last:
            return None
        self.sent.update((r.case_id, r) for r in changed)
        self.last = text
        return {"run": summary, "rows": [row_json(r) for r in changed], "full": False}


class _RunsStream:
    """One connection's view of the runs: the list whenever it changed."""

    def __init__(self, runs: EvalRuns) -> None:
        self.runs = runs
        self.last = ""

    async def __call__(self, first: bool) -> dict[str, Any] | None:
        data = await self.runs.runs_json()
        text = json.dumps(data, sort_keys=True)
        if text == self.last:
            return None
        self.last = text
        return data


def _add_stream_routes(app: FastAPI, runs: EvalRuns, max_stream_events: int | None) -> None:
    @app.get("/api/evals/events")
    async def runs_events() -> StreamingResponse:
        return _stream(_live(_RunsStream(runs), max_stream_events))

    @app.get("/api/evals/runs/{key}/events")
    async def run_events(key: str) -> StreamingResponse:
        runs.reader(key)  # 404 before the stream starts
        return _stream(_live(_RunStream(runs, key), max_stream_events))


def _add_control_route(app: FastAPI, runs: EvalRuns) -> None:
    @app.post("/api/evals/runs/{key}/{action}")
    async def control(key: str, action: str) -> dict[str, Any]:
        if action not in _CONTROL_STATES:
            raise HTTPException(404, f"no eval run action {action!r}")
        reader = runs.reader(key)
        state, allowed = _CONTROL_STATES[action]
        runs.forget_progress(reader.run_id)
        summary = await runs.run_summary(reader)
        if EvalRunStatus(summary["status"]) not in allowed:
            raise HTTPException(409, f"cannot {action} eval run {key!r}: it is {summary['status']}")
        try:
            control = await asyncio.to_thread(
                EvalControl, reader.run_id, namespace=runs.namespace, create=False
            )
        except ValueError as error:
            raise HTTPException(409, str(error)) from None
        await control.set_state(state)
        runs.forget_progress(reader.run_id)
        return {"ok": True, "state": state.value}


def _page_route(page: PageRenderer, name: str) -> Callable[[], Any]:
    async def route() -> HTMLResponse:
        return page(name)

    return route


def _stream(frames: AsyncIterator[str]) -> StreamingResponse:
    return StreamingResponse(frames, media_type="text/event-stream", headers=_STREAM_HEADERS)
