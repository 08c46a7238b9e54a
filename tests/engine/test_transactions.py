"""The pure builders of a run's commits (``engine/run/_transactions.py``), called
directly on a ``Tx`` over an in-memory ``RunState``: no asyncio, no Ray, no store."""

from __future__ import annotations

from typing import Any

from dex.dexpb import dex_pb2 as pb

from dex_agents_ray.engine._options import StepAttemptProgress
from dex_agents_ray.engine.run._state import RunState, Tx
from dex_agents_ray.engine.run._transactions import (
    deferrable,
    events,
    marks_at_dispatch,
    may_satisfy_waits,
    premark,
    route_failure,
    stage_execute,
    stage_execute_failed,
    stage_start,
    stage_wait_for,
    stage_wait_for_failed,
    still_ready,
)
from dex_agents_ray.engine.run._watch import AttemptOutcome
from dex_agents_ray.engine.sdk._invoke import StepResult
from dex_agents_ray.engine.store._records import ExecRecord, ExecStatus, RunStatus, evolve
from tests.stores.records import run

NOW = 2000.25
FAILURE = AttemptOutcome(error_type="ValueError", detail="boom")


def _options(**fields: Any) -> pb.StepOptions:
    return pb.StepOptions(**fields)


def _exec(exec_id: str, status: ExecStatus = ExecStatus.READY, **fields: Any) -> ExecRecord:
    fields.setdefault("options", _options().SerializeToString())
    return ExecRecord(
        exec_id=exec_id,
        step_type=exec_id.split("-")[0],
        number=int(exec_id.split("-")[1]),
        input=pb.Value().SerializeToString(),
        from_exec_id="",
        status=status,
        created_at=1000.5,
        **fields,
    )


def _tx(*records: ExecRecord, status: RunStatus = RunStatus.RUNNING, **run_fields: Any) -> Tx:
    state = RunState()
    state.load(run("f-1", status=status, **run_fields), {}, [], records, [])
    return Tx(state, 0, NOW)


def _events_of(tx: Tx) -> list[tuple[str, str]]:
    return [(h.exec_id, h.event) for h in tx.commit.history]


def _retry(**fields: Any) -> pb.RetryPolicy:
    return pb.RetryPolicy(**fields)


# -- attempt starts ------------------------------------------------------------------


def test_stage_start_marks_the_attempt_and_keeps_the_first_start_time() -> None:
    tx = _tx(_exec("Work-1", next_attempt_at=NOW + 5))
    stage_start(tx, "Work-1", 1, None)
    record = tx.current("Work-1")
    assert record.attempts_started == 1
    assert record.first_attempt_at == float(int(NOW))
    assert record.next_attempt_at is None
    assert tx.commit.history[-1].detail == {"attempt": 1}

    tx = _tx(_exec("Work-1", first_attempt_at=1500.0))
    stage_start(tx, "Work-1", 2, 1900.0)
    assert tx.current("Work-1").first_attempt_at == 1500.0
    assert _events_of(tx) == [("Work-1", "attempt_started")]


def test_marks_at_dispatch_except_the_last_attempt() -> None:
    unlimited = _exec("Work-1")
    assert marks_at_dispatch(unlimited, 1)
    assert marks_at_dispatch(unlimited, 50)
    three = _options(execute_retry_policy=_retry(maximum_attempts=3))
    record = _exec("Work-1", options=three.SerializeToString())
    assert marks_at_dispatch(record, 2)
    assert not marks_at_dispatch(record, 3)
    assert not marks_at_dispatch(unlimited, 3, three)  # explicit options win
    single = _exec(
        "Pay-1",
        options=_options(execute_retry_policy=_retry(maximum_attempts=1)).SerializeToString(),
    )
    assert not marks_at_dispatch(single, 1)


def test_premark_records_first_starts_of_ready_executions_in_the_same_tx() -> None:
    last_only = _options(execute_retry_policy=_retry(maximum_attempts=1)).SerializeToString()
    tx = _tx(
        _exec("Local-1"),
        _exec("Remote-1", remote="{}"),
        _exec("Single-1", remote="{}", options=last_only),
        _exec("Later-1", next_attempt_at=NOW + 10),
        _exec("Wait-1", ExecStatus.WAIT_FOR),
    )
    for exec_id in ["Local-1", "Remote-1", "Single-1", "Later-1", "Wait-1"]:
        tx.update(tx.current(exec_id))  # staged, as a commit's new or changed ones are
    assert premark(tx) == ["Local-1", "Remote-1"]
    assert tx.current("Local-1").attempts_started == 1
    assert tx.current("Local-1").first_attempt_at == float(int(NOW))
    assert tx.current("Single-1").attempts_started == 0
    assert _events_of(tx) == [("Local-1", "attempt_started"), ("Remote-1", "attempt_started")]


def test_premark_marks_nothing_in_a_closed_run_or_an_unstaged_execution() -> None:
    tx = _tx(_exec("Work-1"))
    assert premark(tx) == []  # not staged in this tx
    tx.update(tx.current("Work-1"))
    tx.close(RunStatus.FAILED)
    assert premark(tx) == []


