"""Results of a run: one ``CaseResult`` per case, written as each case finishes.

Under ``out``: ``results.jsonl`` (one JSON object per line, appended and
fsynced as each case finishes; a later line for a case supersedes an earlier
one, and a torn last line from a kill is dropped on the next open),
``summary.json`` (rewritten atomically after each case) and, when pyarrow is
installed, ``results.parquet`` at the end of a run. Every line carries
``schema_version``; readers accept older versions and refuse newer ones.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, overload

__all__ = [
    "RESULTS_FILE",
    "RESULTS_SCHEMA_VERSION",
    "SUMMARY_FILE",
    "CaseRegression",
    "CaseResult",
    "CaseStatus",
    "EvalComparison",
    "EvalReport",
    "compare_reports",
]

RESULTS_SCHEMA_VERSION = 1
"""The version of ``results.jsonl`` lines and ``summary.json`` this release writes."""
RESULTS_FILE = "results.jsonl"
SUMMARY_FILE = "summary.json"
PARQUET_FILE = "results.parquet"
PARQUET_BATCH = 2000
"""Rows per batch written to ``results.parquet`` (a streamed run's rows are read
back from ``results.jsonl`` a batch at a time)."""


class CaseStatus(StrEnum):
    """How a case ended (so far)."""

    SCORED = "scored"
    """Every turn ran and every scorer gave a score."""
    FAILED = "failed"
    """A turn failed, the session failed, or a scorer raised (``error`` says which)."""
    NEEDS_PERSON = "needs_person"
    """An approval or question no policy answers: the session waits for a person."""
    CANCELLED = "cancelled"
    """The run was cancelled while the case ran."""

    @property
    def final(self) -> bool:
        """A rerun of the run ID skips the case (only a scored one: a failed case is
        looked at again, and a turn that failed is reported from the session's state
        without another model call)."""
        return self is CaseStatus.SCORED


@dataclass(frozen=True, kw_only=True)
class CaseResult:
    """One case's row."""

    case_id: str
    """The case."""
    session_id: str
    """Its session (derived from the run and case IDs)."""
    status: CaseStatus
    """How it ended."""
    scores: Mapping[str, float] = field(default_factory=dict)
    """Each scorer's value, 0..1."""
    passed: bool | None = None
    """Every scorer passed; ``None`` when not scored."""
    reasons: Mapping[str, str] = field(default_factory=dict)
    """Each scorer's reason, where it gave one."""
    turns: int = 0
    """Turns the session ran."""
    answer: str = ""
    """The last assistant text."""
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    reasoning_tokens: int = 0
    model_calls: int = 0
    """The session's usage (its LLM judge's is not included)."""
    tool_calls: int = 0
    """Tool calls the session made."""
    interrupts_answered: int = 0
    """Approvals and questions the policies answered in this run."""
    latency_s: float | None = None
    """From the session's start to its last stored message, from durable
    timestamps (a rerun does not reset it); ``None`` when not known."""
    cost_usd: float | None = None
    """What the model calls cost, where the case's metadata or a scorer says; ``None``: unknown."""
    error: str | None = None
    """Why it failed, or what it waits for."""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """The case's metadata."""

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"schema_version": RESULTS_SCHEMA_VERSION}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            data[name] = dict(value) if isinstance(value, Mapping) else value
        data["status"] = self.status.value
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CaseResult:
        version = data.get("schema_version", 1)
        if not isinstance(version, int) or version > RESULTS_SCHEMA_VERSION:
            raise ValueError(
                f"results schema_version {version!r} is newer than this release reads "
                f"({RESULTS_SCHEMA_VERSION}); upgrade dex-agents-ray"
            )
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        known["status"] = CaseStatus(known["status"])
        return cls(**known)


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


