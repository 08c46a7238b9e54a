"""A run's folder read as it grows (what the inspector's eval pages show): the run's
record and cases, rows read again only where ``results.jsonl`` grew, a torn line left
until it is whole, a cut file read again, and where a run stands."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from dex_agents_ray.evals import (
    CASES_FILE,
    RESULTS_FILE,
    RUN_FILE,
    SUMMARY_FILE,
    CaseResult,
    CaseStatus,
    EvalCase,
    EvalControl,
    EvalRunReader,
    EvalRunStatus,
    eval_run_progress,
    eval_run_status,
    find_eval_runs,
    write_run_record,
)
from dex_agents_ray.evals._results import ResultsWriter

CASES = [
    EvalCase(id="a", turns=("hi",), expected="x", metadata={"cost_usd": 0.5}),
    EvalCase(id="b", turns=("one", "two"), answers=("blue",)),
    EvalCase(id="c", turns=("ho",), expected={"k": [1, 2]}, session_settings={"model": "m"}),
]


def _row(case_id: str, status: CaseStatus = CaseStatus.SCORED, **fields: object) -> CaseResult:
    return CaseResult(case_id=case_id, session_id=f"eval:r:{case_id}", status=status, **fields)  # type: ignore[arg-type]


def test_the_run_record_and_its_cases_read_back(tmp_path: Path) -> None:
    started = datetime(2026, 12, 1, 3, 4, 5, tzinfo=UTC)
    record = write_run_record(tmp_path, run_id="r", agent="Agent", cases=CASES, started_at=started)
    assert record.cases == 3 and record.started_at == started
    assert EvalCase.from_jsonl(tmp_path / CASES_FILE) == CASES
    assert json.loads((tmp_path / RUN_FILE).read_text())["schema_version"] == 1
    reader = EvalRunReader(tmp_path)
    assert reader.refresh()
    assert reader.record == record and reader.run_id == "r"
    assert list(reader.cases()) == ["a", "b", "c"]
    # A newer schema is refused (the reader shows the run without its record).
    (tmp_path / RUN_FILE).write_text(json.dumps({**record.to_json(), "schema_version": 2}))
    assert reader.refresh() and reader.record is None and reader.run_id == tmp_path.name


def test_rows_are_read_as_the_file_grows(tmp_path: Path) -> None:
    writer = ResultsWriter(tmp_path)
    reader = EvalRunReader(tmp_path)
    assert not reader.refresh() and reader.rows == {}
    writer.append_many([_row("a", passed=True), _row("b", CaseStatus.NEEDS_PERSON)])
    assert reader.refresh()
    assert list(reader.rows) == ["a", "b"] and reader.version == 1
    assert not reader.refresh() and reader.version == 1  # nothing changed, nothing read

    # A torn last line waits until it is whole; a later line supersedes an earlier one.
    line = json.dumps(_row("b", passed=False).to_json()).encode()
    with (tmp_path / RESULTS_FILE).open("ab") as file:
        file.write(line[:10])
    reader.refresh()
    assert reader.rows["b"].status is CaseStatus.NEEDS_PERSON
    with (tmp_path / RESULTS_FILE).open("ab") as file:
        file.write(line[10:] + b"\n")
    assert reader.refresh()
    assert reader.rows["b"].status is CaseStatus.SCORED and reader.rows["b"].passed is False
    assert list(reader.rows) == ["a", "b"]

    # A file cut shorter (or replaced) is read again from the start.
    (tmp_path / RESULTS_FILE).write_text(json.dumps(_row("c").to_json()) + "\n")
    assert reader.refresh()
    assert list(reader.rows) == ["c"]
    replacement = tmp_path / "other.jsonl"
    replacement.write_text(
        "".join(json.dumps(_row(c).to_json()) + "\n" for c in ("a", "b", "c", "d"))
    )
    os.replace(replacement, tmp_path / RESULTS_FILE)
    assert reader.refresh() and list(reader.rows) == ["a", "b", "c", "d"]

    # A line that is not a row is left out and counted, the rest still read.
    with (tmp_path / RESULTS_FILE).open("a") as file:
        file.write("not json\n" + json.dumps(_row("e").to_json()) + "\n")
    assert reader.refresh() and "e" in reader.rows and reader.skipped_lines == 1


def test_the_report_follows_the_cases_order_and_the_summary(tmp_path: Path) -> None:
    write_run_record(tmp_path, run_id="r", agent="Agent", cases=CASES)
    writer = ResultsWriter(tmp_path)
    writer.append_many([_row("c", passed=True), _row("a", passed=False), _row("zz", passed=True)])
    writer.write_summary({"run_id": "r", "stopped": "max_failures (1) reached"})
    reader = EvalRunReader(tmp_path)
    reader.refresh()
    report = reader.report()
    assert [r.case_id for r in report.results] == ["a", "c", "zz"]  # unknown cases last
    assert report.stopped == "max_failures (1) reached"
    assert report.summary()["pass_rate"] == pytest.approx(2 / 3)
    assert reader.summary_mtime is not None


def test_find_eval_runs(tmp_path: Path) -> None:
    assert find_eval_runs(tmp_path / "missing") == []
    for name, age in (("old", 200), ("new", 100), (".hidden", 0)):
        ResultsWriter(tmp_path / name).append(_row("a"))
        stamp = 1_700_000_000 - age
        os.utime(tmp_path / name / RESULTS_FILE, (stamp, stamp))
    (tmp_path / "not-a-run").mkdir()
    write_run_record(tmp_path / "started", run_id="s", agent="A", cases=CASES)  # no row yet
    assert [p.name for p in find_eval_runs(tmp_path)] == ["started", "new", "old"]
    assert find_eval_runs(tmp_path / "old") == [tmp_path / "old"]  # a run folder itself
    assert not (tmp_path / "old" / SUMMARY_FILE).exists()


@pytest.mark.parametrize(
    ("progress", "rows", "stopped", "status"),
    [
        (None, 3, None, EvalRunStatus.DONE),
        (None, 2, None, EvalRunStatus.INTERRUPTED),
        (None, 2, "cancelled", EvalRunStatus.DONE),
        ({"state": "running", "total": 3}, 0, None, EvalRunStatus.RUNNING),
        ({"state": "paused", "total": 3, "running": 0}, 1, None, EvalRunStatus.PAUSED),
        ({"state": "cancelled", "total": 3, "running": 0}, 1, None, EvalRunStatus.CANCELLED),
        (
            {"state": "running", "total": 3, "running": 1, "done": 2, "needs_person": 0},
            2,
            None,
            EvalRunStatus.RUNNING,
        ),
        (  # between two cases of a run one case at a time
            {"state": "running", "total": 3, "running": 0, "done": 1, "needs_person": 0},
            1,
            None,
            EvalRunStatus.RUNNING,
        ),
        (
            {"state": "running", "total": 3, "running": 0, "done": 2, "needs_person": 1},
            3,
            None,
            EvalRunStatus.DONE,
        ),
        (
            {"state": "running", "total": 3, "running": 0, "done": 1, "needs_person": 0},
            1,
            "max_failures (1) reached",
            EvalRunStatus.DONE,
        ),
    ],
)
def test_where_a_run_stands(
    progress: dict[str, object] | None, rows: int, stopped: str | None, status: EvalRunStatus
) -> None:
    assert eval_run_status(progress, rows=rows, cases=3, stopped=stopped) is status


async def test_the_progress_of_runs_with_a_driver(ray_session: None, namespace: str) -> None:
    control = EvalControl("live-run", namespace=namespace)
    await control.open(5)
    # A handle that created the actor sends open without waiting; its own next
    # call waits for it, another process's may come first.
    assert await control.state() == "running"
    found = await eval_run_progress(["live-run", "gone-run"], namespace=namespace)
    assert found == {"live-run": {"total": 5, "state": "running"}}
    assert await eval_run_progress([], namespace=namespace) == {}
