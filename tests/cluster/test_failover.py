"""Killing the node that hosts a run moves it to a surviving node with nothing lost."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cluster.drivers import run_driver

pytestmark = pytest.mark.serial  # alone after the parallel run: see scripts/test


async def test_run_moves_to_a_surviving_node(tmp_path: Path) -> None:
    report = await run_driver("tests.cluster.failover_driver", str(tmp_path / "failover.db"))
    assert report["woke"] is True
    assert report["first_node"] != report["second_node"]
    assert report["output"] == {"timer_fired": False, "woke": ["after-failover"]}
    print(
        f"node failover: node declared dead after {report['node_declared_dead_seconds']} s, "
        f"the run answered from another node {report['failover_seconds']} s after the kill"
    )
