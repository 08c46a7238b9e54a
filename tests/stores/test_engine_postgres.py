"""The engine on PostgreSQL: a fan-out flow, a host killed mid-Step, and a
session's turn end committed just before a host kill."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dex import FlowStatus

from dex_agents_ray.engine import PostgresStoreConfig
from dex_agents_ray.testing import FileGate, InvocationLog, kill_flow_actor
from tests.engine.flows import FanFlow, FanInput
from tests.engine.flows_crash import CrashFlow, Job
from tests.session.test_turn_end_crashes import check_turn_end_survives_a_host_kill


async def test_fan_out_and_collect_on_a_postgresql_uri(
    engine_factory: Any, postgres_dsn: str, state_dir: Path
) -> None:
    flow = FanFlow()
    engine = await engine_factory([flow], store=postgres_dsn)
    assert isinstance(engine.store_config, PostgresStoreConfig)

    await engine.client.start_flow(flow, "fan-1", FanInput(str(state_dir), 3))
    result = await engine.client.wait_for_flow("fan-1", timeout=60)

    assert result.status is FlowStatus.COMPLETED
    assert result.completions[0].decode(list[str]) == ["part-1", "part-2", "part-3"]
    assert await engine.client.invoke_rpc(flow.read, "fan-1") == "part-1,part-2,part-3"


async def test_a_host_killed_mid_step_recovers_from_postgresql(
    engine_factory: Any, postgres_config: PostgresStoreConfig, state_dir: Path
) -> None:
    flow = CrashFlow()
    engine = await engine_factory([flow], store=postgres_config)
    FileGate(state_dir, "work-2").release()
    await engine.client.start_flow(flow, "crash-1", Job(str(state_dir)))
    first_pid = await FileGate(state_dir, "work-1").wait_until_reached()
    assert await kill_flow_actor(engine, "crash-1") == first_pid

    result = await engine.client.wait_for_flow("crash-1", timeout=90)

    assert result.status is FlowStatus.COMPLETED
    # Only the second attempt's writes and publication were committed.
    assert result.completions[0].decode(list[str]) == ["attempt-2"]
    assert await engine.client.invoke_rpc(flow.snapshot, "crash-1") == "attempt-2|finished"
    assert InvocationLog(state_dir / "work.log").entries() == ["Work-1/1", "Work-1/2"]
    history = await engine.client.read_step_history("crash-1")
    failed = [h for h in history if h.step_execution_id == "Work-1" and h.event == "attempt_failed"]
    assert [f.detail["error_type"] for f in failed] == ["HostDiedError"]
    assert failed[0].detail["started"] is True


async def test_a_turn_end_committed_before_a_host_kill_stays_in_the_stream(
    engine_factory: Any, postgres_dsn: str, state_dir: Path
) -> None:
    await check_turn_end_survives_a_host_kill(engine_factory, state_dir, store=postgres_dsn)
