"""The eval driver SIGKILLed (at a gate inside a tool, and at a random moment) and
run again with the same run ID: nothing is lost, no finished model or tool call
runs again (invocation logs), and every case is scored exactly once."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sys
from pathlib import Path

import ray

from dex_agents_ray.testing import FileGate, InvocationLog

_ROOT = Path(__file__).resolve().parents[2]
CASES = 16


def _write_cases(path: Path) -> None:
    lines = []
    for i in range(CASES):
        if i % 4 == 1:
            case = {"id": f"c{i}", "turns": [f"c{i} first look", f"c{i} second look"]}
            case["expected"] = f"found c{i} second look"
        elif i % 4 == 2:
            case = {"id": f"c{i}", "input": f"c{i} refund please", "expected": "refunded"}
        else:
            text = f"c{i} look" + (" GATE" if i == 7 else "")
            case = {"id": f"c{i}", "input": text, "expected": f"found {text}"}
        lines.append(json.dumps(case))
    path.write_text("\n".join(lines) + "\n")


async def _start_driver(
    namespace: str, store: Path, state_dir: Path, cases: Path, out: Path
) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.evals.driver",
        ray.get_runtime_context().gcs_address,
        namespace,
        str(store),
        str(state_dir),
        str(cases),
        str(out),
        "kill-run",
        "4",
        cwd=_ROOT,
        env={**os.environ, "PYTHONPATH": str(_ROOT)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def _finish(process: asyncio.subprocess.Process) -> dict[str, object]:
    out, err = await asyncio.wait_for(process.communicate(), timeout=240)
    assert process.returncode == 0, err.decode()[-4000:]
    lines = [x for x in out.decode().splitlines() if x.startswith("REPORT ")]
    assert lines, out.decode()[-2000:]
    report: dict[str, object] = json.loads(lines[-1].removeprefix("REPORT "))
    return report


def _kill(process: asyncio.subprocess.Process) -> None:
    os.kill(process.pid, signal.SIGKILL)


def _check_nothing_repeated_and_all_scored(state_dir: Path, out: Path) -> None:
    for name in ("model", "lookup", "refund"):
        entries = InvocationLog(state_dir / f"{name}.log").entries()
        repeated = sorted({e for e in entries if entries.count(e) > 1})
        assert not repeated, f"{name} calls ran twice: {repeated}"
    # Every turn's calls ran: 2 model calls per turn, one tool call per turn.
    turns = sum(2 if i % 4 == 1 else 1 for i in range(CASES))
    assert len(InvocationLog(state_dir / "model.log").entries()) == 2 * turns
    assert len(InvocationLog(state_dir / "refund.log").entries()) == CASES // 4
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    ids = [r["case_id"] for r in rows]
    assert sorted(ids) == sorted(f"c{i}" for i in range(CASES)), "each case scored once"
    assert all(r["status"] == "scored" and r["passed"] for r in rows), rows


async def test_driver_killed_at_a_tool_gate_resumes_without_repeating_calls(
    ray_session: None, namespace: str, store_path: Path, state_dir: Path, tmp_path: Path
) -> None:
    cases, out = tmp_path / "cases.jsonl", tmp_path / "out"
    _write_cases(cases)
    gate = FileGate(state_dir, "lookup")
    first = await _start_driver(namespace, store_path, state_dir, cases, out)
    try:
        await gate.wait_until_reached(timeout=120)
        _kill(first)
        await first.wait()
    finally:
        if first.returncode is None:
            _kill(first)
    scored_before = len((out / "results.jsonl").read_text().splitlines())
    assert scored_before < CASES  # the kill came before the run finished
    gate.release()

    report = await _finish(await _start_driver(namespace, store_path, state_dir, cases, out))

    assert report["counts"] == {"scored": CASES, "failed": 0, "needs_person": 0, "cancelled": 0}
    _check_nothing_repeated_and_all_scored(state_dir, out)
    assert InvocationLog(state_dir / "lookup.log").count("c7 look GATE") == 1


async def test_driver_killed_at_a_random_moment_loses_nothing(
    ray_session: None, namespace: str, store_path: Path, state_dir: Path, tmp_path: Path
) -> None:
    cases, out = tmp_path / "cases.jsonl", tmp_path / "out"
    _write_cases(cases)
    FileGate(state_dir, "lookup").release()
    first = await _start_driver(namespace, store_path, state_dir, cases, out)
    try:
        # Some time after the run has begun (its first model call), anywhere in it.
        model_log = InvocationLog(state_dir / "model.log")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 120
        # Another process writes the log: poll the file.
        while not model_log.entries() and loop.time() < deadline and first.returncode is None:  # noqa: ASYNC110
            await asyncio.sleep(0.02)
        delay = random.uniform(0.0, 3.0)
        try:
            await asyncio.wait_for(first.wait(), timeout=delay)
        except TimeoutError:
            _kill(first)
        await first.wait()
    finally:
        if first.returncode is None:
            _kill(first)

    report = await _finish(await _start_driver(namespace, store_path, state_dir, cases, out))

    assert report["counts"] == {"scored": CASES, "failed": 0, "needs_person": 0, "cancelled": 0}
    _check_nothing_repeated_and_all_scored(state_dir, out)
