"""A real run written as an Inspect log: cases from an Inspect dataset, run by
``run_eval`` (the scripted eval agent on real Ray and SQLite), written with
``inspect_ai.log``'s writer and read back with ``read_eval_log`` (samples, messages,
scores, usage); then ``inspect view`` serving it on loopback, in headless Chromium,
which takes docs/images/eval-inspect-view.png."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.log import EvalLog, EvalSample, read_eval_log
from inspect_ai.model import ChatMessageAssistant, ChatMessageTool, ChatMessageUser

from dex_agents_ray import AgentSessionClient
from dex_agents_ray.cli import main
from dex_agents_ray.engine import FlowEngine
from dex_agents_ray.evals import (
    CaseResult,
    CaseStatus,
    EvalCase,
    EvalReport,
    Score,
    approve_all,
    contains,
    run_eval,
)
from dex_agents_ray.evals.inspect import (
    build_inspect_log,
    cases_from_inspect,
    read_transcripts,
    write_inspect_log,
)
from dex_agents_ray.session import AgentMessage
from tests.engine.polling import eventually
from tests.evals.agents import eval_flow
from tests.serve.helpers import SCREENSHOTS, chromium, new_page

RUN_ID = "inspect-nightly-1"
MODEL = "dex-agents-ray/EvalAgent"


def _samples() -> MemoryDataset:
    return MemoryDataset(
        [
            Sample(input="where is order 7", target="found", id="order-7", metadata={"suite": "s"}),
            Sample(
                input=[ChatMessageUser(content="look up a"), ChatMessageUser(content="look up b")],
                target=["missing", "found look up b"],
                id="two-turns",
            ),
            Sample(input="refund order 7", target="refunded", id="refund-7"),
            Sample(input="look up z", target="not found", id="wrong-answer"),
            Sample(input="ask about the account", target="savings", id="needs-person"),
            Sample(input="look up d", target="found", id="outage"),
        ]
    )


def graded(sample: Any) -> Score:
    """Shorter answers score higher; the ``outage`` case's grader is down."""
    if sample.case.id == "outage":
        raise RuntimeError("the grader is down")
    return Score(value=min(1.0, 24 / max(1, len(sample.answer))), passed=True, reason="length")


@dataclass
class Finished:
    report: EvalReport
    transcripts: dict[str, tuple[AgentMessage, ...]]
    root: Path


@pytest.fixture(scope="module")
async def finished(
    ray_session: None, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Finished]:
    root = tmp_path_factory.mktemp("inspect-log")
    state = root / "state"
    state.mkdir()
    store, namespace = root / "store" / "engine.db", f"t-{uuid.uuid4().hex[:12]}"
    flow = eval_flow(str(state))
    report = await run_eval(
        flow,
        cases_from_inspect(_samples()),
        run_id=RUN_ID,
        concurrency=4,
        scorers=[contains(), graded],
        interrupts=approve_all(),
        out=root / "evals" / RUN_ID,
        store=store,
        namespace=namespace,
    )
    assert report.result("needs-person").status is CaseStatus.NEEDS_PERSON
    assert report.result("outage").status is CaseStatus.FAILED
    engine = await FlowEngine.start([flow], store=store, namespace=namespace)
    try:
        transcripts = await read_transcripts(AgentSessionClient(engine.client, flow), report)
    finally:
        await engine.shutdown(stop_hosts=True)
    yield Finished(report, transcripts, root)


def _by_id(log: EvalLog) -> dict[str, EvalSample]:
    assert log.samples is not None
    return {str(sample.id): sample for sample in log.samples}


