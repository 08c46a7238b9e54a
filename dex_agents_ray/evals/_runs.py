"""A run's directory read as it grows: the run's record, its cases, the newest row of
each case, and where the run stands (``dex-agents-ray serve``'s eval pages).

``run_eval(out=...)`` writes, beside ``results.jsonl`` and ``summary.json``:

- ``run.json``: the run's record (:class:`EvalRunRecord`: run ID, agent, number
  of cases, when this call of ``run_eval`` started), rewritten at each call;
- ``cases.jsonl``: the cases as given (``EvalCase.from_jsonl`` reads it back,
  so a run directory is enough to run the cases again).

A run of streamed cases (``run_eval`` given an iterator, such as
``EvalCase.iter_dataset``) does not know its number of cases until its driver
reads the stream to its end: its ``run.json`` says ``"cases_known": false``
meanwhile (and ``"cases": 0``; a release that does not know the field reads the
run as one of no cases), its ``cases.jsonl`` grows as the driver reads cases,
and the count is written once the stream ends.

Everything here only reads, except :func:`write_run_record`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from dex_agents_ray.evals._cases import EvalCase
from dex_agents_ray.evals._control import ACTOR_NAME, EvalControl, RunState
from dex_agents_ray.evals._results import (
    RESULTS_FILE,
    SUMMARY_FILE,
    CaseResult,
    EvalReport,
)

__all__ = [
    "CASES_FILE",
    "RUN_FILE",
    "RUN_SCHEMA_VERSION",
    "EvalRunReader",
    "EvalRunRecord",
    "EvalRunStatus",
    "eval_run_progress",
    "eval_run_status",
    "find_eval_runs",
    "write_run_record",
]

RUN_FILE = "run.json"
"""The run's record under ``out`` (:class:`EvalRunRecord`)."""
CASES_FILE = "cases.jsonl"
"""The run's cases under ``out``, one JSON object per line."""
RUN_SCHEMA_VERSION = 1
"""The version of ``run.json`` this release writes."""


@dataclass(frozen=True, kw_only=True)
class EvalRunRecord:
    """What ``run.json`` holds."""

    run_id: str
    """The run."""
    agent: str
    """The Flow type of the agent under test."""
    cases: int
    """Cases in the run (0 while ``cases_known`` is ``False``)."""
    started_at: datetime
    """When the latest call of ``run_eval`` for this run started (UTC)."""
    cases_known: bool = True
    """``False`` while the cases come from a stream its driver has not read to the
    end (``cases.jsonl`` holds those read so far)."""

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "schema_version": RUN_SCHEMA_VERSION,
            "run_id": self.run_id,
            "agent": self.agent,
            "cases": self.cases,
            "started_at": self.started_at.isoformat(),
        }
        if not self.cases_known:  # an optional field: older readers skip it
            data["cases_known"] = False
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EvalRunRecord:
        version = data.get("schema_version", 1)
        if not isinstance(version, int) or version > RUN_SCHEMA_VERSION:
            raise ValueError(
                f"{RUN_FILE} schema_version {version!r} is newer than this release reads "
                f"({RUN_SCHEMA_VERSION}); upgrade dex-agents-ray"
            )
        return cls(
            run_id=str(data["run_id"]),
            agent=str(data["agent"]),
            cases=int(data["cases"]),
            started_at=datetime.fromisoformat(str(data["started_at"])),
            cases_known=data.get("cases_known", True) is not False,
        )


class EvalRunStatus(StrEnum):
    """Where a run stands, as the eval pages show it."""

    RUNNING = "running"
    """Its driver schedules or drives cases."""
    PAUSED = "paused"
    """Paused (``eval pause``): no new case starts; running ones go on."""
    CANCELLED = "cancelled"
    """Cancelled (``eval cancel``)."""
    DONE = "done"
    """Its driver finished (every case has a row, or scheduling stopped early)."""
    INTERRUPTED = "interrupted"
    """No driver on this cluster and cases without a row (a rerun of the run ID goes on)."""