class Tally:
    """``EvalReport.summary()``'s figures, gathered one row at a time: counts and sums,
    plus 8 bytes per row for each scorer's values and the latencies (the mean and
    percentiles need them), never the rows."""

    def __init__(self) -> None:
        self.rows = 0
        self.counts = {status.value: 0 for status in CaseStatus}
        self.scored = 0
        self.passed = 0
        self.scores: dict[str, array[float]] = {}
        """Each scorer's values over the scored rows."""
        self.latencies = array("d")
        self.input_tokens = 0
        self.output_tokens = 0
        self.model_calls = 0

    def add(self, row: CaseResult) -> None:
        self.rows += 1
        self.counts[row.status.value] += 1
        if row.status is CaseStatus.SCORED:
            self.scored += 1
            self.passed += bool(row.passed)
            for name, value in row.scores.items():
                self.scores.setdefault(name, array("d")).append(value)
        if row.latency_s is not None:
            self.latencies.append(row.latency_s)
        self.input_tokens += row.input_tokens
        self.output_tokens += row.output_tokens
        self.model_calls += row.model_calls

    def summary(self, run_id: str, stopped: str | None) -> dict[str, Any]:
        latencies = self.latencies
        return {
            "schema_version": RESULTS_SCHEMA_VERSION,
            "run_id": run_id,
            "cases": self.rows,
            "counts": dict(self.counts),
            "pass_rate": self.passed / self.scored if self.scored else None,
            "mean_scores": {n: _mean(self.scores[n]) for n in sorted(self.scores)},
            "latency_s": {
                "mean": _mean(latencies),
                "p50": _percentile(latencies, 0.5),
                "p95": _percentile(latencies, 0.95),
            },
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "model_calls": self.model_calls,
            "stopped": stopped,
        }


class ResultsFileRows(Sequence[CaseResult]):
    """Rows of a ``results.jsonl``, each read from the file when asked: the lines at
    ``offsets`` (bytes from the file's start), in that order. Holds 8 bytes per row.
    The file must stay in place (lines are only ever appended to it)."""

    def __init__(self, path: Path, offsets: Iterable[int]) -> None:
        self.path = path
        self.offsets = array("q", offsets)

    def __repr__(self) -> str:
        return f"ResultsFileRows({str(self.path)!r}, {len(self.offsets)} rows)"

    def __len__(self) -> int:
        return len(self.offsets)

    @overload
    def __getitem__(self, index: int) -> CaseResult: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[CaseResult]: ...

    def __getitem__(self, index: int | slice) -> CaseResult | Sequence[CaseResult]:
        if isinstance(index, slice):
            return ResultsFileRows(self.path, self.offsets[index])
        offset = self.offsets[index]
        with self.path.open("rb") as file:
            return _row_at(file, offset)

    def __iter__(self) -> Iterator[CaseResult]:
        with self.path.open("rb") as file:
            for offset in self.offsets:
                yield _row_at(file, offset)


def _row_at(file: Any, offset: int) -> CaseResult:
    file.seek(offset)
    return CaseResult.from_json(json.loads(file.readline()))