def test_may_satisfy_waits_only_for_new_messages_or_new_waits_in_an_open_run() -> None:
    tx = _tx(_exec("Wait-1", ExecStatus.WAIT_FOR))
    assert not may_satisfy_waits(tx)
    tx.update(evolve(tx.current("Wait-1"), status=ExecStatus.WAITING))
    assert may_satisfy_waits(tx)
    tx.close(RunStatus.COMPLETED)
    assert not may_satisfy_waits(tx)
    tx = _tx(_exec("Wait-1", ExecStatus.WAITING))
    tx.publish([pb.ChannelMessage(channel_name="inbox", value=pb.Value())])
    assert may_satisfy_waits(tx)


# -- wait_for outcomes ---------------------------------------------------------------


def test_stage_wait_for_with_a_condition_waits_and_merges_locals() -> None:
    tx = _tx(_exec("Ask-1", ExecStatus.WAIT_FOR, locals={"kept": b"1"}, next_attempt_at=NOW))
    response = pb.InvokeWaitForMethodResponse(
        waiting_condition=pb.WaitingCondition(),
        upsert_step_exe_locals=[pb.KV(key="new", value=pb.Value())],
        record_events=[pb.KV(key="asked")],
    )
    stage_wait_for(tx, "Ask-1", response)
    record = tx.current("Ask-1")
    assert record.status is ExecStatus.WAITING
    assert record.wait == pb.WaitingCondition().SerializeToString()
    assert record.wait_started_at == NOW
    assert record.locals == {"kept": b"1", "new": pb.Value().SerializeToString()}
    assert record.next_attempt_at is None
    assert tx.commit.history[-1].event == "wait_for_completed"
    assert tx.commit.history[-1].detail == {"waiting": True, "events": ["asked"]}


def test_stage_wait_for_without_a_condition_makes_the_step_ready() -> None:
    tx = _tx(_exec("Ask-1", ExecStatus.WAIT_FOR))
    stage_wait_for(tx, "Ask-1", pb.InvokeWaitForMethodResponse())
    record = tx.current("Ask-1")
    assert (record.status, record.wait, record.wait_started_at) == (ExecStatus.READY, None, None)
    assert tx.commit.history[-1].detail == {"waiting": False}


def test_stage_wait_for_failed_retries_then_proceeds_or_fails_the_run() -> None:
    retry = _options(wait_for_retry_policy=_retry(initial_interval_seconds=3, maximum_attempts=2))
    tx = _tx(_exec("Ask-1", ExecStatus.WAIT_FOR, first_attempt_at=NOW))
    stage_wait_for_failed(tx, "Ask-1", retry, FAILURE)
    record = tx.current("Ask-1")
    assert (record.wait_for_failures, record.next_attempt_at) == (1, NOW + 3)
    assert tx.commit.history[-1].detail == {
        "method": "wait_for",
        "attempt": 1,
        "error_type": "ValueError",
        "error": "boom",
    }
    assert not tx.closed

    proceed = _options(
        wait_for_retry_policy=_retry(maximum_attempts=1),
        wait_for_failure_policy=pb.WAIT_FOR_METHOD_FAILURE_POLICY_PROCEED_ON_FAILURE,
    )
    tx = _tx(_exec("Ask-1", ExecStatus.WAIT_FOR))
    stage_wait_for_failed(tx, "Ask-1", proceed, FAILURE)
    record = tx.current("Ask-1")
    assert (record.status, record.wait_for_failed) == (ExecStatus.READY, True)
    assert not tx.closed

    tx = _tx(_exec("Ask-1", ExecStatus.WAIT_FOR))
    stage_wait_for_failed(
        tx, "Ask-1", _options(wait_for_retry_policy=_retry(maximum_attempts=1)), FAILURE
    )
    assert tx.current("Ask-1").status is ExecStatus.FAILED
    assert tx.closed and tx.run.status is RunStatus.FAILED
    assert (tx.run.error_type, tx.run.error_message) == ("worker_api_failed", "Ask-1: boom")


# -- execute outcomes ----------------------------------------------------------------


def test_still_ready_needs_an_open_run_and_a_ready_execution() -> None:
    tx = _tx(_exec("Work-1"), _exec("Other-1", ExecStatus.WAITING))
    assert still_ready(tx, "Work-1")
    assert not still_ready(tx, "Other-1")
    tx.close(RunStatus.COMPLETED)
    assert not still_ready(tx, "Work-1")


def test_stage_execute_completes_the_step_and_applies_its_decision() -> None:
    tx = _tx(_exec("Work-1", attempts_started=2))
    decision = pb.StepDecision(
        next_steps=[pb.StepMovement(step_type="Next", step_input=pb.Value())]
    )
    response = pb.InvokeExecuteMethodResponse(step_decision=decision)
    stage_execute(tx, "Work-1", StepResult(execute=response), lambda value: value)
    assert tx.current("Work-1").status is ExecStatus.COMPLETED
    assert tx.current("Work-1").ended_at == NOW
    assert [r.exec_id for r in tx.new_execs] == ["Next-1"]
    assert _events_of(tx) == [("Work-1", "step_completed"), ("Next-1", "step_scheduled")]
    assert tx.commit.history[0].detail == {"attempt": 2}


