"""``examples/session_job.py`` submitted to a real Ray head with ``ray job submit``
(the CLI, then the Jobs SDK), a session it left waiting approved by a second driver,
and ``examples/engine_job.py`` (the engine alone) submitted to the same head."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path

from tests.jobs.head import RAY, ROOT, RayHead
from tests.jobs.second_driver import EXCLUDES


async def _run(command: list[str], env: dict[str, str], timeout: float) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        *command,
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        output, _ = await asyncio.wait_for(process.communicate(), timeout)
    except TimeoutError:
        process.kill()
        raise
    assert process.returncode is not None
    return process.returncode, output.decode(errors="replace")


async def test_session_job_through_ray_job_submit(tmp_path: Path, head: RayHead) -> None:
    store = str(tmp_path / "jobs.db")
    namespace = "jobs-test"
    code, output = await _run(
        [
            RAY, "job", "submit", "--address", head.dashboard_url,
            "--working-dir", str(ROOT),
            "--runtime-env-json", json.dumps({"excludes": EXCLUDES}),
            "--", sys.executable, "examples/session_job.py",
            "--sessions", "3", "--leave-waiting", "1",
            "--store", store, "--namespace", namespace,
        ],
        head.env,
        timeout=300,
    )  # fmt: skip
    assert code == 0, output
    assert "succeeded" in output.lower(), output
    assert "job-session-0  done     2      Refund: refunded 300 cents on A1" in output
    assert "job-session-2  waiting  2      approval call-refund (refund_order)" in output
    summary = json.loads(output.split("summary ", 1)[1].splitlines()[0])
    assert summary == {
        "done": ["job-session-0", "job-session-1"],
        "waiting": ["job-session-2"],
        "failed": [],
    }
    assert "Traceback" not in output

    # The engine-only example on the same head: fan-out runs that join.
    code, engine_output = await _run(
        [
            RAY, "job", "submit", "--address", head.dashboard_url,
            "--working-dir", str(ROOT),
            "--runtime-env-json", json.dumps({"excludes": EXCLUDES}),
            "--", sys.executable, "examples/engine_job.py",
            "--store", str(tmp_path / "engine-job.db"), "--count", "2",
        ],
        head.env,
        timeout=300,
    )  # fmt: skip
    assert code == 0, engine_output
    assert "job-squares-0 completed sum of squares 1..3 = 14" in engine_output
    assert "job-squares-1 completed sum of squares 1..4 = 30" in engine_output
    assert "Traceback" not in engine_output

    code, output = await _run(
        [sys.executable, "-m", "tests.jobs.second_driver", head.dashboard_url,
         head.gcs_address, store, namespace],
        head.env,
        timeout=400,
    )  # fmt: skip
    assert code == 0, output
    report = json.loads(output.split("REPORT ", 1)[1].splitlines()[0])
    assert report["sdk_succeeded"] is True, report
    assert re.search(r"sdk-session-0\s+done\s+1\s+Order status: .*shipped", report["sdk_logs"])
    # The session the CLI job left waiting, approved from the second driver.
    assert report["waiting"] == ["job-session-2"]
    assert report["approved"] is True
    assert report["answer"] == "Refund: refunded 300 cents on A1"
