"""Killing the node that hosts a run moves it to a surviving node with nothing lost."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]


async def test_run_moves_to_a_surviving_node(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(_ROOT), "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.cluster.failover_driver",
        str(tmp_path / "failover.db"),
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
    assert report["woke"] is True
    assert report["first_node"] != report["second_node"]
    assert report["output"] == {"timer_fired": False, "woke": ["after-failover"]}
    print(
        f"node failover: node declared dead after {report['node_declared_dead_seconds']} s, "
        f"the run answered from another node {report['failover_seconds']} s after the kill"
    )
