"""Crash cases at exact points: the host is killed while a Step runs, while a
Step waits, while a timer is pending, and a superseded incarnation tries to commit."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import ray
from dex import FlowStatus

from dex_agents_ray.testing import FileGate, InvocationLog, kill_flow_actor
from tests.engine.flows_crash import CrashFlow, Job, TimerFlow, TimerJob


def _events(history: list[Any], exec_id: str, event: str) -> list[Any]:
    return [h for h in history if h.step_execution_id == exec_id and h.event == event]


async def test_host_killed_between_dispatch_and_commit_retries_and_applies_nothing_partial(
    engine_factory: Any, state_dir: Path
) -> None:
    flow = CrashFlow()
    engine = await engine_factory([flow])
    FileGate(state_dir, "work-2").release()
    await engine.client.start_flow(flow, "crash-1", Job(str(state_dir)))
    first_pid = await FileGate(state_dir, "work-1").wait_until_reached()
    killed = await kill_flow_actor(engine, "crash-1")
    assert killed == first_pid  # the Step ran inside the host process

    result = await engine.client.wait_for_flow("crash-1", timeout=90)

    assert result.status is FlowStatus.COMPLETED
    # Only the second attempt's writes and publication were committed.
    assert result.completions[0].decode(list[str]) == ["attempt-2"]
    assert await engine.client.invoke_rpc(flow.snapshot, "crash-1") == "attempt-2|finished"
    log = InvocationLog(state_dir / "work.log")
    assert log.entries() == ["Work-1/1", "Work-1/2"]
    history = await engine.client.read_step_history("crash-1")
    failed = _events(history, "Work-1", "attempt_failed")
    assert [f.detail["error_type"] for f in failed] == ["HostDiedError"]
    assert failed[0].detail["started"] is True


async def test_host_killed_during_single_attempt_routes_not_completed(
    engine_factory: Any, state_dir: Path
) -> None:
    flow = CrashFlow()
    engine = await engine_factory([flow])
    await engine.client.start_flow(flow, "crash-2", Job(str(state_dir), attempts=1))
    await FileGate(state_dir, "work-1").wait_until_reached()
    await kill_flow_actor(engine, "crash-2")

    result = await engine.client.wait_for_flow("crash-2", timeout=90)

    assert result.completions[0].decode(str) == "recovered:not_completed"
    assert InvocationLog(state_dir / "work.log").count("Work-1/1") == 1
    assert await engine.client.invoke_rpc(flow.snapshot, "crash-2") == (
        "None|recovered:not_completed:HostDiedError"
    )


async def test_waiting_step_waits_again_after_host_restart(
    engine_factory: Any, state_dir: Path
) -> None:
    flow = TimerFlow()
    engine = await engine_factory([flow])
    await engine.client.start_flow(flow, "wait-1", TimerJob(seconds=3600))
    await _until_waiting(engine, "wait-1", "AwaitTimer-1")
    await kill_flow_actor(engine, "wait-1")

    assert await engine.client.invoke_rpc(flow.wake, "wait-1", "hello") is True
    result = await engine.client.wait_for_flow("wait-1", timeout=60)

    assert result.completions[0].decode(dict[str, Any]) == {"timer_fired": False, "woke": ["hello"]}


async def test_timer_that_came_due_while_the_host_was_down_fires_on_activation(
    engine_factory: Any, state_dir: Path
) -> None:
    flow = TimerFlow()
    engine = await engine_factory([flow])
    await engine.client.start_flow(flow, "timer-1", TimerJob(seconds=2))
    await _until_waiting(engine, "timer-1", "AwaitTimer-1")
    history = await engine.client.read_step_history("timer-1")
    fire_at = _events(history, "AwaitTimer-1", "wait_for_completed")[0].at.timestamp() + 2
    host = engine.host("timer-1")
    ray.kill(host, no_restart=True)
    engine.forget_host("timer-1")
    # What is tested here is the clock: let it pass the due time while no host exists.
    await asyncio.sleep(max(0.0, fire_at + 0.5 - time.time()))
    info = await engine.client.describe_flow("timer-1")
    assert info.status is FlowStatus.RUNNING

    assert await engine.resume_runs() == 1
    result = await engine.client.wait_for_flow("timer-1", timeout=60)

    assert result.completions[0].decode(dict[str, Any]) == {"timer_fired": True, "woke": []}


async def test_stale_incarnation_cannot_commit(engine_factory: Any, state_dir: Path) -> None:
    flow = CrashFlow()
    engine = await engine_factory([flow])
    FileGate(state_dir, "work-2").release()
    await engine.client.start_flow(flow, "stale-1", Job(str(state_dir)))
    await FileGate(state_dir, "work-1").wait_until_reached()
    host = engine.host("stale-1")
    old_epoch = await host.epoch_of.remote("stale-1")
    new_epoch = await host.take_over.remote("stale-1")
    assert new_epoch == old_epoch + 1

    result = await engine.client.wait_for_flow("stale-1", timeout=60)
    assert result.completions[0].decode(list[str]) == ["attempt-2"]
    assert await host.refused_commits.remote("stale-1") == 0
    FileGate(state_dir, "work-1").release()  # the zombie's attempt now tries to commit

    async def refused() -> bool:
        return bool(await host.refused_commits.remote("stale-1") >= 1)

    await _until(refused)

    assert await engine.client.invoke_rpc(flow.snapshot, "stale-1") == "attempt-2|finished"
    history = await engine.client.read_step_history("stale-1")
    assert len(_events(history, "Work-1", "step_completed")) == 1


async def _until(check: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


async def _until_waiting(engine: Any, flow_id: str, exec_id: str) -> None:
    async def waiting() -> bool:
        history = await engine.client.read_step_history(flow_id)
        return bool(_events(history, exec_id, "wait_for_completed"))

    await _until(waiting)


async def test_store_refuses_a_commit_from_an_old_epoch(tmp_path: Path) -> None:
    from dex_agents_ray.engine import SqliteStoreConfig, StaleEpochError
    from dex_agents_ray.engine.store._records import Commit
    from dex_agents_ray.engine.store._sqlite import SqliteFlowStore

    store = SqliteFlowStore(SqliteStoreConfig(path=str(tmp_path / "s.db")))
    await store.open()
    try:
        first, _ = await store.runs.activate("run-a")
        second, _ = await store.runs.activate("run-a")
        assert second == first + 1
        await store.runs.commit(Commit(flow_id="run-a", epoch=second))
        try:
            await store.runs.commit(Commit(flow_id="run-a", epoch=first))
        except StaleEpochError as error:
            assert error.current == second
        else:
            raise AssertionError("the store accepted a commit from a superseded epoch")
    finally:
        await store.close()
