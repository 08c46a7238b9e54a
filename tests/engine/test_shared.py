"""Shared placement: many runs per long-lived host actor, placed by a stable hash."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import ray
from dex import FlowStatus

from dex_agents_ray.engine import Placement, PlacementMode
from dex_agents_ray.engine._engine import DEFAULT_SHARED_HOSTS
from dex_agents_ray.testing import FileGate, InvocationLog, kill_flow_actor
from tests.engine.flows import FanFlow, FanInput
from tests.engine.flows_crash import CrashFlow, Job


def _hosts(namespace: str) -> list[str]:
    return sorted(
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["namespace"] == namespace and a["name"].startswith(("dexrun:", "dexhost:"))
    )


async def test_many_runs_share_a_fixed_pool_of_hosts(
    engine_factory: Any, namespace: str, state_dir: Path
) -> None:
    flow = FanFlow()
    engine = await engine_factory([flow], placement="shared", shared_hosts=2)
    ids = [f"fan-{i}" for i in range(6)]
    for flow_id in ids:
        await engine.client.start_flow(flow, flow_id, FanInput(str(state_dir), 2))
    for flow_id in ids:
        result = await engine.client.wait_for_flow(flow_id, timeout=60)
        assert result.status is FlowStatus.COMPLETED
    placement = Placement(mode=PlacementMode.SHARED, shared_hosts=2)
    expected = sorted({placement.host_name(flow_id) for flow_id in ids})
    assert _hosts(namespace) == expected
    assert len(expected) == 2  # six runs, two processes


async def test_shared_host_killed_resumes_every_run_it_hosted(
    engine_factory: Any, state_dir: Path
) -> None:
    flow = CrashFlow()
    engine = await engine_factory([flow], placement="shared", shared_hosts=1)
    FileGate(state_dir / "a", "work-2").release()
    FileGate(state_dir / "b", "work-2").release()
    await engine.client.start_flow(flow, "shared-a", Job(str(state_dir / "a")))
    await engine.client.start_flow(flow, "shared-b", Job(str(state_dir / "b")))
    pid_a = await FileGate(state_dir / "a", "work-1").wait_until_reached()
    pid_b = await FileGate(state_dir / "b", "work-1").wait_until_reached()
    assert pid_a == pid_b  # one host process runs both

    await kill_flow_actor(engine, "shared-a")

    for flow_id, sub in (("shared-a", "a"), ("shared-b", "b")):
        result = await engine.client.wait_for_flow(flow_id, timeout=90)
        assert result.completions[0].decode(list[str]) == ["attempt-2"]
        assert InvocationLog(state_dir / sub / "work.log").entries() == ["Work-1/1", "Work-1/2"]


async def test_the_pool_size_follows_the_cluster_then_the_live_pool(
    engine_factory: Any, namespace: str, state_dir: Path
) -> None:
    flow = FanFlow()
    cpus = int(ray.cluster_resources()["CPU"])
    first = await engine_factory([flow])
    assert first.placement.shared_hosts == min(DEFAULT_SHARED_HOSTS, cpus)
    await first.client.start_flow(flow, "pool-1", FanInput(str(state_dir), 1))
    assert (await first.client.wait_for_flow("pool-1", timeout=60)).status is FlowStatus.COMPLETED

    # Another driver of the namespace takes the live pool's size...
    second = await engine_factory([flow])
    assert second.placement.shared_hosts == first.placement.shared_hosts
    # ...and a different one is refused, naming what differs.
    other = first.placement.shared_hosts + 1
    with pytest.raises(ValueError, match=f"shared_hosts={other}: namespace '{namespace}' runs"):
        await engine_factory([flow], shared_hosts=other)
    with pytest.raises(ValueError, match=f"shared_hosts={other}: namespace '{namespace}' runs"):
        await engine_factory([flow], placement=Placement(shared_hosts=other))