def _write_atomically(path: Path, data: bytes) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_bytes(data)
    os.replace(temporary, path)


def write_run_record(
    out: str | os.PathLike[str],
    *,
    run_id: str,
    agent: str,
    cases: Sequence[EvalCase] | None,
    started_at: datetime | None = None,
) -> EvalRunRecord:
    """Write ``cases.jsonl`` and then ``run.json`` under ``out`` (each atomically).

    ``cases=None``: the cases come from a stream; ``cases.jsonl`` is left empty for
    the driver to append to (:class:`CasesLog`) and ``run.json`` says
    ``"cases_known": false`` until :func:`finish_run_record` writes the count.
    """
    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    lines = (json.dumps(case.to_json(), sort_keys=True) + "\n" for case in cases or ())
    _write_atomically(path / CASES_FILE, "".join(lines).encode())
    record = EvalRunRecord(
        run_id=run_id,
        agent=agent,
        cases=0 if cases is None else len(cases),
        started_at=started_at or datetime.now(UTC),
        cases_known=cases is not None,
    )
    _write_record(path, record)
    return record


def _write_record(path: Path, record: EvalRunRecord) -> None:
    _write_atomically(path / RUN_FILE, json.dumps(record.to_json(), indent=2).encode())


def finish_run_record(out: str | os.PathLike[str], record: EvalRunRecord, cases: int) -> None:
    """Rewrite ``run.json`` with the number of cases a stream turned out to hold."""
    _write_record(Path(out), dataclasses.replace(record, cases=cases, cases_known=True))


class CasesLog:
    """Appends a streamed run's cases to ``cases.jsonl`` as its driver reads them:
    ``append`` keeps a case's line in ``pending``; ``write`` adds lines to the file
    (from a thread; the caller takes them from ``pending`` first)."""

    def __init__(self, out: str | os.PathLike[str]) -> None:
        self.path = Path(out) / CASES_FILE
        self.pending: list[str] = []

    def append(self, case: EvalCase) -> None:
        self.pending.append(json.dumps(case.to_json(), sort_keys=True) + "\n")

    def write(self, lines: Sequence[str]) -> None:
        """Append ``lines`` (no fsync: a line lost to a crash is written again by the
        rerun, which reads the stream from its start)."""
        with self.path.open("a", encoding="utf-8") as file:
            file.write("".join(lines))


def _is_run(path: Path) -> bool:
    return (path / RESULTS_FILE).is_file() or (path / RUN_FILE).is_file()


def find_eval_runs(directory: str | os.PathLike[str]) -> list[Path]:
    """The run directories in ``directory`` (each child holding ``results.jsonl`` or
    ``run.json``, or ``directory`` itself when it is one), newest first."""
    root = Path(directory)
    if _is_run(root):
        return [root]
    if not root.is_dir():
        return []
    found: list[tuple[float, str, Path]] = []
    for child in root.iterdir():
        if child.name.startswith(".") or not child.is_dir() or not _is_run(child):
            continue
        files = [child / name for name in (RUN_FILE, RESULTS_FILE) if (child / name).exists()]
        found.append((max(f.stat().st_mtime for f in files), child.name, child))
    found.sort(key=lambda item: (-item[0], item[1]))
    return [path for _, _, path in found]


def _file_key(path: Path) -> tuple[int, int, int, int] | None:
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)


