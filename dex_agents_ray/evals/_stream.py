"""Where ``run_eval`` takes its cases from: a list, checked whole before the run
starts, or a stream (any other iterable, such as ``EvalCase.iter_dataset``), read
as the run goes.

A stream is read a bounded number of cases ahead of the running ones: when the
cases read ahead are used up, up to ``read_ahead`` more (the run's concurrency)
are taken from the iterator in a worker thread (a Ray Dataset's iterator may block
while it reads a block), so the driver holds at most ``concurrency`` running
cases, ``concurrency`` read ahead and the one waiting for a slot. Each case is
checked as it is read (an ``EvalCase``, an ID not seen before in the stream); an
error the iterator raises, or a check that fails, comes out of ``next`` once the
cases read before it are used up.

What the driver keeps per streamed case: its ID and row number (``seen``, about
120 bytes for a short ID) and, with ``out``, where its row begins in
``results.jsonl`` (8 bytes; the row itself is read back from the file when the
report is read).
"""

from __future__ import annotations

import asyncio
import itertools
import json
from array import array
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from dex_agents_ray.evals._cases import EvalCase, EvalCaseError
from dex_agents_ray.evals._results import CaseResult

__all__ = ["CaseList", "CaseStream", "RowOffsets", "final_row_offsets"]

STREAM_SOURCE = "cases"
"""How errors about a streamed case name their source (``cases:<row>``)."""


class CaseList:
    """A list of cases: every one is known (and was checked) before the run starts."""

    def __init__(self, cases: Sequence[EvalCase]) -> None:
        self.cases = cases
        self._todo = iter(cases)

    @property
    def read(self) -> int:
        return len(self.cases)

    @property
    def ended(self) -> bool:
        return True

    async def next(self) -> EvalCase | None:
        return next(self._todo, None)


class CaseStream:
    """Cases from an iterator, read ``read_ahead`` at a time in a worker thread.

    ``seen`` maps each case ID read so far to its row number (from 1); ``read`` is
    the number of cases read; ``ended`` says the iterator is exhausted.
    """

    def __init__(self, cases: Iterable[EvalCase], read_ahead: int) -> None:
        self._iterator: Iterator[EvalCase] = iter(cases)
        self._read_ahead = max(1, read_ahead)
        self._buffer: deque[EvalCase] = deque()
        self._error: Exception | None = None
        self._exhausted = False
        self._failed = False
        self.seen: dict[str, int] = {}
        self.read = 0

    @property
    def ended(self) -> bool:
        """Every case was read and given out (not after an error)."""
        return self._exhausted and not self._buffer and self._error is None and not self._failed

    def _pull(self, count: int) -> tuple[list[EvalCase], Exception | None, bool]:
        """Up to ``count`` cases, the iterator's error (after the cases before it),
        and whether it is exhausted (runs in a worker thread)."""
        batch: list[EvalCase] = []
        try:
            batch.extend(itertools.islice(self._iterator, count))
        except Exception as error:
            return batch, error, False
        return batch, None, len(batch) < count

    async def next(self) -> EvalCase | None:
        """The next case, checked; ``None`` at the end. Raises the iterator's error,
        ``TypeError`` for an item that is not an ``EvalCase`` and ``EvalCaseError``
        for an ID read before (naming both rows)."""
        if not self._buffer:
            if self._error is not None:
                raise self._error
            if self._exhausted:
                return None
            batch, error, exhausted = await asyncio.to_thread(self._pull, self._read_ahead)
            self._buffer.extend(batch)
            self._error, self._exhausted = error, exhausted
            if not self._buffer:
                return await self.next()
        case = self._buffer.popleft()
        row = self.read + 1
        if not isinstance(case, EvalCase):
            self._fail()
            kind = type(case).__name__
            raise TypeError(f"run_eval: cases must be EvalCase, got {kind} (row {row})")
        first = self.seen.get(case.id)
        if first is not None:
            self._fail()
            raise EvalCaseError(
                STREAM_SOURCE, row, "id", f"duplicate case id {case.id!r} (first on row {first})"
            )
        self.seen[case.id] = self.read = row
        return case

    def _fail(self) -> None:
        """A checked case failed: the stream gives nothing more."""
        self._buffer.clear()
        self._exhausted = self._failed = True


def final_row_offsets(path: Path) -> dict[str, int]:
    """Where the newest row of each case with a final (scored) newest row begins in
    the ``results.jsonl`` at ``path`` (read a line at a time; a torn last line is
    skipped). Raises ``ValueError`` for a line that is not a results row, or one of
    a newer release."""
    found: dict[str, int] = {}
    if not path.exists():
        return found
    offset = 0
    with path.open("rb") as file:
        for number, raw in enumerate(file, start=1):
            start, offset = offset, offset + len(raw)
            if not raw.strip():
                continue
            try:
                data = json.loads(raw)
            except json.JSONDecodeError:
                if not raw.endswith(b"\n"):  # the tail a kill tore; the case runs again
                    continue
                raise ValueError(f"{path}:{number}: not a JSON results line") from None
            row = CaseResult.from_json(data)
            found.pop(row.case_id, None)
            if row.status.final:
                found[row.case_id] = start
    return found


class RowOffsets:
    """Where each streamed case's row begins in ``results.jsonl``, by row number
    (``-1``: no row yet): 8 bytes per case."""

    def __init__(self) -> None:
        self.offsets = array("q")

    def set(self, row: int, offset: int) -> None:
        missing = row - len(self.offsets)
        if missing > 0:
            self.offsets.extend(itertools.repeat(-1, missing))
        self.offsets[row - 1] = offset

    def written(self) -> Iterator[int]:
        """The offsets of the rows written, in the cases' order."""
        return (offset for offset in self.offsets if offset >= 0)
