"""Passivation: runs that only wait leave memory; a client call or a due timer brings them back."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import ray
from dex import FlowStatus

from dex_agents_ray.engine.actors._handles import SCHEDULER_NAME
from dex_agents_ray.testing import FileGate
from tests.engine.flows_crash import SlowWake, TimerFlow, TimerJob
from tests.engine.polling import named_actors, until

IDLE = timedelta(seconds=1)


async def _passivated(engine: Any, namespace: str, host: str | None) -> None:
    async def gone() -> bool:
        count = await engine.store.passivation.passivated_count()
        return count == 1 and (host is None or host not in named_actors(namespace))

    await until(gone, "passivation")


async def test_waiting_run_leaves_its_process_and_a_client_call_brings_it_back(
    engine_factory: Any, namespace: str
) -> None:
    flow = TimerFlow()
    engine = await engine_factory([flow], passivate_after=IDLE, placement="dedicated")
    await engine.client.start_flow(flow, "idle-1", TimerJob(seconds=3600))
    await _passivated(engine, namespace, "dexrun:idle-1")
    assert named_actors(namespace) == [SCHEDULER_NAME]  # no session actor is resident

    assert await engine.client.invoke_rpc(flow.wake, "idle-1", "back") is True
    result = await engine.client.wait_for_flow("idle-1", timeout=60)

    assert result.completions[0].decode(dict[str, Any]) == {"timer_fired": False, "woke": ["back"]}
    assert await engine.store.passivation.passivated_count() == 0


async def test_durable_timer_fires_while_passivated(engine_factory: Any, namespace: str) -> None:
    flow = TimerFlow()
    engine = await engine_factory([flow], passivate_after=IDLE, placement="dedicated")
    await engine.client.start_flow(flow, "idle-2", TimerJob(seconds=5))
    await _passivated(engine, namespace, "dexrun:idle-2")

    async def completed() -> bool:  # read the store only: no client call may wake it
        run = await engine.store.runs.get_run("idle-2")
        return bool(run is not None and run.status.value == "completed")

    await until(completed, "the scheduler's activation")
    scheduler = ray.get_actor(SCHEDULER_NAME, namespace=namespace)

    async def counted() -> bool:  # the new host may finish the run before the call returns
        return bool(await scheduler.woken_runs.remote() >= 1)

    await until(counted, "the scheduler's count of its activation")
    result = await engine.client.wait_for_flow("idle-2", timeout=60)
    assert result.completions[0].decode(dict[str, Any]) == {"timer_fired": True, "woke": []}


async def test_shared_host_drops_idle_runs_but_stays(engine_factory: Any, namespace: str) -> None:
    flow = TimerFlow()
    engine = await engine_factory([flow], passivate_after=IDLE, placement="shared", shared_hosts=1)
    await engine.client.start_flow(flow, "idle-3", TimerJob(seconds=3600))
    await _passivated(engine, namespace, None)
    assert "dexhost:0" in named_actors(namespace)

    assert await engine.client.invoke_rpc(flow.wake, "idle-3", "again") is True
    result = await engine.client.wait_for_flow("idle-3", timeout=60)
    assert result.status is FlowStatus.COMPLETED


async def test_a_run_with_a_client_call_in_progress_stays(
    engine_factory: Any, state_dir: Path
) -> None:
    flow = TimerFlow()
    engine = await engine_factory([flow], passivate_after=IDLE, placement="shared", shared_hosts=1)

    async def passivated() -> list[str]:  # the store only: every run here has a timer
        return list(await engine.store.passivation.due_passivated(time.time() + 10 * 3600))

    async def waiting(flow_id: str) -> bool:
        history = await engine.store.runs.history(flow_id)
        return any(h.exec_id == "AwaitTimer-1" and h.event == "wait_for_completed" for h in history)

    await engine.client.start_flow(flow, "busy", TimerJob(seconds=3600))
    await until(lambda: waiting("busy"), "busy's wait")
    call = asyncio.create_task(
        engine.client.invoke_rpc(flow.slow_wake, "busy", SlowWake(str(state_dir), "late"))
    )
    try:
        await FileGate(state_dir, "slow-wake").wait_until_reached()
        # "idle" is touched after "busy" last was, and comes after it in the host,
        # so when the host lets "idle" go it would have let "busy" go first.
        await engine.client.start_flow(flow, "idle", TimerJob(seconds=3600))

        async def idle_gone() -> bool:
            return "idle" in await passivated()

        await until(idle_gone, "the passivation of the idle run")
        assert await passivated() == ["idle"]
    finally:
        FileGate(state_dir, "slow-wake").release()
    assert await call is True
    result = await engine.client.wait_for_flow("busy", timeout=60)
    assert result.completions[0].decode(dict[str, Any]) == {"timer_fired": False, "woke": ["late"]}
