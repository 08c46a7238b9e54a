"""A tool that needs a custom resource runs only where it is, and blocks no other tool."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cluster.drivers import run_driver

pytestmark = pytest.mark.serial  # alone after the parallel run: see scripts/test


async def test_custom_resource_calls_run_on_their_node_and_block_no_other_shape(
    tmp_path: Path,
) -> None:
    (tmp_path / "state").mkdir()
    report = await run_driver(
        "tests.cluster.resources_driver", str(tmp_path / "resources.db"), str(tmp_path / "state")
    )
    assert report["special_still_waiting"] is True
    assert [entry.split(":")[0] for entry in report["light"]] == ["0", "1", "2"]
    (special,) = report["special"]
    assert special.split(":")[2] == report["special_node"]
