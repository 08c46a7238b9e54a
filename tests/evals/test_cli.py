"""``dex-agents-ray eval`` on the ready support agent with the grader as an LLM judge,
then ``eval compare`` between two runs, and bad input that changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dex_agents_ray.cli import main

CASES: list[dict[str, object]] = [
    {"id": "where", "input": "Where is order A2?", "expected": "shipped"},
    {"id": "refund", "input": "Please refund 300 on order A1.", "expected": "refunded 300"},
    {"id": "ask", "input": "I want a refund of 200.", "answers": ["It is A4"], "expected": "200"},
    {"id": "wrong", "input": "Where is order A3?", "expected": "delivered"},
]


def _write(path: Path, cases: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(c) + "\n" for c in cases))
    return path


def _eval(cases: Path, run_id: str, out: Path, namespace: str, store: Path) -> list[str]:
    return [
        "eval",
        str(cases),
        "--agent",
        "actors.support:flow",
        "--judge",
        "actors.grader:flow",
        "--scorer",
        "contains",
        "--run-id",
        run_id,
        "--concurrency",
        "4",
        "--out",
        str(out),
        "--namespace",
        namespace,
        "--store",
        str(store),
    ]


def test_eval_runs_the_support_agent_and_compare_finds_the_regression(
    ray_session: None,
    namespace: str,
    store_path: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cases = _write(tmp_path / "cases.jsonl", CASES)

    assert main(_eval(cases, "nightly-0", tmp_path / "n0", namespace, store_path)) == 0

    output = capsys.readouterr().out
    assert "eval nightly-0" in output and '"scored": 4' in output
    rows = {
        r["case_id"]: r
        for r in map(json.loads, (tmp_path / "n0" / "results.jsonl").read_text().splitlines())
    }
    assert rows["where"]["scores"] == {"contains": 1.0, "llm_judge": 1.0}
    assert rows["refund"]["answer"] == "Refund: refunded 300 cents on A1"
    assert rows["refund"]["interrupts_answered"] == 1
    assert rows["ask"]["scores"]["contains"] == 1.0 and rows["ask"]["interrupts_answered"] == 2
    assert rows["wrong"]["passed"] is False and rows["wrong"]["scores"]["llm_judge"] == 0.0

    # Run 1: "where" now expects something else (a regression), "wrong" is fixed.
    changed = [dict(c) for c in CASES]
    changed[0]["expected"] = "delivered"
    changed[3]["expected"] = "processing"
    assert (
        main(
            _eval(
                _write(tmp_path / "c1.jsonl", changed),
                "nightly-1",
                tmp_path / "n1",
                namespace,
                store_path,
            )
        )
        == 0
    )
    capsys.readouterr()

    status = main(["eval", "compare", str(tmp_path / "n0"), str(tmp_path / "n1"), "--json"])

    lines = capsys.readouterr().out.splitlines()
    changes = [json.loads(x) for x in lines if x.startswith("{")]
    assert status == 1
    assert {(c["case_id"], c["change"]) for c in changes} == {
        ("where", "regressed"),
        ("wrong", "improved"),
    }
    assert lines[-1] == (
        "pass rate 0.75 -> 0.75 over the 4 shared cases; "
        "1 regressed, 1 improved; 0 added, 0 removed"
    )


def test_eval_refuses_bad_cases_naming_the_line_and_changes_nothing(
    ray_session: None,
    namespace: str,
    store_path: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cases = tmp_path / "bad.jsonl"
    cases.write_text('{"id": "a", "input": "hi"}\n\n{"id": "b", "input": "x"\n')
    out = tmp_path / "out"

    assert main(_eval(cases, "bad-1", out, namespace, store_path)) == 2

    assert f"{cases}:3: not valid JSON" in capsys.readouterr().err
    assert not out.exists() and not store_path.exists()

    _write(cases, [{"id": "a", "input": "hi"}, {"id": "a", "turns": ["again"]}])
    assert main(_eval(cases, "bad-1", out, namespace, store_path)) == 2
    assert "bad.jsonl:2: field 'id': duplicate case id 'a' (first on line 1)" in (
        capsys.readouterr().err
    )
    assert not out.exists() and not store_path.exists()