def test_stage_execute_decodes_a_failing_decisions_reason() -> None:
    tx = _tx(_exec("Work-1"))
    close = pb.CloseDecision(
        close_decision_type=pb.CloseDecisionType.CLOSE_DECISION_TYPE_FORCE_FAIL,
        close_input=pb.Value(),
    )
    response = pb.InvokeExecuteMethodResponse(step_decision=pb.StepDecision(close_decision=close))
    seen: list[pb.Value] = []

    def decode(value: pb.Value) -> str:
        seen.append(value)
        return "no"

    stage_execute(tx, "Work-1", StepResult(execute=response), decode)
    assert len(seen) == 1
    assert tx.closed and (tx.run.status, tx.run.error_message) == (RunStatus.FAILED, "no")


def test_stage_execute_failed_retries_with_its_policys_delay() -> None:
    options = _options(execute_retry_policy=_retry(initial_interval_seconds=2, maximum_attempts=3))
    tx = _tx(_exec("Work-1", attempts_started=1, first_attempt_at=NOW))
    assert stage_execute_failed(tx, "Work-1", 1, options, FAILURE)
    record = tx.current("Work-1")
    assert (record.attempts_failed, record.last_error, record.next_attempt_at) == (
        1,
        "boom",
        NOW + 2,
    )
    assert record.status is ExecStatus.READY
    assert tx.commit.history[-1].detail == {
        "method": "execute",
        "attempt": 1,
        "error_type": "ValueError",
        "error": "boom",
        "started": True,
    }


def test_stage_execute_failed_undoes_a_start_marked_at_dispatch() -> None:
    options = _options(execute_retry_policy=_retry(maximum_attempts=3))
    tx = _tx(_exec("Work-1", attempts_started=1, first_attempt_at=NOW))
    assert stage_execute_failed(tx, "Work-1", 1, options, FAILURE, unstarted=0)
    assert tx.current("Work-1").attempts_started == 0
    assert tx.commit.history[-1].detail["started"] is False


def test_stage_execute_failed_with_no_retry_left_fails_the_run() -> None:
    options = _options(execute_retry_policy=_retry(maximum_attempts=1))
    tx = _tx(_exec("Work-1", attempts_started=1))
    assert not stage_execute_failed(tx, "Work-1", 1, options, FAILURE)
    assert tx.current("Work-1").status is ExecStatus.FAILED
    assert tx.closed and tx.run.status is RunStatus.FAILED
    assert _events_of(tx) == [
        ("Work-1", "attempt_failed"),
        ("Work-1", "step_failed"),
        ("", "flow_closed"),
    ]


def test_route_failure_proceeds_to_the_configured_step_with_a_recovery() -> None:
    options = _options(
        execute_failure_policy=pb.EXECUTE_METHOD_FAILURE_POLICY_PROCEED_TO_CONFIGURED_STEP,
        execute_failure_proceed_step_type="Recover",
    )
    tx = _tx(_exec("Work-1"))
    failed = evolve(tx.current("Work-1"), status=ExecStatus.FAILED, attempts_failed=1)
    tx.update(failed)
    route_failure(tx, failed, options, FAILURE)
    (target,) = tx.new_execs
    assert target.exec_id == "Recover-1" and target.from_exec_id == "Work-1"
    assert target.recovery is not None
    assert (target.recovery.detail, target.recovery.error_type) == ("boom", "ValueError")
    assert target.recovery.progress == StepAttemptProgress.NOT_STARTED.value
    assert tx.commit.history[-1].detail == {
        "error": "boom",
        "routed_to": "Recover-1",
        "progress": StepAttemptProgress.NOT_STARTED.value,
    }
    assert not tx.closed


def test_deferrable_only_for_in_host_effect_free_steps_that_start_in_host_steps() -> None:
    tx = _tx(_exec("Work-1"))
    assert not deferrable(tx, ["Work-1"], {})  # nothing new starts
    tx.create(pb.StepMovement(step_type="Next", step_input=pb.Value()), None, from_exec_id="Work-1")
    assert not deferrable(tx, ["Work-1"], {})  # an unknown Step type
    tx = _tx(_exec("Work-1", remote="{}"))
    tx.create(pb.StepMovement(step_type="Next", step_input=pb.Value()), None, from_exec_id="Work-1")
    assert not deferrable(tx, ["Work-1"], {"Work": object()})  # it ran remotely


def test_events_names_a_responses_recorded_events() -> None:
    assert events(pb.InvokeExecuteMethodResponse()) == {}
    response = pb.InvokeExecuteMethodResponse(record_events=[pb.KV(key="a"), pb.KV(key="b")])
    assert events(response) == {"events": ["a", "b"]}
