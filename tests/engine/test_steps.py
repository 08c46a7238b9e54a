"""Steps: handler forms, skipped wait_for, timeouts, retries, failure routes, metadata."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from datetime import datetime
from pathlib import Path
from typing import Any

from dex import FlowErrorType, FlowStatus

from dex_agents_ray.engine import StepAttemptProgress
from dex_agents_ray.testing import FileGate, InvocationLog
from tests.engine.flows_steps import (
    CancelFlow,
    FormsFlow,
    GateInput,
    HeartbeatInput,
    HeartbeatTimeoutFlow,
    HeartbeatValueFlow,
    LoopFlow,
    LoopInput,
    RecoveryFlow,
    RetryAfterFlow,
    RetryFlow,
    RetryInput,
    TimeoutFlow,
    WaitForFailureFlow,
)
from tests.engine.polling import details, eventually, wait_for_event

TIMEOUT = 60


async def test_every_handler_form_runs_and_hands_locals_from_wait_for_to_execute(
    engine_factory: Any,
) -> None:
    flow = FormsFlow()
    engine = await engine_factory([flow])
    await engine.client.start_flow(flow, "forms", [])
    result = await engine.client.wait_for_flow("forms", timeout=TIMEOUT)
    assert result.status is FlowStatus.COMPLETED
    assert result.single_output(list[str]) == [
        "SyncForm-1:sync-wait",
        "GeneratorForm-1:generator-wait",
        "AsyncForm-1:async-wait",
        "MixedForm-1:mixed-wait",
        "NoWaitForm-1:None",
    ]


async def test_a_step_without_wait_for_skips_it(engine_factory: Any) -> None:
    flow = FormsFlow()
    engine = await engine_factory([flow])
    await engine.client.start_flow(flow, "skip", [])
    await engine.client.wait_for_flow("skip", timeout=TIMEOUT)
    history = await engine.client.read_step_history("skip")
    assert details(history, "SyncForm-1", "wait_for_completed") == [{"waiting": False}]
    assert details(history, "NoWaitForm-1", "wait_for_completed") == []
    assert len(details(history, "NoWaitForm-1", "step_completed")) == 1


async def test_step_execution_ids_count_per_step_type(engine_factory: Any) -> None:
    flow = LoopFlow()
    engine = await engine_factory([flow])
    await engine.client.start_flow(flow, "loop", LoopInput(2, []))
    result = await engine.client.wait_for_flow("loop", timeout=TIMEOUT)
    assert result.single_output(list[str]) == [
        ">Loop-1",
        "Loop-1>Loop-2",
        "Loop-2>Loop-3",
        "Loop-3>renamed-step-1",
    ]


async def test_execute_method_timeout_fails_the_attempt(
    engine_factory: Any, state_dir: Path
) -> None:
    flow = TimeoutFlow()
    engine = await engine_factory([flow])
    await engine.client.start_flow(flow, "timeout", GateInput(str(state_dir), "never"))
    result = await engine.client.wait_for_flow("timeout", timeout=TIMEOUT)
    assert FileGate(state_dir, "never").times_reached() == 1
    assert result.single_output(int) == 2
    history = await engine.client.read_step_history("timeout")
    [failure] = details(history, "TimesOut-1", "attempt_failed")
    assert failure["error_type"] == "StepTimeoutError"
    assert "1 s timeout" in failure["error"]


async def test_heartbeat_timeout_fails_a_silent_attempt_and_keeps_its_checkpoint(
    engine_factory: Any, state_dir: Path
) -> None:
    flow = HeartbeatTimeoutFlow()
    engine = await engine_factory([flow])
    await engine.client.start_flow(flow, "silent", GateInput(str(state_dir), "never"))
    result = await engine.client.wait_for_flow("silent", timeout=TIMEOUT)
    assert result.single_output(dict[str, Any]) == {"attempt": 2, "checkpoint": "checkpoint-1"}
    history = await engine.client.read_step_history("silent")
    [failure] = details(history, "GoesSilent-1", "attempt_failed")
    assert failure["error_type"] == "StepTimeoutError"
    assert "heartbeat" in failure["error"]


def _stored_heartbeat(store: Path, flow_id: str, exec_id: str) -> str | None:
    """The heartbeat value the store holds for an execution (base64), read from
    the SQLite file."""
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        row = db.execute(
            "SELECT doc FROM executions WHERE flow_id = ? AND exec_id = ?", (flow_id, exec_id)
        ).fetchone()
    value: str | None = json.loads(row[0])["heartbeat"] if row else None
    return value


async def test_a_heartbeat_value_is_written_while_its_attempt_runs(
    engine_factory: Any, state_dir: Path, store_path: Path
) -> None:
    flow = HeartbeatValueFlow()
    engine = await engine_factory([flow])
    gate = FileGate(state_dir, "running")
    await engine.client.start_flow(flow, "beats", HeartbeatInput(str(state_dir), "running"))
    # The attempt waits at the gate: its value becomes durable meanwhile.
    await eventually(
        lambda: asyncio.to_thread(_stored_heartbeat, store_path, "beats", "BeatsAValue-1")
    )
    assert gate.times_reached() == 1
    gate.release()
    result = await engine.client.wait_for_flow("beats", timeout=TIMEOUT)
    assert result.single_output(dict[str, Any]) == {"attempt": 1, "checkpoint": None}


async def test_a_heartbeat_value_of_an_attempt_that_ends_at_once_is_not_written_alone(
    engine_factory: Any, state_dir: Path, store_path: Path
) -> None:
    flow = HeartbeatValueFlow()
    engine = await engine_factory([flow])
    # Completes right after its heartbeat: the value is moot and never written.
    await engine.client.start_flow(flow, "done", HeartbeatInput(str(state_dir), ""))
    result = await engine.client.wait_for_flow("done", timeout=TIMEOUT)
    assert result.single_output(dict[str, Any]) == {"attempt": 1, "checkpoint": None}
    assert _stored_heartbeat(store_path, "done", "BeatsAValue-1") is None
    # Fails right after it: attempt 2 finds the value.
    await engine.client.start_flow(flow, "fails", HeartbeatInput(str(state_dir), "", True))
    result = await engine.client.wait_for_flow("fails", timeout=TIMEOUT)
    assert result.single_output(dict[str, Any]) == {"attempt": 2, "checkpoint": "value-1"}


async def test_retry_policy_retries_with_backoff_and_a_stable_first_attempt_time(
    engine_factory: Any, tmp_path: Path
) -> None:
    flow = RetryFlow()
    engine = await engine_factory([flow])
    log = InvocationLog(tmp_path / "attempts.log")
    await engine.client.start_flow(flow, "retry", RetryInput(str(log.path), succeed_on=3))
    result = await engine.client.wait_for_flow("retry", timeout=TIMEOUT)
    assert result.single_output(int) == 3
    attempts = [entry.split("|") for entry in log.entries()]
    assert [int(a) for a, _ in attempts] == [1, 2, 3]
    assert len({first for _, first in attempts}) == 1
    assert datetime.fromisoformat(attempts[0][1]).tzinfo is not None
    history = await engine.client.read_step_history("retry")
    started = [h.at for h in history if h.event == "attempt_started"]
    assert len(started) == 3
    # backoff_coefficient 1.0 with a 1 s initial interval: attempts are >= 1 s apart.
    assert all((b - a).total_seconds() >= 0.99 for a, b in zip(started, started[1:], strict=False))


async def test_retry_policy_maximum_attempts_fails_the_flow(
    engine_factory: Any, tmp_path: Path
) -> None:
    flow = RetryFlow()
    engine = await engine_factory([flow])
    log = InvocationLog(tmp_path / "attempts.log")
    await engine.client.start_flow(flow, "exhaust", RetryInput(str(log.path), succeed_on=0))
    result = await engine.client.wait_for_flow("exhaust", timeout=TIMEOUT)
    assert result.status is FlowStatus.FAILED
    assert result.error_type is FlowErrorType.WORKER_API_FAILED
    assert result.error_message is not None and "attempt 3 failed" in result.error_message
    assert len(log.entries()) == 3


async def test_retry_after_overrides_the_policy_interval(engine_factory: Any) -> None:
    flow = RetryAfterFlow()
    engine = await engine_factory([flow])
    await engine.client.start_flow(flow, "throttled", "upstream")
    # The policy's own interval is one hour: only retry_after(1, ...) lets this finish.
    result = await engine.client.wait_for_flow("throttled", timeout=TIMEOUT)
    assert result.single_output(int) == 2
    history = await engine.client.read_step_history("throttled")
    [failure] = details(history, "Throttled-1", "attempt_failed")
    assert failure["error_type"] == "ConnectionError"
    assert failure["error"] == "upstream is busy"


async def test_failure_route_hands_the_recovery_error_to_the_target(engine_factory: Any) -> None:
    flow = RecoveryFlow()
    engine = await engine_factory([flow])
    await engine.client.start_flow(flow, "recover", "order-7")
    result = await engine.client.wait_for_flow("recover", timeout=TIMEOUT)
    assert result.status is FlowStatus.COMPLETED
    assert result.single_output(dict[str, Any]) == {
        "input": "order-7",
        "step": "Recover-1",
        "from": "Fragile-1",
        "detail": "cannot handle order-7 (attempt 2)",
        "error_type": "ValueError",
        "progress": StepAttemptProgress.NOT_COMPLETED.value,
        "engine_info": True,
    }
    history = await engine.client.read_step_history("recover")
    assert len(details(history, "Fragile-1", "attempt_failed")) == 2
    [failed] = details(history, "Fragile-1", "step_failed")
    assert failed["routed_to"] == "Recover-1"
    assert failed["progress"] == StepAttemptProgress.NOT_COMPLETED


async def test_a_canceled_step_sees_cancellation_requested(
    engine_factory: Any, tmp_path: Path
) -> None:
    flow = CancelFlow()
    engine = await engine_factory([flow])
    log = InvocationLog(tmp_path / "busy.log")
    await engine.client.start_flow(flow, "cancel", str(log.path))
    await eventually(lambda: _entries(log), lambda e: "started:False" in e)
    assert await engine.client.invoke_rpc(flow.go, "cancel") == "sent"
    result = await engine.client.wait_for_flow("cancel", timeout=TIMEOUT)
    assert result.status is FlowStatus.COMPLETED
    assert [c.decode(str) for c in result.completions] == ["stopped"]
    await wait_for_event(engine.client, "cancel", "Busy-1", "step_canceled")
    assert await eventually(lambda: _entries(log), lambda e: len(e) == 2) == [
        "started:False",
        "stopped:True",
    ]
    # The canceled execution's late result is dropped.
    history = await engine.client.read_step_history("cancel")
    assert details(history, "Busy-1", "step_completed") == []


async def test_wait_for_failure_proceeds_to_execute_when_the_policy_says_so(
    engine_factory: Any,
) -> None:
    flow = WaitForFailureFlow()
    engine = await engine_factory([flow])
    await engine.client.start_flow(flow, "proceed", "proceed")
    result = await engine.client.wait_for_flow("proceed", timeout=TIMEOUT)
    assert result.single_output(dict[str, Any]) == {"wait_for_failed": True, "attempt": 1}
    history = await engine.client.read_step_history("proceed")
    failures = details(history, "ProceedsAfterWaitFor-1", "attempt_failed")
    assert [(f["method"], f["attempt"]) for f in failures] == [("wait_for", 1), ("wait_for", 2)]
    # Both wait_for attempts report the same first attempt time.
    assert len({f["error"].split("first attempt at ")[1] for f in failures}) == 1


async def test_wait_for_failure_fails_the_flow_by_default(engine_factory: Any) -> None:
    flow = WaitForFailureFlow()
    engine = await engine_factory([flow])
    await engine.client.start_flow(flow, "fail", "fail")
    result = await engine.client.wait_for_flow("fail", timeout=TIMEOUT)
    assert result.status is FlowStatus.FAILED
    assert result.error_type is FlowErrorType.WORKER_API_FAILED
    assert result.error_message is not None
    assert "wait_for attempt 1 failed" in result.error_message


async def _entries(log: InvocationLog) -> list[str]:
    return log.entries()
