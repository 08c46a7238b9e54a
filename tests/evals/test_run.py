"""run_eval on real Ray and SQLite: scores, interrupts by policy, a case needing a
person, results on disk, and a rerun that skips what was scored."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dex_agents_ray import AgentSessionClient
from dex_agents_ray.engine import FlowEngine
from dex_agents_ray.evals import (
    CaseStatus,
    EvalCase,
    EvalReport,
    Score,
    approve_all,
    contains,
    exact_match,
    regex,
    run_eval,
    session_id_for,
)
from dex_agents_ray.testing import InvocationLog
from tests.evals.agents import eval_flow


def _cases() -> list[EvalCase]:
    return [
        EvalCase(id="read", turns=("r1 look x",), expected="found r1 look x"),
        EvalCase(id="two", turns=("t1 first", "t1 second"), expected="found t1 second"),
        EvalCase(id="write", turns=("w1 refund it",), expected="refunded"),
        EvalCase(id="asked", turns=("q1 ask me",), answers=("blue",), expected="blue"),
        EvalCase(id="nobody", turns=("q2 ask again",), expected="anything"),
        EvalCase(id="wrong", turns=("x1 look",), expected="not there"),
    ]


async def test_run_eval_scores_answers_interrupts_and_writes_results(
    ray_session: None, namespace: str, store_path: Path, state_dir: Path, tmp_path: Path
) -> None:
    flow = eval_flow(str(state_dir))
    out = tmp_path / "out"
    seen: list[int] = []

    def short(sample: Any) -> Score:
        return Score(value=0.5, passed=len(sample.answer) < 100, reason="half")

    report = await run_eval(
        flow,
        _cases(),
        run_id="r-1",
        concurrency=3,
        scorers=[contains(), exact_match("nope", name="exact"), regex(r"^done: "), short],
        interrupts=approve_all(),
        out=out,
        store=store_path,
        namespace=namespace,
        progress=lambda p: seen.append(p.done),
    )

    rows = {r.case_id: r for r in report.results}
    assert [r.case_id for r in report.results] == [c.id for c in _cases()]
    assert rows["read"].status is CaseStatus.SCORED and rows["read"].passed is False  # exact
    assert rows["read"].scores == {"contains": 1.0, "exact": 0.0, "regex": 1.0, "short": 0.5}
    assert rows["read"].answer == "done: found r1 look x"
    assert rows["two"].turns == 2 and rows["two"].scores["contains"] == 1.0
    assert rows["two"].model_calls == 4 and rows["two"].input_tokens == 40
    assert rows["two"].tool_calls == 2 and rows["two"].latency_s is not None
    assert rows["write"].scores["contains"] == 1.0 and rows["write"].interrupts_answered == 1
    assert rows["asked"].answer == 'done: {"status":"answered","answer":"blue"}'
    assert rows["asked"].scores["contains"] == 1.0
    assert rows["nobody"].status is CaseStatus.NEEDS_PERSON
    assert "question" in (rows["nobody"].error or "")
    assert rows["wrong"].scores["contains"] == 0.0
    assert len(seen) == 6 and seen[-1] == 5

    # On disk: one line per case, a summary, Parquet; the report loads back.
    lines = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(x["case_id"] for x in lines) == sorted(rows)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["counts"]["scored"] == 5 and summary["counts"]["needs_person"] == 1
    assert (out / "results.parquet").exists()
    loaded = EvalReport.load(out)
    assert {r.case_id: r.scores for r in loaded.results} == {
        r.case_id: r.scores for r in report.results
    }
    table = report.table()
    assert list(table.index) == [c.id for c in _cases()]
    assert table.loc["read", "score:contains"] == 1.0
    figure = report.plot()
    assert len(figure.axes) == 2
    # mean per scorer, in name order: contains 4 of 5 scored, exact none, regex all
    assert [p.get_height() for p in figure.axes[0].patches] == pytest.approx([0.8, 0, 1, 0.5])
    figure.savefig(tmp_path / "figure.png")
    assert (tmp_path / "figure.png").stat().st_size > 1000

    # The waiting session is findable and still waits.
    engine = await FlowEngine.start([flow], store=store_path, namespace=namespace)
    try:
        waiting = await engine.client.search_flows('ActiveStepTypes = "AwaitQuestionAnswer"', 10)
        assert [f.flow_id for f in waiting.flows] == [session_id_for("r-1", "nobody")]
        sessions = AgentSessionClient(engine.client, flow)
        snapshot = await sessions.get_agent_snapshot(session_id_for("r-1", "nobody"))
        (question,) = snapshot.pending_interrupts
        # Counted before the answer: the answered session may call its model at
        # once, before the rerun looks at it.
        model_calls = len(InvocationLog(state_dir / "model.log").entries())
        # A person answers; the rerun finishes that case and runs nothing else again.
        assert await sessions.answer_question(
            session_id_for("r-1", "nobody"), question.interrupt_id, "anything"
        )
    finally:
        await engine.shutdown(stop_hosts=False)

    again = await run_eval(
        flow,
        _cases(),
        run_id="r-1",
        concurrency=3,
        scorers=[contains()],
        interrupts=approve_all(),
        out=out,
        store=store_path,
        namespace=namespace,
    )

    assert again.result("nobody").status is CaseStatus.SCORED
    assert again.result("nobody").scores == {"contains": 1.0}
    # Scored cases kept their rows (and scores) from the first run.
    assert again.result("read").scores["exact"] == 0.0
    assert len(InvocationLog(state_dir / "model.log").entries()) == model_calls + 1
    log = InvocationLog(state_dir / "lookup.log")
    assert sorted(log.entries()) == sorted(set(log.entries()))
    assert InvocationLog(state_dir / "refund.log").entries() == ["w1 refund it"]


async def test_a_run_of_200_cases(
    ray_session: None, namespace: str, store_path: Path, state_dir: Path, tmp_path: Path
) -> None:
    cases = [
        EvalCase(id=f"c{i:03}", turns=(f"c{i:03} look",), expected="found") for i in range(200)
    ]

    report = await run_eval(
        eval_flow(str(state_dir)),
        cases,
        run_id="r200",
        concurrency=50,
        scorers=[contains()],
        out=tmp_path / "out",
        store=store_path,
        namespace=namespace,
    )

    assert len(report.results) == 200
    assert all(r.status is CaseStatus.SCORED and r.passed for r in report.results)
    assert report.summary()["counts"]["scored"] == 200
    model = InvocationLog(state_dir / "model.log").entries()
    assert len(model) == 400 and len(set(model)) == 400
    assert len((tmp_path / "out" / "results.jsonl").read_text().splitlines()) == 200


async def test_max_failures_stops_scheduling(
    ray_session: None, namespace: str, store_path: Path, state_dir: Path, tmp_path: Path
) -> None:
    def strict(sample: Any) -> bool:
        if sample.case.metadata.get("bad"):
            raise RuntimeError("cannot score this one")
        return True

    cases = [
        EvalCase(id=f"c{i}", turns=(f"c{i} look",), metadata={"bad": i in (1, 2)}) for i in range(5)
    ]

    report = await run_eval(
        eval_flow(str(state_dir)),
        cases,
        run_id="fails",
        concurrency=1,
        scorers=[strict],
        max_failures=2,
        store=store_path,
        namespace=namespace,
    )

    assert [(r.case_id, r.status) for r in report.results] == [
        ("c0", CaseStatus.SCORED),
        ("c1", CaseStatus.FAILED),
        ("c2", CaseStatus.FAILED),
    ]
    assert report.result("c1").error == ("scorer 'strict': RuntimeError: cannot score this one")
    assert report.stopped == "max_failures (2) reached"
    assert not any(e.startswith("c3") for e in InvocationLog(state_dir / "model.log").entries())