@dataclass(frozen=True, kw_only=True)
class EvalReport:
    """A run's results: one row per case (``results``), in case order."""

    run_id: str
    """The run."""
    results: Sequence[CaseResult]
    """The rows: a tuple, or, for a run of streamed cases with ``out``, a
    ``ResultsFileRows`` that reads each row from ``results.jsonl`` when asked (the
    driver holds 8 bytes per row, not the row)."""
    out: Path | None = None
    """Where they are written; ``None``: nowhere."""
    stopped: str | None = None
    """Why scheduling stopped early (``max_failures``, cancelled); ``None``: it did not."""

    def result(self, case_id: str) -> CaseResult:
        """The row of ``case_id``."""
        for row in self.results:
            if row.case_id == case_id:
                return row
        raise KeyError(f"no case {case_id!r} in run {self.run_id!r}")

    def summary(self) -> dict[str, Any]:
        """Counts, pass rate, mean scores, latency percentiles and token totals."""
        tally = Tally()
        for row in self.results:
            tally.add(row)
        return tally.summary(self.run_id, self.stopped)

    def table(self) -> Any:
        """One row per case as a pandas ``DataFrame`` (a column per scorer,
        ``score:<name>``). Needs ``pip install "dex-agents-ray[evals]"``."""
        try:
            import pandas as pd
        except ImportError as error:
            raise ImportError(
                'EvalReport.table() needs pandas: pip install "dex-agents-ray[evals]"'
            ) from error
        records = []
        for row in self.results:
            data = row.to_json()
            data.pop("schema_version")
            scores = data.pop("scores")
            data.pop("reasons")
            data.pop("metadata")
            for name, value in scores.items():
                data[f"score:{name}"] = value
            records.append(data)
        frame = pd.DataFrame.from_records(records)
        if not frame.empty:
            frame = frame.set_index("case_id")
        return frame

    def plot(self) -> Any:
        """Score and latency figures (a matplotlib ``Figure``: mean score per
        scorer, and the latency histogram). Needs the ``evals`` extra."""
        try:
            # A Figure of its own, not pyplot: no backend switch, no global state (a
            # notebook shows the returned Figure; ``figure.savefig(...)`` writes it).
            from matplotlib.figure import Figure
        except ImportError as error:
            raise ImportError(
                'EvalReport.plot() needs matplotlib: pip install "dex-agents-ray[evals]"'
            ) from error
        summary = self.summary()
        figure = Figure(figsize=(10, 4))
        scores_axis, latency_axis = figure.subplots(1, 2)
        names = list(summary["mean_scores"])
        scores_axis.bar(names, [summary["mean_scores"][n] or 0.0 for n in names])
        scores_axis.set_ylim(0, 1)
        scores_axis.set_title(f"mean score ({self.run_id})")
        latencies = [row.latency_s for row in self.results if row.latency_s is not None]
        latency_axis.hist(latencies, bins=min(30, max(1, len(latencies))))
        latency_axis.set_title("latency per case")
        latency_axis.set_xlabel("seconds")
        figure.tight_layout()
        return figure

    @classmethod
    def load(cls, out: str | os.PathLike[str]) -> EvalReport:
        """The report written under ``out`` (the newest line of each case)."""
        path = Path(out)
        results_path = path / RESULTS_FILE
        if not results_path.exists():
            raise FileNotFoundError(f"no {RESULTS_FILE} under {path}")
        rows = read_results(results_path)
        run_id = ""
        summary_path = path / SUMMARY_FILE
        if summary_path.exists():
            run_id = str(json.loads(summary_path.read_text(encoding="utf-8")).get("run_id", ""))
        return cls(run_id=run_id, results=tuple(rows.values()), out=path)


def _cut_torn_tail(path: Path, chunk: int = 64 * 1024) -> None:
    """Cut off a torn last line (the driver died mid-write), reading only the file's
    tail (a streamed run's file may be larger than the driver's memory)."""
    with path.open("r+b") as file:
        end = file.seek(0, os.SEEK_END)
        if end == 0:
            return
        file.seek(end - 1)
        if file.read(1) == b"\n":
            return
        position = end
        while position > 0:
            start = max(0, position - chunk)
            file.seek(start)
            newline = file.read(position - start).rfind(b"\n")
            if newline >= 0:
                file.truncate(start + newline + 1)
                return
            position = start
        file.truncate(0)


def read_results(path: Path) -> dict[str, CaseResult]:
    """The newest row of each case in a ``results.jsonl`` (a torn last line is skipped)."""
    rows: dict[str, CaseResult] = {}
    if not path.exists():
        return rows
    lines = path.read_bytes().split(b"\n")
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            data = json.loads(raw)
        except json.JSONDecodeError:
            if number == len(lines):  # the tail a kill tore; the case runs again
                continue
            raise ValueError(f"{path}:{number}: not a JSON results line") from None
        row = CaseResult.from_json(data)
        rows.pop(row.case_id, None)
        rows[row.case_id] = row
    return rows


def load_parquet() -> bool:
    """Import pyarrow, and the pandas its first array imports, ahead of
    :meth:`ResultsWriter.write_parquet` (about 0.3 s of imports, done in a thread
    while the cases run); whether pyarrow is installed."""
    try:
        import pyarrow as pa
    except ImportError:
        return False
    pa.array([0])
    return True


