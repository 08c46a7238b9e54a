"""``eval compare`` when run B has other cases than run A: the cases only one run
has are reported as added or removed, never as regressions, and the pass rates
are compared over the cases both runs have. Through the CLI and the Python API,
on results files as ``run_eval`` writes them (no Ray needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dex_agents_ray.cli import main
from dex_agents_ray.evals import CaseResult, CaseStatus, EvalReport, compare_reports
from dex_agents_ray.evals._results import ResultsWriter


def _row(case_id: str, passed: bool | None, status: CaseStatus = CaseStatus.SCORED) -> CaseResult:
    return CaseResult(
        case_id=case_id,
        session_id=f"eval:r:{case_id}",
        status=status,
        passed=passed,
        scores={} if passed is None else {"contains": 1.0 if passed else 0.0},
        error=None if status is CaseStatus.SCORED else "boom",
    )


def _write(out: Path, run_id: str, rows: list[CaseResult]) -> Path:
    writer = ResultsWriter(out)
    writer.append_many(rows)
    writer.write_summary(EvalReport(run_id=run_id, results=tuple(rows)).summary())
    return out


def _runs(tmp_path: Path) -> tuple[Path, Path]:
    """A: 100 shared cases (90 pass) plus 100 that B dropped (all pass). B: the
    100 shared cases with 3 of A's passes now failing, 1 of A's failures now
    passing, and 5 new cases (all failing)."""
    shared_a = [_row(f"s{i:03}", i >= 10) for i in range(100)]
    dropped = [_row(f"d{i:03}", True) for i in range(100)]
    shared_b = [_row(f"s{i:03}", i >= 13 or i == 0) for i in range(100)]
    new = [_row(f"n{i}", False) for i in range(5)]
    a = _write(tmp_path / "a", "nightly-0", shared_a + dropped)
    b = _write(tmp_path / "b", "nightly-1", shared_b + new)
    return a, b


def test_the_api_keeps_added_and_removed_cases_apart_from_regressions(tmp_path: Path) -> None:
    a, b = _runs(tmp_path)

    comparison = compare_reports(EvalReport.load(a), EvalReport.load(b))

    assert sorted(c.case_id for c in comparison.regressions) == ["s010", "s011", "s012"]
    assert [c.case_id for c in comparison.improvements] == ["s000"]
    assert len(comparison.removed) == 100 and {c.change for c in comparison.removed} == {"removed"}
    assert [c.case_id for c in comparison.added] == [f"n{i}" for i in range(5)]
    assert len(comparison.shared_case_ids) == 100
    # Over the shared cases: 90/100 passed in A, 88/100 in B (the whole runs say
    # 190/200 and 88/105, a drop that is mostly cases B no longer has).
    assert comparison.pass_rate_before == pytest.approx(0.90)
    assert comparison.pass_rate_after == pytest.approx(0.88)


def test_a_case_that_stopped_scoring_counts_as_not_passed_in_the_shared_rate(
    tmp_path: Path,
) -> None:
    before = EvalReport(run_id="a", results=(_row("x", True), _row("y", True)))
    after = EvalReport(run_id="b", results=(_row("x", True), _row("y", None, CaseStatus.FAILED)))

    comparison = compare_reports(before, after)

    assert [(c.case_id, c.change) for c in comparison.regressions] == [("y", "status")]
    assert (comparison.pass_rate_before, comparison.pass_rate_after) == (1.0, 0.5)
    nothing = compare_reports(EvalReport(run_id="a", results=()), after)
    assert nothing.pass_rate_before is None and nothing.pass_rate_after is None
    assert len(nothing.added) == 2 and nothing.regressions == ()


def test_the_cli_reports_3_regressed_not_103(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = _runs(tmp_path)

    status = main(["eval", "compare", str(a), str(b)])

    lines = capsys.readouterr().out.splitlines()
    assert status == 1  # 3 shared cases regressed
    assert lines[-1] == (
        "pass rate 0.9 -> 0.88 over the 100 shared cases; "
        "3 regressed, 1 improved; 5 added, 100 removed"
    )
    assert sum(line.startswith("regressed") for line in lines) == 3
    assert sum(line.startswith("removed") for line in lines) == 100

    assert main(["eval", "compare", str(a), str(b), "--json"]) == 1
    changes = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
    kinds = [c["change"] for c in changes]
    assert (kinds.count("regressed"), kinds.count("removed"), kinds.count("added")) == (3, 100, 5)


def test_the_cli_exits_0_when_b_only_drops_and_adds_cases(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _write(tmp_path / "a", "r0", [_row("x", True), _row("gone", True)])
    b = _write(tmp_path / "b", "r1", [_row("x", True), _row("new", False)])

    assert main(["eval", "compare", str(a), str(b)]) == 0

    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == (
        "pass rate 1 -> 1 over the 1 shared cases; 0 regressed, 0 improved; 1 added, 1 removed"
    )