class EvalRunReader:
    """One run directory, read again only where its files changed.

    ``refresh()`` reads what was appended to ``results.jsonl`` since the last call
    (a file cut shorter or replaced is read again from the start), and ``run.json``,
    ``cases.jsonl`` and ``summary.json`` when they changed. Not thread-safe: use one
    reader per thread or event loop.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.rows: dict[str, CaseResult] = {}
        """The newest row of each case, in the order the cases first finished."""
        self.offset = 0
        """Bytes of ``results.jsonl`` read (up to the last whole line)."""
        self.skipped_lines = 0
        """Whole lines that were not a results row (left out)."""
        self.record: EvalRunRecord | None = None
        """``run.json``; ``None`` when missing or unreadable."""
        self.summary: dict[str, Any] | None = None
        """``summary.json``; ``None`` when missing."""
        self.summary_mtime: datetime | None = None
        """When ``summary.json`` was last written."""
        self._cases: dict[str, EvalCase] | None = None
        self._keys: dict[str, tuple[int, int, int, int] | None] = {}
        self._results_identity: tuple[int, int] | None = None
        self._version = 0

    @property
    def key(self) -> str:
        """The directory's name (what the pages put in their URLs)."""
        return self.path.name

    @property
    def run_id(self) -> str:
        """The run ID (from ``run.json``, else ``summary.json``, else the directory name)."""
        if self.record is not None:
            return self.record.run_id
        if self.summary and self.summary.get("run_id"):
            return str(self.summary["run_id"])
        return self.key

    @property
    def version(self) -> int:
        """Grows by one each time ``refresh()`` finds something changed."""
        return self._version

    def _changed(self, name: str) -> tuple[bool, tuple[int, int, int, int] | None]:
        key = _file_key(self.path / name)
        changed = self._keys.get(name) != key
        self._keys[name] = key
        return changed, key

    def refresh(self) -> bool:
        """Read what changed; whether anything did."""
        changed = False
        run_changed, run_key = self._changed(RUN_FILE)
        if run_changed:
            changed = True
            self.record = None
            if run_key is not None:
                try:
                    data = json.loads((self.path / RUN_FILE).read_text(encoding="utf-8"))
                    self.record = EvalRunRecord.from_json(data)
                except (ValueError, KeyError, TypeError, OSError):
                    self.record = None
        cases_changed, _ = self._changed(CASES_FILE)
        if cases_changed:
            changed = True
            self._cases = None
        summary_changed, summary_key = self._changed(SUMMARY_FILE)
        if summary_changed:
            changed = True
            self.summary, self.summary_mtime = None, None
            if summary_key is not None:
                try:
                    text = (self.path / SUMMARY_FILE).read_text(encoding="utf-8")
                    self.summary = json.loads(text)
                    self.summary_mtime = datetime.fromtimestamp(summary_key[3] / 1e9, UTC)
                except (ValueError, OSError):
                    self.summary = None
        results_changed, _ = self._changed(RESULTS_FILE)
        if results_changed and self._read_results():
            changed = True
        if changed:
            self._version += 1
        return changed

    def _read_results(self) -> bool:
        """Read the whole lines appended to ``results.jsonl`` (all of it again when the
        file was cut shorter or replaced); whether a row came or went."""
        path = self.path / RESULTS_FILE
        try:
            with path.open("rb") as file:
                stat = os.fstat(file.fileno())
                identity = (stat.st_dev, stat.st_ino)
                reset = stat.st_size < self.offset or self._results_identity not in (
                    None,
                    identity,
                )
                start = 0 if reset else self.offset
                file.seek(start)
                data = file.read()
        except FileNotFoundError:
            had = bool(self.rows)
            self.rows, self.offset, self._results_identity = {}, 0, None
            return had
        end = data.rfind(b"\n") + 1  # a torn last line waits for the rest of it
        self.offset, self._results_identity = start + end, identity
        if reset:
            self.rows = {}
        found = reset
        for raw in data[:end].split(b"\n"):
            if not raw.strip():
                continue
            try:
                row = CaseResult.from_json(json.loads(raw))
            except (ValueError, KeyError, TypeError):
                self.skipped_lines += 1
                continue
            self.rows.pop(row.case_id, None)
            self.rows[row.case_id] = row
            found = True
        return found

    def cases(self) -> dict[str, EvalCase]:
        """The run's cases by ID (``cases.jsonl``; empty when missing or unreadable)."""
        if self._cases is None:
            try:
                self._cases = {c.id: c for c in EvalCase.from_jsonl(self.path / CASES_FILE)}
            except (OSError, ValueError):
                self._cases = {}
        return self._cases

    def ordered_rows(self) -> list[CaseResult]:
        """The rows in the cases' order (rows of cases not in ``cases.jsonl`` last)."""
        order = {case_id: index for index, case_id in enumerate(self.cases())}
        tail = len(order)
        rows = list(self.rows.values())
        rows.sort(key=lambda row: order.get(row.case_id, tail))
        return rows

    def report(self) -> EvalReport:
        """The rows read so far as an :class:`EvalReport` (``stopped`` from ``summary.json``)."""
        stopped = self.summary.get("stopped") if self.summary else None
        return EvalReport(
            run_id=self.run_id,
            results=tuple(self.ordered_rows()),
            out=self.path,
            stopped=str(stopped) if stopped else None,
        )


