"""Scorers, policies, the report's files and compare, without Ray."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import dex_agents_ray.evals as evals
from dex_agents_ray import AgentInterrupt, InterruptKind
from dex_agents_ray.evals import (
    Answer,
    Approve,
    CaseResult,
    CaseStatus,
    EvalCase,
    EvalReport,
    EvalSample,
    Reject,
    Score,
    answer_with,
    approve_all,
    as_scorer,
    compare_reports,
    contains,
    exact_match,
    first_of,
    json_field,
    parse_judge_reply,
    regex,
    reject_all,
    run_eval,
)
from dex_agents_ray.evals._policies import decide
from dex_agents_ray.evals._results import ResultsWriter, read_results


def _sample(answer: str, expected: Any = None) -> EvalSample:
    case = EvalCase(id="c", turns=("q",), expected=expected)
    return EvalSample(case=case, session_id="eval:r:c", answer=answer)


def _score(scorer: Any, sample: EvalSample) -> Score:
    return asyncio.run(as_scorer(scorer).score(sample, None))  # type: ignore[arg-type]


def test_exports_are_pinned() -> None:
    assert sorted(evals.__all__) == sorted(
        name
        for name in dir(evals)
        if not name.startswith("_")
        and name.isidentifier()
        and getattr(evals, name).__class__.__name__ != "module"
    )
    for name in ("EvalCase", "ModelRateLimit", "approve_all", "contains", "run_eval"):
        assert name in evals.__all__


def test_importing_evals_loads_no_report_library() -> None:
    code = (
        "import sys, dex_agents_ray.evals; "
        "names = ('pandas', 'matplotlib', 'tqdm', 'rich', 'pyarrow'); "
        "print([m for m in names if m in sys.modules])"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_text_scorers() -> None:
    assert _score(contains(), _sample("It was REFUNDED", "refunded")).passed
    assert not _score(contains(case_sensitive=True), _sample("REFUNDED", "refunded")).passed
    assert _score(contains("x"), _sample("no", "x")).value == 0.0
    assert not _score(contains(), _sample("anything")).passed  # no expected
    assert _score(exact_match(), _sample(" Yes ", "yes")).passed
    assert not _score(exact_match(), _sample("yes!", "yes")).passed
    assert _score(regex(r"\d+ cents"), _sample("300 cents")).passed
    assert not _score(regex(r"^\d+$"), _sample("300 cents")).passed


def test_json_field_scorer() -> None:
    answer = 'Result: {"refund": {"amount": 300}, "ok": true}'
    assert _score(json_field("refund.amount", 300), _sample(answer)).passed
    assert _score(json_field("refund.amount"), _sample(answer, {"refund": {"amount": 300}})).passed
    assert not _score(json_field("refund.amount", 5), _sample(answer)).passed
    assert "no field" in (_score(json_field("nope", 1), _sample(answer)).reason or "")
    assert not _score(json_field("ok", True), _sample("no json")).passed
    with pytest.raises(ValueError, match="bad field path"):
        json_field("a..b")


def test_plain_callables_and_their_results() -> None:
    def passed(sample: EvalSample) -> bool:
        return True

    async def half(sample: EvalSample) -> float:
        return 0.5

    assert _score(passed, _sample("x")) == Score(value=1.0, passed=True)
    assert _score(half, _sample("x")) == Score(value=0.5, passed=False)
    assert as_scorer(half).name == "half"
    with pytest.raises(TypeError, match="returned str"):
        _score(lambda s: "yes", _sample("x"))
    with pytest.raises(ValueError, match="from 0 to 1"):
        Score(value=2, passed=True)


def test_judge_reply_parsing() -> None:
    assert parse_judge_reply('{"score": 1, "passed": true, "reason": "ok"}') == Score(
        value=1.0, passed=True, reason="ok"
    )
    assert parse_judge_reply('verdict {"score": 0.4}').passed is False
    with pytest.raises(ValueError, match="no JSON object"):
        parse_judge_reply("fine")


def _interrupt(kind: InterruptKind) -> AgentInterrupt:
    return AgentInterrupt(
        interrupt_id="i1",
        kind=kind,
        tool_call_id="t1",
        tool_name="x",
        turn_id="turn-1",
        arguments="{}",
    )


def test_policies() -> None:
    case = EvalCase(id="c", turns=("q",))
    approval, question = _interrupt(InterruptKind.APPROVAL), _interrupt(InterruptKind.QUESTION)

    def run(policy: Any, interrupt: AgentInterrupt) -> Any:
        return asyncio.run(decide(policy, case, interrupt))

    assert run(approve_all(), approval) == Approve()
    assert run(approve_all(), question) is None
    assert run(approve_all(answer="A1"), question) == Answer(text="A1")
    assert run(reject_all("no"), approval) == Reject(message="no")
    assert run(first_of(answer_with("A2"), reject_all()), question) == Answer(text="A2")
    assert run([answer_with("A2"), approve_all()], approval) == Approve()
    assert run(None, approval) is None
    with pytest.raises(TypeError, match="want Approve"):
        run(lambda c, i: "yes", approval)


def _row(
    case_id: str, passed: bool | None, value: float, status: CaseStatus = CaseStatus.SCORED
) -> CaseResult:
    return CaseResult(
        case_id=case_id,
        session_id=f"eval:r:{case_id}",
        status=status,
        passed=passed,
        scores={"contains": value} if passed is not None else {},
    )


def test_results_file_survives_a_torn_line_and_newer_versions_are_refused(tmp_path: Path) -> None:
    writer = ResultsWriter(tmp_path)
    writer.append(_row("a", True, 1.0))
    writer.append(_row("b", None, 0.0, CaseStatus.NEEDS_PERSON))
    writer.append(_row("b", False, 0.0))
    with (tmp_path / "results.jsonl").open("ab") as file:
        file.write(b'{"case_id": "c", "sta')  # a kill mid-write

    rows = read_results(tmp_path / "results.jsonl")
    assert list(rows) == ["a", "b"] and rows["b"].status is CaseStatus.SCORED

    ResultsWriter(tmp_path).append(_row("c", True, 1.0))  # reopening cuts the torn tail
    assert list(read_results(tmp_path / "results.jsonl")) == ["a", "b", "c"]

    newer = json.dumps({**_row("d", True, 1.0).to_json(), "schema_version": 99})
    (tmp_path / "results.jsonl").write_text(newer + "\n")
    with pytest.raises(ValueError, match="schema_version 99 is newer"):
        read_results(tmp_path / "results.jsonl")


def test_compare_lists_per_case_changes() -> None:
    before = EvalReport(
        run_id="a",
        results=(
            _row("x", True, 1.0),
            _row("y", False, 0.0),
            _row("z", True, 0.9),
            _row("gone", True, 1.0),
            _row("w", True, 1.0),
        ),
    )
    after = EvalReport(
        run_id="b",
        results=(
            _row("x", False, 0.0),
            _row("y", True, 1.0),
            _row("z", True, 0.5),
            _row("new", True, 1.0),
            CaseResult(case_id="w", session_id="s", status=CaseStatus.FAILED, error="boom"),
        ),
    )

    comparison = compare_reports(before, after)

    changes = {(c.case_id, c.change) for c in comparison.changes}
    assert changes == {
        ("x", "regressed"),
        ("y", "improved"),
        ("z", "regressed"),
        ("gone", "removed"),
        ("new", "added"),
        ("w", "status"),
    }
    assert {c.case_id for c in comparison.regressions} == {"x", "z", "w"}
    assert [c.case_id for c in comparison.removed] == ["gone"]
    assert compare_reports(before, before).changes == ()


async def test_run_eval_refuses_bad_arguments_before_starting_anything(tmp_path: Path) -> None:
    from tests.evals.agents import eval_flow

    flow = eval_flow(str(tmp_path))
    cases = [EvalCase(id="a", turns=("x",))]
    store = tmp_path / "never.db"
    for kwargs, message in [
        ({"run_id": "has:colon"}, "run_id must be"),
        ({"run_id": "r", "concurrency": 0}, "concurrency"),
        ({"run_id": "r", "max_failures": 0}, "max_failures"),
        ({"run_id": "r", "scorers": [contains(), contains()]}, "scorer names must be unique"),
    ]:
        with pytest.raises(ValueError, match=message):
            await run_eval(flow, cases, store=store, out=tmp_path / "out", **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="duplicate case id 'a'"):
        await run_eval(flow, cases * 2, run_id="r", store=store, out=tmp_path / "out")
    with pytest.raises(TypeError, match=r"model_limits\['m'\] must be a ModelRateLimit"):
        await run_eval(
            flow,
            cases,
            run_id="r",
            store=store,
            out=tmp_path / "out",
            model_limits={"m": 5},  # type: ignore[dict-item]
        )
    assert not store.exists() and not (tmp_path / "out").exists()
    # Results of a newer release are refused before anything is written.
    (tmp_path / "newer").mkdir()
    row = {**_row("a", True, 1.0).to_json(), "schema_version": 99}
    (tmp_path / "newer" / "results.jsonl").write_text(json.dumps(row) + "\n")
    with pytest.raises(ValueError, match="newer than this release reads"):
        await run_eval(flow, cases, run_id="r", store=store, out=tmp_path / "newer")
    assert not store.exists() and len(list((tmp_path / "newer").iterdir())) == 1