class ResultsWriter:
    """Appends rows to ``results.jsonl`` (fsync each) and rewrites ``summary.json``."""

    def __init__(self, out: Path) -> None:
        self.out = out
        out.mkdir(parents=True, exist_ok=True)
        self.path = out / RESULTS_FILE
        if self.path.exists():
            _cut_torn_tail(self.path)

    def append(self, row: CaseResult) -> None:
        self.append_many([row])

    def append_many(self, rows: Sequence[CaseResult]) -> list[int]:
        """Append ``rows`` with one write and one fsync; where each row's line
        begins in the file (this writer is the file's only appender)."""
        lines = [(json.dumps(row.to_json(), sort_keys=True) + "\n").encode() for row in rows]
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            start = os.lseek(fd, 0, os.SEEK_END)
            os.write(fd, b"".join(lines))
            os.fsync(fd)
        finally:
            os.close(fd)
        offsets = list(itertools.accumulate((len(line) for line in lines[:-1]), initial=start))
        return offsets if lines else []

    def write_summary(self, summary: Mapping[str, Any]) -> None:
        temporary = self.out / (SUMMARY_FILE + ".tmp")
        temporary.write_text(json.dumps(summary, indent=2, sort_keys=True), encoding="utf-8")
        os.replace(temporary, self.out / SUMMARY_FILE)

    def write_parquet(self, results: Iterable[CaseResult]) -> bool:
        """``results.parquet`` when pyarrow is installed, ``PARQUET_BATCH`` rows at a
        time; returns whether it was written."""
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            return False
        schema = _parquet_schema(pa)
        rows = iter(results)
        temporary = self.out / (PARQUET_FILE + ".tmp")
        with pq.ParquetWriter(temporary, schema) as writer:
            while batch := list(itertools.islice(rows, PARQUET_BATCH)):
                records = []
                for row in batch:
                    data = row.to_json()
                    for key in _JSON_COLUMNS:
                        data[key] = json.dumps(data[key], sort_keys=True)
                    records.append(data)
                writer.write_table(pa.Table.from_pylist(records, schema=schema))
        os.replace(temporary, self.out / PARQUET_FILE)
        return True


_JSON_COLUMNS = ("scores", "reasons", "metadata")
"""Columns written to ``results.parquet`` as JSON text."""


def _parquet_schema(pa: Any) -> Any:
    """``results.parquet``'s columns: one per ``CaseResult`` field, plus ``schema_version``."""
    types = {
        "passed": pa.bool_(),
        "latency_s": pa.float64(),
        "cost_usd": pa.float64(),
        **{name: pa.int64() for name in _INT_COLUMNS},
    }
    names = ["schema_version", *CaseResult.__dataclass_fields__]
    return pa.schema([(name, types.get(name, pa.string())) for name in names])


_INT_COLUMNS = (
    "schema_version",
    "turns",
    "input_tokens",
    "output_tokens",
    "cached_input_tokens",
    "reasoning_tokens",
    "model_calls",
    "tool_calls",
    "interrupts_answered",
)


@dataclass(frozen=True, kw_only=True)
class CaseRegression:
    """A case that got worse (or better) from run A to run B."""

    case_id: str
    before: CaseResult | None
    """The case in A; ``None``: A had no such case."""
    after: CaseResult | None
    """The case in B; ``None``: B had no such case."""
    change: str
    """``regressed``, ``improved``, ``added``, ``removed``, or ``status`` (it
    went from one status to another)."""
    detail: str
    """What changed, in words."""


