"""Waits evaluated inside the commit that creates their Step (``engine/run/_fusion.py``):
an effect-free Step whose ``wait_for`` returns without awaiting has it staged in the
creating commit; every other Step, and every evaluation that suspends, raises or
writes to a Stream, gets its ``wait_for`` run by its own task as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from dex import FlowStatus

from dex_agents_ray.engine import StepHistoryEntry
from dex_agents_ray.testing import InvocationLog
from tests.engine.flows_fusion import Fuse, FusionFlow
from tests.engine.polling import wait_for_event

TIMEOUT = 60


def _entry(history: list[StepHistoryEntry], exec_id: str, event: str) -> StepHistoryEntry:
    [entry] = [h for h in history if h.step_execution_id == exec_id and h.event == event]
    return entry


async def _waiting(engine_factory: Any, state_dir: Path, waiter: str) -> tuple[Any, Any, str]:
    flow = FusionFlow()
    engine = await engine_factory([flow])
    flow_id = f"fuse-{waiter}"
    await engine.client.start_flow(flow, flow_id, Fuse(str(state_dir), waiter))
    return engine, flow, flow_id


async def test_a_quick_effect_free_wait_is_staged_in_the_commit_that_creates_its_step(
    engine_factory: Any, state_dir: Path
) -> None:
    engine, flow, flow_id = await _waiting(engine_factory, state_dir, "quick")
    await wait_for_event(engine.client, flow_id, "QuickWaiter-1", "wait_for_completed")

    history = await engine.client.read_step_history(flow_id)
    completed = _entry(history, "Decide-1", "step_completed")
    scheduled = _entry(history, "QuickWaiter-1", "step_scheduled")
    waiting = _entry(history, "QuickWaiter-1", "wait_for_completed")
    # One commit: the entries share its time, each Step with its own entries, in order.
    assert completed.at == scheduled.at == waiting.at
    assert history.index(scheduled) < history.index(waiting)
    assert waiting.detail["waiting"] is True
    # It read the Attribute that same commit writes, and ran once.
    assert InvocationLog(state_dir / "waits.log").entries() == ["QuickWaiter/written-with-quick"]

    assert await engine.client.invoke_rpc(flow.go, flow_id) == "sent"
    result = await engine.client.wait_for_flow(flow_id, timeout=TIMEOUT)
    assert result.status is FlowStatus.COMPLETED
    assert result.completions[0].decode(str) == "written-with-quick"


@pytest.mark.parametrize(
    ("waiter", "logged"),
    [
        # Suspends at its first await: closed there, then run by its task from the start.
        ("suspends", ["SuspendingWaiter/written-with-suspends"]),
        # Writes to a Stream: its evaluation is dropped, and its task writes again.
        ("streams", ["StreamingWaiter/written-with-streams"] * 2),
        ("plain", ["PlainWaiter/written-with-plain"]),
    ],
)
async def test_a_wait_that_cannot_be_staged_at_once_is_evaluated_by_its_own_task(
    engine_factory: Any, state_dir: Path, waiter: str, logged: list[str]
) -> None:
    engine, flow, flow_id = await _waiting(engine_factory, state_dir, waiter)
    exec_id = f"{waiter.capitalize()}Waiter-1".replace("SuspendsWaiter", "SuspendingWaiter")
    exec_id = exec_id.replace("StreamsWaiter", "StreamingWaiter")
    await wait_for_event(engine.client, flow_id, exec_id, "wait_for_completed")

    history = await engine.client.read_step_history(flow_id)
    completed = _entry(history, "Decide-1", "step_completed")
    waiting = _entry(history, exec_id, "wait_for_completed")
    assert waiting.at > completed.at  # a commit of its own
    assert InvocationLog(state_dir / "waits.log").entries() == logged

    assert await engine.client.invoke_rpc(flow.go, flow_id) == "sent"
    result = await engine.client.wait_for_flow(flow_id, timeout=TIMEOUT)
    assert result.status is FlowStatus.COMPLETED
    assert result.completions[0].decode(str) == f"written-with-{waiter}"


async def test_a_wait_that_raises_leaves_the_creating_commit_alone_and_fails_as_its_own(
    engine_factory: Any, state_dir: Path
) -> None:
    """The evaluation inside the commit raised: the commit is the creating Step's
    alone, and the waiter's own attempts (2) fail as they would have."""
    engine, _, flow_id = await _waiting(engine_factory, state_dir, "raises")

    result = await engine.client.wait_for_flow(flow_id, timeout=TIMEOUT)

    assert result.status is FlowStatus.FAILED
    history = await engine.client.read_step_history(flow_id)
    completed = _entry(history, "Decide-1", "step_completed")
    failures = [
        h
        for h in history
        if h.step_execution_id == "RaisingWaiter-1" and h.event == "attempt_failed"
    ]
    assert [f.detail["attempt"] for f in failures] == [1, 2]
    assert all(f.at > completed.at for f in failures)
    assert not [h for h in history if h.event == "wait_for_completed"]
    # Once inside the commit (dropped), then once for each of its attempts.
    assert InvocationLog(state_dir / "waits.log").entries() == ["RaisingWaiter/raised"] * 3
