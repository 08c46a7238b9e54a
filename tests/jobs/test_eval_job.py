"""``dex-agents-ray eval`` as a Ray job on PostgreSQL: ``ray job submit``, ``ray job
stop`` mid-run, and the same command submitted again with the same run ID
finishes the rest. Every case is scored once, and the invocation logs show that
no model or tool call ran twice, those in flight at the stop included: they go
on in the sessions' hosts, which outlive the job."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from pathlib import Path

from dex_agents_ray.testing import FileGate, InvocationLog
from tests.jobs.eval_job_agent import STATE_ENV
from tests.jobs.head import RAY, RayHead

DEX = str(Path(sys.executable).with_name("dex-agents-ray"))
RUN_ID = "job-run"
CASES: list[dict[str, object]] = [
    {"id": "c0", "input": "c0 look", "expected": "found c0 look"},
    {"id": "c1", "input": "c1 look", "expected": "found c1 look"},
    {"id": "c2", "input": "c2 look", "expected": "found c2 look"},
    # A write in flight at the stop: approved by the first job, waiting at the gate.
    {"id": "c3", "input": "c3 refund TOOLGATE", "expected": "refunded"},
    # Its first turn's model call in flight at the stop; its second turn still to send.
    {"id": "c4", "turns": ["c4 MODELGATE", "c4 again"], "expected": "found c4 again"},
    *({"id": f"c{i}", "input": f"c{i} look", "expected": f"found c{i} look"} for i in (5, 6)),
    {"id": "c7", "turns": ["c7 first", "c7 second"], "expected": "found c7 second"},
    *({"id": f"c{i}", "input": f"c{i} look", "expected": f"found c{i} look"} for i in (8, 9)),
]
"""Two at a time: ``c0``-``c2`` are scored, then ``c3`` and ``c4`` hold both slots at
their gates, and ``c5``-``c9`` have not started when the job is stopped."""
TURNS = sum(len(case.get("turns", [None])) for case in CASES)  # type: ignore[arg-type]


async def _run(command: list[str], env: dict[str, str], timeout: float) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        *command, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    try:
        output, _ = await asyncio.wait_for(process.communicate(), timeout)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return process.returncode, output.decode(errors="replace")


def _scored(out: Path) -> list[str]:
    """The case IDs of ``results.jsonl``'s rows, in order (a torn last line left out)."""
    path = out / "results.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(line)["case_id"] for line in lines if line.endswith("}")]


async def test_an_eval_job_stopped_and_submitted_again_finishes_the_rest(
    tmp_path: Path, postgres_dsn: str, head: RayHead
) -> None:
    job_dir, state, out = tmp_path / "job", tmp_path / "state", tmp_path / "out"
    job_dir.mkdir()
    shutil.copy(Path(__file__).with_name("eval_job_agent.py"), job_dir)
    (job_dir / "cases.jsonl").write_text("".join(json.dumps(case) + "\n" for case in CASES))
    tool_gate, model_gate = FileGate(state, "tool"), FileGate(state, "model")

    def job(command: str, *args: str) -> list[str]:
        return [RAY, "job", command, "--address", head.dashboard_url, *args]

    # The same command both times: only the submission ID differs.
    eval_job = [
        "--working-dir", str(job_dir),
        "--runtime-env-json", json.dumps({"env_vars": {STATE_ENV: str(state)}}),
        "--", DEX, "eval", "cases.jsonl", "--agent", "eval_job_agent:flow",
        "--run-id", RUN_ID, "--concurrency", "2", "--no-progress",
        "--store", postgres_dsn, "--namespace", "eval-job", "--out", str(out),
    ]  # fmt: skip
    code, output = await _run(
        job("submit", "--submission-id", "eval-1", "--no-wait", *eval_job), head.env, 120
    )
    assert code == 0, output
    # Mid-run: some cases scored, a model call and a tool call in flight.
    await tool_gate.wait_until_reached(timeout=120)
    await model_gate.wait_until_reached(timeout=60)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while len(_scored(out)) < 3:
        assert loop.time() < deadline, _scored(out)
        await asyncio.sleep(0.05)

    code, output = await _run(job("stop", "eval-1"), head.env, 120)  # SIGTERM, then SIGKILL

    assert code == 0, output
    assert "Job 'eval-1' was stopped" in output, output  # STOPPED
    assert sorted(_scored(out)) == ["c0", "c1", "c2"]
    code, logs = await _run(job("logs", "eval-1"), head.env, 120)
    # The driver stopped cleanly: its finished rows written, its run closed.
    assert "dex-agents-ray eval: stopped by SIGTERM" in logs, logs
    assert "Traceback" not in logs, logs

    # The calls in flight finish in the hosts; the new driver goes on from the
    # sessions' state (c4's second turn is its to send).
    tool_gate.release()
    model_gate.release()
    code, output = await _run(job("submit", "--submission-id", "eval-2", *eval_job), head.env, 240)

    assert code == 0, output
    assert "Job 'eval-2' succeeded" in output, output  # SUCCEEDED
    assert '{"scored": 10, "failed": 0, "needs_person": 0, "cancelled": 0}' in output

    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(row["case_id"] for row in rows) == sorted(str(c["id"]) for c in CASES)
    assert all(row["status"] == "scored" and row["passed"] for row in rows), rows
    for name in ("model", "lookup", "refund"):
        entries = InvocationLog(state / f"{name}.log").entries()
        assert len(entries) == len(set(entries)), f"{name} calls ran twice: {entries}"
    # Every turn ran once, whole: two model calls (the tool call, the answer), one tool.
    assert len(InvocationLog(state / "model.log").entries()) == 2 * TURNS
    assert InvocationLog(state / "refund.log").entries() == ["c3 refund TOOLGATE"]
    assert len(InvocationLog(state / "lookup.log").entries()) == TURNS - 1
    assert tool_gate.times_reached() == 1 and model_gate.times_reached() == 1