@dataclass(frozen=True, kw_only=True)
class EvalComparison:
    """``compare_reports(a, b)``: the per-case differences from A to B.

    Only the cases both runs have (``shared_case_ids``) can regress or improve,
    and the pass rates compare those cases only: a case B dropped or added
    changes the case set, not the agent, so it is listed apart (``removed``,
    ``added``) and never counted as a regression.
    """

    before: EvalReport
    after: EvalReport
    changes: tuple[CaseRegression, ...]

    @property
    def regressions(self) -> tuple[CaseRegression, ...]:
        """The shared cases that passed (or scored higher, or scored at all) in A
        and do not in B."""
        return tuple(c for c in self.changes if c.change in ("regressed", "status"))

    @property
    def improvements(self) -> tuple[CaseRegression, ...]:
        """The shared cases that do better in B."""
        return tuple(c for c in self.changes if c.change == "improved")

    @property
    def added(self) -> tuple[CaseRegression, ...]:
        """The cases only B has."""
        return tuple(c for c in self.changes if c.change == "added")

    @property
    def removed(self) -> tuple[CaseRegression, ...]:
        """The cases only A has."""
        return tuple(c for c in self.changes if c.change == "removed")

    @property
    def shared_case_ids(self) -> tuple[str, ...]:
        """The cases both runs have, in A's order."""
        after = {row.case_id for row in self.after.results}
        return tuple(row.case_id for row in self.before.results if row.case_id in after)

    @property
    def pass_rate_before(self) -> float | None:
        """A's pass rate over the shared cases; ``None`` when there are none."""
        return _shared_pass_rate(self.before, self.shared_case_ids)

    @property
    def pass_rate_after(self) -> float | None:
        """B's pass rate over the shared cases; ``None`` when there are none."""
        return _shared_pass_rate(self.after, self.shared_case_ids)


def _shared_pass_rate(report: EvalReport, case_ids: Sequence[str]) -> float | None:
    """The fraction of ``case_ids`` that passed in ``report``. A case that did not
    score (failed, waits for a person) counts as not passed, so both runs divide
    by the same cases and a case that stopped scoring lowers the rate."""
    wanted = set(case_ids)
    passed = sum(1 for row in report.results if row.case_id in wanted and row.passed)
    return passed / len(wanted) if wanted else None


def _change(case_id: str, a: CaseResult, b: CaseResult, tolerance: float) -> CaseRegression | None:
    if a.status is not b.status and CaseStatus.SCORED in (a.status, b.status):
        worse = a.status is CaseStatus.SCORED
        return CaseRegression(
            case_id=case_id,
            before=a,
            after=b,
            change="status" if worse else "improved",
            detail=f"{a.status.value} -> {b.status.value}" + (f": {b.error}" if b.error else ""),
        )
    if a.passed and b.passed is False:
        return CaseRegression(
            case_id=case_id, before=a, after=b, change="regressed", detail="passed -> failed"
        )
    if a.passed is False and b.passed:
        return CaseRegression(
            case_id=case_id, before=a, after=b, change="improved", detail="failed -> passed"
        )
    for name in sorted(set(a.scores) & set(b.scores)):
        delta = b.scores[name] - a.scores[name]
        if abs(delta) > tolerance:
            return CaseRegression(
                case_id=case_id,
                before=a,
                after=b,
                change="regressed" if delta < 0 else "improved",
                detail=f"{name} {a.scores[name]:.2f} -> {b.scores[name]:.2f}",
            )
    return None


def compare_reports(
    before: EvalReport, after: EvalReport, *, tolerance: float = 1e-9
) -> EvalComparison:
    """Per-case differences from ``before`` to ``after``: pass to fail, a score
    lower by more than ``tolerance``, a status change (each a regression when
    worse), and, apart from those, cases added or removed."""
    a = {row.case_id: row for row in before.results}
    b = {row.case_id: row for row in after.results}
    changes: list[CaseRegression] = []
    for case_id in list(a) + [c for c in b if c not in a]:
        if case_id not in b:
            changes.append(
                CaseRegression(
                    case_id=case_id,
                    before=a[case_id],
                    after=None,
                    change="removed",
                    detail="not in B",
                )
            )
        elif case_id not in a:
            changes.append(
                CaseRegression(
                    case_id=case_id,
                    before=None,
                    after=b[case_id],
                    change="added",
                    detail="new in B",
                )
            )
        else:
            change = _change(case_id, a[case_id], b[case_id], tolerance)
            if change is not None:
                changes.append(change)
    return EvalComparison(before=before, after=after, changes=tuple(changes))
