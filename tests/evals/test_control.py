"""Live control from another process: ``dex-agents-ray eval pause`` holds
scheduling, ``eval status`` reports, ``eval cancel`` stops the run and cancels
the running turn; a driver interrupted mid-run closes its run."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import ray

from dex_agents_ray.evals import (
    CaseStatus,
    EvalCase,
    EvalControl,
    EvalProgress,
    EvalRunStatus,
    RunState,
    eval_run_status,
    run_eval,
)
from dex_agents_ray.testing import FileGate, InvocationLog, wait_until
from tests.evals.agents import eval_flow

_ROOT = Path(__file__).resolve().parents[2]


async def _cli(*args: str) -> dict[str, object]:
    code = "import sys; from dex_agents_ray.cli import main; sys.exit(main(sys.argv[1:]))"
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        code,
        "eval",
        *args,
        cwd=_ROOT,
        env={**os.environ, "PYTHONPATH": str(_ROOT)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode == 0, err.decode()[-3000:]
    status: dict[str, object] = json.loads(out.decode().splitlines()[-1])
    return status


async def _until(
    control: EvalControl, check: Callable[[dict[str, Any]], bool], timeout: float = 60
) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        status = await control.status()
        if check(status):
            return status
        assert loop.time() < deadline, status
        await asyncio.sleep(0.05)


async def test_pause_status_and_cancel_from_another_process(
    ray_session: None, namespace: str, store_path: Path, state_dir: Path, tmp_path: Path
) -> None:
    cases = [
        EvalCase(id="gated", turns=("g look GATE",)),
        EvalCase(id="later", turns=("l look",)),
        EvalCase(id="never", turns=("n look",)),
    ]
    gate = FileGate(state_dir, "lookup")
    run = asyncio.create_task(
        run_eval(
            eval_flow(str(state_dir)),
            cases,
            run_id="ctl",
            concurrency=1,
            out=tmp_path / "out",
            store=store_path,
            namespace=namespace,
        )
    )
    try:
        await gate.wait_until_reached(timeout=120)
        connection = ["--address", ray.get_runtime_context().gcs_address, "--namespace", namespace]

        paused = await _cli("pause", "ctl", *connection)

        assert paused["state"] == "paused"
        gate.release()
        control = EvalControl("ctl", namespace=namespace, create=False)
        status = await _until(control, lambda s: s.get("done") == 1 and s.get("running") == 0)
        assert status["state"] == RunState.PAUSED.value
        assert not any(
            e.startswith("l look") for e in InvocationLog(state_dir / "model.log").entries()
        )

        cancelled = await _cli("cancel", "ctl", *connection)

        assert cancelled["state"] == "cancelled"
        report = await asyncio.wait_for(run, timeout=60)
    finally:
        gate.release()
        if not run.done():
            run.cancel()
    assert [r.case_id for r in report.results] == ["gated"]
    assert report.stopped == "cancelled"
    assert not any(
        e.startswith(("l look", "n look")) for e in InvocationLog(state_dir / "model.log").entries()
    )


async def test_cancel_cancels_the_running_turn(
    ray_session: None, namespace: str, store_path: Path, state_dir: Path, tmp_path: Path
) -> None:
    gate = FileGate(state_dir, "lookup")
    run = asyncio.create_task(
        run_eval(
            eval_flow(str(state_dir)),
            [EvalCase(id="gated", turns=("g look GATE",))],
            run_id="ctl2",
            out=tmp_path / "out",
            store=store_path,
            namespace=namespace,
        )
    )
    try:
        await gate.wait_until_reached(timeout=120)
        await EvalControl("ctl2", namespace=namespace, create=False).set_state(RunState.CANCELLED)
        report = await asyncio.wait_for(run, timeout=60)
    finally:
        gate.release()
        if not run.done():
            run.cancel()
    (row,) = report.results
    assert row.status is CaseStatus.CANCELLED
    assert row.error == "the run was cancelled; turn-1 cancelled"


async def test_every_run_of_a_namespace_shares_one_control_actor(
    ray_session: None, namespace: str
) -> None:
    with pytest.raises(ValueError, match="no eval run 'r1' in namespace"):
        EvalControl("r1", namespace=namespace, create=False)  # no run in the namespace yet

    first = EvalControl("r1", namespace=namespace)
    await first.open(3)
    await first.set_state(RunState.CANCELLED)
    second = EvalControl("r2", namespace=namespace)
    await second.open(5)

    assert await EvalControl("r1", namespace=namespace, create=False).status() == {
        "total": 3,
        "state": "cancelled",
    }
    assert (await second.status())["state"] == "running"
    with pytest.raises(ValueError, match="no eval run 'r3' in namespace"):
        await EvalControl("r3", namespace=namespace, create=False).status()
    # A rerun of an ID starts running again, whatever the last run left.
    rerun = EvalControl("r1", namespace=namespace)
    await rerun.open(4)
    assert await rerun.status() == {"total": 4, "state": "running"}
    ours = [
        a for a in ray.util.list_named_actors(all_namespaces=True) if a["namespace"] == namespace
    ]
    assert ours == [{"name": "dexeval", "namespace": namespace}]  # no process per run


async def test_a_control_actor_that_dies_is_replaced_and_the_run_opened_again(
    ray_session: None, namespace: str
) -> None:
    """The actor goes with its node (a node fault): the driver's handle makes a new
    one under the same name and opens its run there; what the old one held is gone."""
    control = EvalControl("r1", namespace=namespace)
    await control.open(7)
    await control.set_state(RunState.PAUSED)
    ray.kill(ray.get_actor("dexeval", namespace=namespace), no_restart=True)

    def dead() -> bool:  # ``ray.kill`` only asks: the old actor may answer one more call
        return not any(
            a["namespace"] == namespace for a in ray.util.list_named_actors(all_namespaces=True)
        )

    await wait_until("the control actor is dead", dead)
    assert await control.status() == {"total": 7, "state": "running"}
    progress = EvalProgress(
        total=7,
        done=1,
        failed=0,
        needs_person=0,
        running=1,
        steps=2,
        input_tokens=0,
        output_tokens=0,
        elapsed_s=1.0,
        state=RunState.RUNNING,
    )
    await control.publish(progress)
    other = EvalControl("r1", namespace=namespace, create=False)
    assert (await other.status())["done"] == 1


async def test_an_interrupted_driver_writes_its_rows_and_closes_its_run(
    ray_session: None, namespace: str, store_path: Path, state_dir: Path, tmp_path: Path
) -> None:
    cases = [
        EvalCase(id="first", turns=("f look",), expected="found f look"),
        EvalCase(id="gated", turns=("g look GATE",), expected="found g look GATE"),
        EvalCase(id="later", turns=("l look",), expected="found l look"),
    ]
    gate, out = FileGate(state_dir, "lookup"), tmp_path / "out"

    def start() -> asyncio.Task[Any]:
        return asyncio.create_task(
            run_eval(
                eval_flow(str(state_dir)),
                cases,
                run_id="int",
                concurrency=1,
                out=out,
                store=store_path,
                namespace=namespace,
            )
        )

    run = start()
    try:
        await gate.wait_until_reached(timeout=120)
        run.cancel()  # what Ctrl-C, and SIGTERM in ``dex-agents-ray eval``, do
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(run, timeout=60)
    finally:
        if not run.done():
            run.cancel()

    # The finished case's row is written, and the control actor forgot the run:
    # its driver is gone, and the run shows as interrupted, not running.
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [r["case_id"] for r in rows] == ["first"]
    assert json.loads((out / "summary.json").read_text())["counts"]["scored"] == 1
    with pytest.raises(ValueError, match="no eval run 'int' in namespace"):
        await EvalControl("int", namespace=namespace, create=False).status()
    status = eval_run_status(None, rows=len(rows), cases=len(cases), stopped=None)
    assert status is EvalRunStatus.INTERRUPTED

    # The gated turn goes on in its host; the rerun picks it up and runs the rest.
    gate.release()
    report = await asyncio.wait_for(start(), timeout=120)
    assert [(r.case_id, r.status) for r in report.results] == [
        (case.id, CaseStatus.SCORED) for case in cases
    ]
    for name in ("model", "lookup"):
        entries = InvocationLog(state_dir / f"{name}.log").entries()
        assert len(entries) == len(set(entries)), f"{name} calls ran twice: {entries}"
    assert len(InvocationLog(state_dir / "model.log").entries()) == 2 * len(cases)
    assert (await EvalControl("int", namespace=namespace, create=False).status())["done"] == 3
