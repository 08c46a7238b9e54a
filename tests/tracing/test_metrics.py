"""Ray-native metrics of a few session turns, read back from the node's Prometheus
endpoint. The test needs Ray's metrics agent with a short report interval, which
the shared test Ray does not configure, so the turns run in their own Ray in a
subprocess (tests/tracing/metrics_driver.py)."""

from __future__ import annotations

from pathlib import Path

from tests.cluster.drivers import run_driver
from tests.tracing.metrics_driver import EXPECTED


async def test_steps_tools_models_tokens_interrupts_and_sessions_reach_prometheus(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    report = await run_driver(
        "tests.tracing.metrics_driver", str(tmp_path / "engine.db"), str(state), timeout=240
    )
    totals = report["totals"]
    for key, value in EXPECTED.items():
        assert totals.get(key) == value, (key, totals)
    assert totals["model_tokens_total{model=scripted,kind=input}"] > 0
    assert totals["model_tokens_total{model=scripted,kind=output}"] > 0