def test_the_log_reads_back_with_samples_messages_scores_and_usage(finished: Finished) -> None:
    path = write_inspect_log(
        finished.report, finished.root / "logs", transcripts=finished.transcripts
    )
    assert path == finished.root / "logs" / f"{RUN_ID}.eval"
    log = read_eval_log(str(path))

    assert log.status == "success"
    assert log.eval.task == RUN_ID and log.eval.run_id == RUN_ID and log.eval.model == MODEL
    assert log.eval.dataset.samples == 6
    samples = _by_id(log)
    assert set(samples) == {
        "order-7",
        "two-turns",
        "refund-7",
        "wrong-answer",
        "needs-person",
        "outage",
    }

    order = samples["order-7"]
    row = finished.report.result("order-7")
    assert order.input == "where is order 7" and order.target == "found"
    assert order.metadata["suite"] == "s"
    assert order.metadata["dex_agents_ray"]["session_id"] == row.session_id
    user, request, result, answer = order.messages
    assert isinstance(user, ChatMessageUser) and user.text == "where is order 7"
    assert isinstance(request, ChatMessageAssistant) and request.tool_calls is not None
    (call,) = request.tool_calls
    assert call.function == "lookup" and call.arguments == {"key": "where is order 7"}
    assert isinstance(result, ChatMessageTool)
    assert result.tool_call_id == call.id and result.text == "found where is order 7"
    assert isinstance(answer, ChatMessageAssistant) and answer.text == row.answer
    assert order.output.completion == row.answer
    assert order.scores is not None and set(order.scores) == {"contains", "graded"}
    assert order.scores["contains"].value == 1.0
    assert order.scores["graded"].value == row.scores["graded"]
    assert order.scores["graded"].explanation == "length"
    usage = order.model_usage[MODEL]
    assert (usage.input_tokens, usage.output_tokens) == (row.input_tokens, row.output_tokens)
    assert usage.total_tokens == row.input_tokens + row.output_tokens == 30
    assert order.total_time == row.latency_s and order.error is None

    two = samples["two-turns"]
    assert [m.text for m in two.input if isinstance(m, ChatMessageUser)] == [
        "look up a",
        "look up b",
    ]
    assert two.target == ["missing", "found look up b"]
    assert two.scores is not None and two.scores["contains"].value == 1.0  # any of the list
    assert [m.role for m in two.messages] == ["user", "assistant", "tool", "assistant"] * 2

    refund = samples["refund-7"]
    assert any(
        c.function == "refund"
        for m in refund.messages
        if isinstance(m, ChatMessageAssistant)
        for c in m.tool_calls or []
    )
    assert samples["wrong-answer"].scores is not None
    assert samples["wrong-answer"].scores["contains"].value == 0.0

    waiting, outage = samples["needs-person"], samples["outage"]
    assert waiting.scores is None and waiting.error is not None
    assert waiting.error.message.startswith("needs_person: ")
    assert outage.error is not None and "the grader is down" in outage.error.message

    assert log.results is not None
    assert log.results.total_samples == 6 and log.results.completed_samples == 4
    means = {s.name: s.metrics["mean"].value for s in log.results.scores}
    assert means["contains"] == pytest.approx(3 / 4)
    assert log.results.scores[0].scored_samples == 4
    total = log.stats.model_usage[MODEL]
    assert total.input_tokens == sum(r.input_tokens for r in finished.report.results)
    assert total.output_tokens == sum(r.output_tokens for r in finished.report.results)


def test_a_run_directory_without_transcripts_as_a_json_log(finished: Finished) -> None:
    assert finished.report.out is not None
    path = write_inspect_log(finished.report.out, finished.root / "json" / "run.json")
    log = read_eval_log(str(path))
    samples = _by_id(log)
    assert len(samples) == 6 and log.eval.model == MODEL
    # Without the transcript: the case's turns, then the last answer.
    two = samples["two-turns"]
    assert [(m.role, m.text) for m in two.messages] == [
        ("user", "look up a"),
        ("user", "look up b"),
        ("assistant", finished.report.result("two-turns").answer),
    ]
    order = samples["order-7"]
    assert order.scores is not None and order.scores["contains"].value == 1.0
    assert order.model_usage[MODEL].total_tokens == 30


def test_a_row_without_its_case_is_refused(finished: Finished, tmp_path: Path) -> None:
    report = EvalReport(run_id=RUN_ID, results=finished.report.results)  # no run directory
    with pytest.raises(ValueError, match="no case for row 'order-7'.*pass cases="):
        write_inspect_log(report, tmp_path)
    assert list(tmp_path.iterdir()) == []


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def inspect_view(finished: Finished) -> Iterator[str]:
    """``inspect view`` serving the run's log on a loopback port; yields its URL."""
    logs = finished.root / "view-logs"
    write_inspect_log(finished.report, logs, transcripts=finished.transcripts)
    port = _free_port()
    command = [str(Path(sys.executable).parent / "inspect"), "view", "--log-dir", str(logs)]
    with (finished.root / "inspect-view.log").open("wb") as output:
        process = subprocess.Popen(
            [*command, "--host", "127.0.0.1", "--port", str(port)],
            stdout=output,
            stderr=subprocess.STDOUT,
        )
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            process.terminate()
            process.wait(timeout=30)


async def _serving(url: str) -> None:
    async with httpx.AsyncClient() as client:

        async def answers() -> bool:
            try:
                return (await client.get(f"{url}/api/logs")).status_code == 200
            except httpx.TransportError:
                return False

        await eventually(answers, timeout=60)


async def test_inspect_view_shows_the_run(finished: Finished, inspect_view: str) -> None:
    await _serving(inspect_view)
    async with chromium() as browser:
        page = await new_page(browser)
        await page.set_viewport_size({"width": 1600, "height": 720})  # every column
        await page.goto(inspect_view)
        # One log in the directory: the viewer opens it at its samples.
        await page.get_by_text("where is order 7").first.wait_for()
        body = await page.locator("body").inner_text()
        assert MODEL in body and RUN_ID in body
        for case_id in ("order-7", "two-turns", "refund-7", "needs-person", "outage"):
            assert case_id in body
        assert "the grader is down" in body and "needs_person" in body
        await page.screenshot(path=str(SCREENSHOTS / "eval-inspect-view.png"))
        # A sample's transcript: the tool call and its result.
        await page.get_by_text("where is order 7").first.click()
        await page.get_by_text("lookup").first.wait_for()
        sample = await page.locator("body").inner_text()
        assert "Sample order-7" in sample and "found where is order 7" in sample
        await page.context.close()


