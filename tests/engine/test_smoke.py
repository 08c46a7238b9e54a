from __future__ import annotations

from pathlib import Path
from typing import Any

from dex import FlowStatus

from tests.engine.flows import FanFlow, FanInput


async def test_fan_out_and_collect(engine_factory: Any, state_dir: Path) -> None:
    flow = FanFlow()
    engine = await engine_factory([flow])
    await engine.client.start_flow(flow, "fan-1", FanInput(str(state_dir), 3))
    result = await engine.client.wait_for_flow("fan-1", timeout=60)
    assert result.status is FlowStatus.COMPLETED
    assert result.completions[0].decode(list[str]) == ["part-1", "part-2", "part-3"]
    assert await engine.client.invoke_rpc(flow.read, "fan-1") == "part-1,part-2,part-3"
