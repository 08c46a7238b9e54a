"""Running a loopback-cluster driver as its own process and reading its report."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[2]


async def run_driver(module: str, *args: str, timeout: float = 300) -> dict[str, Any]:
    """Run ``python -m module *args`` (its own Ray cluster); returns its last
    ``REPORT`` JSON line, failing with its stderr if it failed or printed none."""
    env = {**os.environ, "PYTHONPATH": str(_ROOT), "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        module,
        *args,
        cwd=_ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=timeout)
    assert process.returncode == 0, err.decode()[-4000:]
    lines = [line for line in out.decode().splitlines() if line.startswith("REPORT ")]
    assert lines, out.decode()[-4000:]
    report: dict[str, Any] = json.loads(lines[-1].removeprefix("REPORT "))
    return report
