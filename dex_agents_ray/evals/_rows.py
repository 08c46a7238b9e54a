"""A run's rows: kept in memory, or (a streamed run with ``out``) in
``results.jsonl`` only, with the figures gathered as they come; and their writing
under ``out``: rows in batches as cases finish, the streamed cases to
``cases.jsonl`` before their rows, ``summary.json`` at most every
``PUBLISH_SECONDS``, and ``results.parquet`` at the end.

``run_eval``'s driver (``_runner``) makes one ``RunRows`` per call and gives it
each finished case's row (``add``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

from dex_agents_ray.evals._cases import EvalCase
from dex_agents_ray.evals._results import (
    CaseResult,
    CaseStatus,
    EvalReport,
    ResultsFileRows,
    ResultsWriter,
    Tally,
    load_parquet,
    read_results,
)
from dex_agents_ray.evals._runs import CasesLog, EvalRunRecord, finish_run_record
from dex_agents_ray.evals._stream import CaseList, CaseStream, RowOffsets, final_row_offsets

__all__ = ["CASES_LOG_BATCH", "PUBLISH_SECONDS", "RunRows"]

CASES_LOG_BATCH = 1000
"""A streamed run's cases read but not yet in ``cases.jsonl`` that start a write."""
PUBLISH_SECONDS = 0.5
"""At most this often the driver rewrites ``summary.json`` and publishes its progress
(both also at the end of a run)."""