def test_the_eval_command_writes_an_inspect_log_with_transcripts(
    ray_session: None,
    namespace: str,
    store_path: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cases = tmp_path / "samples.jsonl"
    cases.write_text(
        json.dumps({"id": "where", "input": "Where is order A2?", "expected": "shipped"}) + "\n"
    )
    logs = tmp_path / "logs"
    argv = ["eval", str(cases), "--agent", "actors.support:flow", "--run-id", "cli-1"]
    argv += ["--out", str(tmp_path / "out"), "--namespace", namespace, "--store", str(store_path)]
    assert main([*argv, "--no-progress", "--inspect-log", str(logs)]) == 0

    assert f"Inspect log: {logs / 'cli-1.eval'}" in capsys.readouterr().out
    log = read_eval_log(str(logs / "cli-1.eval"))
    assert log.eval.model == "dex-agents-ray/SupportDesk"
    (sample,) = log.samples or []
    assert sample.id == "where" and sample.scores is not None
    assert sample.scores["contains"].value == 1.0
    calls = {
        call.id: call.function
        for message in sample.messages
        if isinstance(message, ChatMessageAssistant)
        for call in message.tool_calls or []
    }
    results = [m for m in sample.messages if isinstance(m, ChatMessageTool)]
    assert calls and results and all(calls[m.tool_call_id or ""] == m.function for m in results)


def test_the_eval_command_refuses_an_inspect_log_without_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = tmp_path / "cases.jsonl"
    cases.write_text(json.dumps({"id": "a", "input": "hi"}) + "\n")
    monkeypatch.delitem(sys.modules, "dex_agents_ray.evals.inspect", raising=False)
    monkeypatch.setitem(sys.modules, "inspect_ai", None)  # as if not installed
    argv = ["eval", str(cases), "--agent", "actors.support:flow", "--run-id", "no-extra"]
    out = tmp_path / "out"
    assert main([*argv, "--out", str(out), "--inspect-log", str(tmp_path / "logs")]) == 2
    assert 'pip install "dex-agents-ray[inspect]"' in capsys.readouterr().err
    assert not out.exists()


def _row(case_id: str, status: CaseStatus, **fields: Any) -> CaseResult:
    return CaseResult(case_id=case_id, session_id=f"eval:r:{case_id}", status=status, **fields)


def test_the_log_status_follows_the_run() -> None:
    cases = [EvalCase(id="a", turns=("hi",)), EvalCase(id="b", turns=("ho",))]
    done = _row("a", CaseStatus.SCORED, scores={"contains": 1.0}, passed=True)

    unfinished = build_inspect_log(EvalReport(run_id="r", results=(done,)), cases=cases)
    assert unfinished.status == "started" and unfinished.error is None
    assert unfinished.results is not None and unfinished.results.total_samples == 2

    both = (done, _row("b", CaseStatus.FAILED, error="boom"))
    assert build_inspect_log(EvalReport(run_id="r", results=both), cases=cases).status == (
        "success"
    )
    stopped = EvalReport(run_id="r", results=both, stopped="max_failures (1) reached")
    log = build_inspect_log(stopped, cases=cases)
    assert log.status == "error" and log.error is not None
    assert log.error.message == "stopped early: max_failures (1) reached"
    cancelled = (done, _row("b", CaseStatus.CANCELLED))
    assert build_inspect_log(EvalReport(run_id="r", results=cancelled), cases=cases).status == (
        "cancelled"
    )


def test_usage_in_inspects_terms_and_a_case_model() -> None:
    case = EvalCase(id="a", turns=("hi",), session_settings={"model": "openai/gpt-5-mini"})
    row = _row(
        "a",
        CaseStatus.SCORED,
        input_tokens=100,
        cached_input_tokens=60,
        output_tokens=30,
        reasoning_tokens=10,
        model_calls=2,
        cost_usd=0.25,
    )
    log = build_inspect_log(EvalReport(run_id="r", results=(row,)), cases=[case])
    (sample,) = log.samples or []
    usage = sample.model_usage["openai/gpt-5-mini"]
    assert (usage.input_tokens, usage.input_tokens_cache_read) == (40, 60)
    assert (usage.output_tokens, usage.reasoning_tokens, usage.total_tokens) == (30, 10, 130)
    assert usage.total_cost == 0.25
    assert log.eval.model == "dex-agents-ray/agent"  # no run.json: the agent is unknown
    assert log.stats.model_usage["openai/gpt-5-mini"].total_tokens == 130
