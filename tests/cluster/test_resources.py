"""A tool that needs a custom resource runs only where it is, and blocks no other tool."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]


async def test_custom_resource_calls_run_on_their_node_and_block_no_other_shape(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "PYTHONPATH": str(_ROOT), "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    (tmp_path / "state").mkdir()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.cluster.resources_driver",
        str(tmp_path / "resources.db"),
        str(tmp_path / "state"),
        cwd=_ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=300)
    assert process.returncode == 0, err.decode()[-4000:]
    lines = [line for line in out.decode().splitlines() if line.startswith("REPORT ")]
    assert lines, out.decode()[-4000:]
    report = json.loads(lines[-1].removeprefix("REPORT "))
    assert report["special_still_waiting"] is True
    assert [entry.split(":")[0] for entry in report["light"]] == ["0", "1", "2"]
    (special,) = report["special"]
    assert special.split(":")[2] == report["special_node"]