class RunRows:
    """The rows of one call of ``run_eval``, their totals and their files."""

    def __init__(
        self, run_id: str, source: CaseList | CaseStream, writer: ResultsWriter | None
    ) -> None:
        self.run_id = run_id
        self.source = source
        self.writer = writer
        self.stopped: str | None = None
        """Why the run stopped early (the summary's and the report's ``stopped``)."""
        self.rows: dict[str, CaseResult] = {}
        """The rows kept in memory (every run but a streamed one with ``out``)."""
        self.on_disk = isinstance(source, CaseStream) and writer is not None
        """A streamed run with ``out``: rows live in ``results.jsonl`` only."""
        self.tally = Tally()
        """The summary's figures of the rows so far (kept when ``on_disk``)."""
        self.offsets = RowOffsets()
        """Where each case's row begins in ``results.jsonl`` (when ``on_disk``)."""
        self.prior: dict[str, int] = {}
        """Cases an earlier call scored: where their rows are (when ``on_disk``)."""
        self.record: EvalRunRecord | None = None
        self.cases_log: CasesLog | None = None
        """``cases.jsonl`` of a streamed run, appended as cases are read."""
        self.totals = dict.fromkeys(
            ("done", "failed", "needs_person", "steps", "input_tokens", "output_tokens"), 0
        )
        self._unwritten: list[CaseResult] = []
        self._flusher: asyncio.Task[None] | None = None
        self._parquet: asyncio.Task[bool] | None = None
        self._summarized = -PUBLISH_SECONDS

    # -- the rows ----------------------------------------------------------------

    def _count(self, row: CaseResult, sign: int) -> None:
        totals = self.totals
        totals["done"] += sign * (row.status in (CaseStatus.SCORED, CaseStatus.FAILED))
        totals["failed"] += sign * (row.status is CaseStatus.FAILED)
        totals["needs_person"] += sign * (row.status is CaseStatus.NEEDS_PERSON)
        totals["steps"] += sign * (row.model_calls + row.tool_calls)
        totals["input_tokens"] += sign * row.input_tokens
        totals["output_tokens"] += sign * row.output_tokens

    def keep(self, row: CaseResult) -> None:
        """Make ``row`` the case's row (the totals follow)."""
        if self.on_disk:  # a streamed case finishes once per run: nothing to replace
            self.tally.add(row)
            self._count(row, 1)
            return
        old = self.rows.get(row.case_id)
        if old is not None:
            self._count(old, -1)
        self.rows[row.case_id] = row
        self._count(row, 1)

    def add(self, row: CaseResult) -> None:
        """A case finished: keep its row and write it (in the background)."""
        self.keep(row)
        if self.writer is not None:
            self._unwritten.append(row)
            self._start_flush()

    def read_earlier(self) -> None:
        """What earlier calls of the run left in ``out`` (their scored cases are
        skipped): the rows of a list's cases, or where a stream's scored rows are
        (read a line at a time). Raises ``ValueError`` for rows of a newer release."""
        if self.writer is None:
            return
        if isinstance(self.source, CaseList):
            self.keep_scored(read_results(self.writer.path))
        else:
            self.prior = final_row_offsets(self.writer.path)

    def keep_scored(self, previous: Mapping[str, CaseResult]) -> None:
        """Keep the scored rows of an earlier run (a rerun skips those cases)."""
        cases = self.source.cases if isinstance(self.source, CaseList) else ()
        for case in cases:
            row = previous.get(case.id)
            if row is not None and row.status.final:
                self.keep(row)

    def admit(self, case: EvalCase) -> bool:
        """A streamed case just read: note it, and whether it is to run (an earlier
        call of the run may have scored it)."""
        if self.cases_log is not None:
            self.cases_log.append(case)
            if len(self.cases_log.pending) >= CASES_LOG_BATCH:
                self._start_flush()
        if self.on_disk:
            offset = self.prior.pop(case.id, None)
            if offset is None:
                return True
            assert isinstance(self.source, CaseStream) and self.writer is not None
            self.offsets.set(self.source.seen[case.id], offset)
            self.keep(ResultsFileRows(self.writer.path, [offset])[0])
            return False
        return case.id not in self.rows

    def report(self) -> EvalReport:
        results: Sequence[CaseResult]
        if self.on_disk:
            assert self.writer is not None
            results = ResultsFileRows(self.writer.path, self.offsets.written())
        else:
            source = self.source
            ids = (c.id for c in source.cases) if isinstance(source, CaseList) else source.seen
            results = tuple(self.rows[i] for i in ids if i in self.rows)
        return EvalReport(
            run_id=self.run_id,
            results=results,
            out=None if self.writer is None else self.writer.out,
            stopped=self.stopped,
        )

    def summary(self) -> dict[str, Any]:
        """``summary.json``'s figures now (gathered as rows came, for a run on disk)."""
        if self.on_disk:
            return self.tally.summary(self.run_id, self.stopped)
        return self.report().summary()

    # -- the files ---------------------------------------------------------------

    def _start_flush(self) -> None:
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush())

    async def _flush(self) -> None:
        """Write the rows that finished meanwhile: one write and fsync per batch, in a
        thread (a row lost to a kill before its fsync only makes the rerun derive it
        from the session again)."""
        assert self.writer is not None
        log = self.cases_log
        while self._unwritten or (log is not None and log.pending):
            if log is not None and log.pending:  # a row's case is written before it
                lines, log.pending = log.pending, []
                await asyncio.to_thread(log.write, lines)
            batch, self._unwritten = self._unwritten, []
            if not batch:
                continue
            offsets = await asyncio.to_thread(self.writer.append_many, batch)
            if self.on_disk:
                assert isinstance(self.source, CaseStream)
                for row, offset in zip(batch, offsets, strict=True):
                    self.offsets.set(self.source.seen[row.case_id], offset)
            now = time.monotonic()
            if now - self._summarized >= PUBLISH_SECONDS:
                self._summarized = now
                summary = self.summary()
                await asyncio.to_thread(self.writer.write_summary, summary)

    def prepare_files(self) -> None:
        """Import what ``results.parquet`` needs, in a thread, while the run goes on
        (about 0.5 s of CPU: pyarrow's first array imports pandas)."""
        if self.writer is not None:
            self._parquet = asyncio.create_task(asyncio.to_thread(load_parquet))

    async def write_files(self, report: EvalReport) -> None:
        """``summary.json`` and ``results.parquet`` at the end of the run, and the
        number of cases in ``run.json`` once a stream was read to its end."""
        if self.writer is None:
            return
        if self.on_disk:  # the rows are read back from the file: not in the loop
            await asyncio.to_thread(self.writer.write_summary, report.summary())
        else:
            self.writer.write_summary(report.summary())
        if self._parquet is not None:
            await self._parquet
        if self.on_disk:
            await asyncio.to_thread(self.writer.write_parquet, report.results)
        else:
            self.writer.write_parquet(report.results)
        if self.record is not None and not self.record.cases_known and self.source.ended:
            finish_run_record(self.writer.out, self.record, self.source.read)

    async def drain(self) -> None:
        """Wait until every finished row is on disk."""
        while self._flusher is not None and not self._flusher.done():
            await self._flusher
        if self._unwritten or (self.cases_log is not None and self.cases_log.pending):
            self._flusher = asyncio.create_task(self._flush())
            await self._flusher

    async def write_rest(self) -> None:
        """The driver stops before the end: write the finished rows and
        ``summary.json``. ``asyncio.wait``, not ``await``: a process on its way out
        (``asyncio.run`` cancels every task) may have cancelled the flusher too,
        whose rows the drain then writes."""
        if self._flusher is not None:
            await asyncio.wait([self._flusher])
        await self.drain()
        if self.writer is not None:
            summary = self.summary()
            await asyncio.to_thread(self.writer.write_summary, summary)
