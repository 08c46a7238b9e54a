"""Runs outlive the driver that started them and are operated from any driver."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import ray
from dex import FlowStatus

from tests.engine.flows_crash import TimerFlow, TimerJob

_ROOT = Path(__file__).resolve().parents[2]


async def _second_driver(namespace: str, store: Path, action: str, flow_id: str) -> str:
    address = ray.get_runtime_context().gcs_address
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.engine.second_driver",
        address,
        namespace,
        str(store),
        action,
        flow_id,
        cwd=_ROOT,
        env={**os.environ, "PYTHONPATH": str(_ROOT)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=180)
    assert process.returncode == 0, err.decode()[-3000:]
    return out.decode().strip().splitlines()[-1]


async def test_run_started_by_an_exited_driver_completes_its_timer(
    engine_factory: Any, namespace: str, store_path: Path
) -> None:
    flow = TimerFlow()
    engine = await engine_factory([flow])

    assert await _second_driver(namespace, store_path, "start", "other-1") == "start:running"

    result = await engine.client.wait_for_flow("other-1", timeout=60)
    assert result.status is FlowStatus.COMPLETED
    assert result.completions[0].decode(dict[str, Any]) == {"timer_fired": True, "woke": []}


async def test_second_driver_operates_a_run_started_here(
    engine_factory: Any, namespace: str, store_path: Path
) -> None:
    flow = TimerFlow()
    engine = await engine_factory([flow])
    await engine.client.start_flow(flow, "mine-1", TimerJob(seconds=3600))

    assert await _second_driver(namespace, store_path, "wake", "mine-1") == "wake:completed"

    result = await engine.client.wait_for_flow("mine-1", timeout=60)
    assert result.completions[0].decode(dict[str, Any]) == {
        "timer_fired": False,
        "woke": ["from-second-driver"],
    }