def eval_run_status(
    progress: Mapping[str, Any] | None,
    *,
    rows: int,
    cases: int | None,
    stopped: str | None,
    cases_known: bool = True,
) -> EvalRunStatus:
    """Where a run stands, from its control actor's status (``EvalControl.status()``;
    ``None``: no such actor on this cluster), its number of rows and cases, and why
    scheduling stopped (``summary.json``'s ``stopped``). ``cases_known=False``: the
    run's cases come from a stream its driver has not read to the end (``run.json``
    says ``"cases_known": false``), so rows cannot tell a finished run from an
    interrupted one.

    A driver killed without its Ray cluster leaves its control actor saying
    ``running`` until the run ID runs again; that run shows as running.
    """
    if progress is None:
        if not cases_known:
            return EvalRunStatus.DONE if stopped is not None else EvalRunStatus.INTERRUPTED
        complete = cases is None or rows >= cases or stopped is not None
        return EvalRunStatus.DONE if complete else EvalRunStatus.INTERRUPTED
    state = progress.get("state")
    if state == RunState.PAUSED.value:
        return EvalRunStatus.PAUSED
    if state == RunState.CANCELLED.value:
        return EvalRunStatus.CANCELLED
    if "running" not in progress:  # opened; no case finished yet
        return EvalRunStatus.RUNNING
    settled = int(progress.get("done", 0)) + int(progress.get("needs_person", 0))
    total = progress.get("total")
    counted = total is not None and progress.get("total_known", True)
    if int(progress["running"]) == 0 and (stopped or (counted and settled >= int(total or 0))):
        return EvalRunStatus.DONE
    return EvalRunStatus.RUNNING


def _has_control_actor(namespace: str | None) -> bool:
    import ray

    if namespace is None:
        namespace = ray.get_runtime_context().namespace
    return any(
        entry["namespace"] == namespace and entry["name"] == ACTOR_NAME
        for entry in ray.util.list_named_actors(all_namespaces=True)
    )


async def eval_run_progress(
    run_ids: Iterable[str], *, namespace: str | None = None
) -> dict[str, dict[str, Any]]:
    """The control actor's status (``EvalControl.status()``) of each run in
    ``run_ids`` that it knows in ``namespace`` (``None``: the current one); runs
    it does not know are left out. Ray must be initialized."""
    wanted = set(run_ids)
    if not wanted or not await asyncio.to_thread(_has_control_actor, namespace):
        return {}
    present = wanted

    async def status(run_id: str) -> tuple[str, dict[str, Any] | None]:
        try:
            control = await asyncio.to_thread(
                EvalControl, run_id, namespace=namespace, create=False
            )
            return run_id, await control.status()
        except Exception:  # unknown to the actor, or it is gone: no driver to show
            return run_id, None

    found = await asyncio.gather(*(status(run_id) for run_id in sorted(present)))
    return {run_id: value for run_id, value in found if value is not None}
