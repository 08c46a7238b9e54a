"""The pure builders of a run's commits: outcomes and decisions staged in a ``Tx``.

Each function here reads a transaction (``_state.Tx``) and the records it
holds and stages what a Step's outcome changes: execution records, history
events, Attribute writes, messages, the run's close. None does I/O or awaits;
the driver (``_driver.RunDriver``) takes the commit lock, calls them, and
commits the result. That is why they are tested without asyncio
(``tests/engine/test_transactions.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from dex.dexpb import dex_pb2 as pb

from dex_agents_ray.engine._options import StepAttemptProgress
from dex_agents_ray.engine.run._decisions import apply_decision, finish_if_idle
from dex_agents_ray.engine.run._effect_free import is_effect_free
from dex_agents_ray.engine.run._retry import next_retry_delay
from dex_agents_ray.engine.run._state import Tx
from dex_agents_ray.engine.run._watch import AttemptOutcome
from dex_agents_ray.engine.sdk._invoke import StepResult
from dex_agents_ray.engine.store._records import (
    ExecRecord,
    ExecStatus,
    RecoveryRecord,
    RunStatus,
    evolve,
)

_FAIL_PROCEED = pb.EXECUTE_METHOD_FAILURE_POLICY_PROCEED_TO_CONFIGURED_STEP
_WAIT_FOR_PROCEED = pb.WAIT_FOR_METHOD_FAILURE_POLICY_PROCEED_ON_FAILURE


# -- attempt starts ------------------------------------------------------------------


def stage_start(tx: Tx, exec_id: str, attempt: int, first_attempt_at: float | None) -> None:
    """Stage the start of ``attempt`` of ``exec_id`` in ``tx``."""
    current = tx.current(exec_id)
    tx.update(
        evolve(
            current,
            attempts_started=attempt,
            first_attempt_at=current.first_attempt_at or first_attempt_at or float(int(tx.now)),
            next_attempt_at=None,
        )
    )
    tx.history(exec_id, "attempt_started", {"attempt": attempt})


def marks_at_dispatch(
    record: ExecRecord, attempt: int, options: pb.StepOptions | None = None
) -> bool:
    """Whether a remote attempt's start is recorded when it is dispatched.

    It is unless it is the Step's last attempt: a host that dies before the
    attempt reaches user code then costs one attempt (it counts as started),
    never the last one, which is recorded at its acknowledgement instead (one
    more commit) and is dispatched again after such a crash. For a
    single-attempt Step (a write that must not run twice) the start is always
    exact.
    """
    if options is None:
        options = pb.StepOptions.FromString(record.options)
    maximum = (
        options.execute_retry_policy.maximum_attempts
        if options.HasField("execute_retry_policy")
        else 0
    )
    return maximum == 0 or attempt < maximum


def premark(tx: Tx) -> list[str]:
    """Record the start of attempt 1 of executions that become ready in ``tx``,
    in ``tx`` itself: a Step then costs one commit instead of two. The mark
    is conservative (the spec allows it): if this host dies before the
    handler runs, the attempt counts as started (``NOT_COMPLETED``). A
    remote attempt is marked so only when it is not the Step's last (see
    :func:`marks_at_dispatch`); while this host lives, a remote attempt
    that never acknowledged its start still fails as not started."""
    if tx.run.status is not RunStatus.RUNNING:
        return []
    marked = []
    for record in tx.staged():
        if (
            record.status is ExecStatus.READY
            and record.attempts_started == record.attempts_failed == 0
            and record.next_attempt_at is None
            and (record.remote is None or marks_at_dispatch(record, 1))
        ):
            tx.update(evolve(record, attempts_started=1, first_attempt_at=float(int(tx.now))))
            tx.history(record.exec_id, "attempt_started", {"attempt": 1})
            marked.append(record.exec_id)
    return marked


def may_satisfy_waits(tx: Tx) -> bool:
    """Whether ``tx``'s own changes may satisfy a wait (new messages, or a Step
    that starts waiting) in an open run."""
    if tx.closed or tx.run.status is not RunStatus.RUNNING:
        return False
    return bool(tx.commit.message_appends) or any(
        e.status is ExecStatus.WAITING for e in tx.staged()
    )


# -- wait_for outcomes ---------------------------------------------------------------


def stage_wait_for(tx: Tx, exec_id: str, response: pb.InvokeWaitForMethodResponse) -> None:
    """Stage a ``wait_for`` attempt's response: its writes, and the Step waiting
    (a waiting condition) or ready to execute."""
    current = tx.current(exec_id)
    tx.write_attributes(response.upsert_attributes)
    tx.delete_messages(response.delete_from_channel, strict=False)
    tx.publish(response.publish_to_channel)
    locals_ = dict(current.locals)
    locals_.update({kv.key: kv.value.SerializeToString() for kv in response.upsert_step_exe_locals})
    waiting = response.HasField("waiting_condition")
    tx.update(
        evolve(
            current,
            status=ExecStatus.WAITING if waiting else ExecStatus.READY,
            wait=response.waiting_condition.SerializeToString() if waiting else None,
            wait_started_at=tx.now if waiting else None,
            locals=locals_,
            next_attempt_at=None,
        )
    )
    tx.history(exec_id, "wait_for_completed", {"waiting": waiting, **events(response)})


def stage_wait_for_failed(
    tx: Tx, exec_id: str, options: pb.StepOptions, outcome: AttemptOutcome
) -> None:
    """Stage a failed ``wait_for`` attempt: a retry, the Step ready anyway (its
    policy proceeds on failure), or the run failed."""
    current = tx.current(exec_id)
    failures = current.wait_for_failures + 1
    policy = options.wait_for_retry_policy if options.HasField("wait_for_retry_policy") else None
    first = current.first_attempt_at or current.created_at
    delay = next_retry_delay(policy, failures, first, tx.now, outcome.retry_after)
    detail = {"method": "wait_for", "attempt": failures, "error_type": outcome.error_type}
    tx.history(exec_id, "attempt_failed", {**detail, "error": outcome.detail})
    if delay is not None:
        tx.update(evolve(current, wait_for_failures=failures, next_attempt_at=tx.now + delay))
    elif options.wait_for_failure_policy == _WAIT_FOR_PROCEED:
        tx.update(
            evolve(
                current,
                wait_for_failures=failures,
                status=ExecStatus.READY,
                wait_for_failed=True,
                next_attempt_at=None,
            )
        )
    else:
        tx.update(evolve(current, status=ExecStatus.FAILED, ended_at=tx.now))
        tx.close(RunStatus.FAILED, "worker_api_failed", f"{exec_id}: {outcome.detail}")


# -- execute outcomes ----------------------------------------------------------------


def still_ready(tx: Tx, exec_id: str) -> bool:
    """Whether ``exec_id`` may still complete in ``tx`` (an earlier completion of
    the same batch may have closed the run or cancelled it)."""
    return tx.run.status is RunStatus.RUNNING and tx.current(exec_id).status is ExecStatus.READY


def stage_execute(
    tx: Tx, exec_id: str, result: StepResult, decode: Callable[[pb.Value], Any]
) -> None:
    """Stage a successful ``execute`` attempt: its writes, the Step completed, and
    its decision (``decode`` reads a decision's decoded values)."""
    response = result.execute
    assert response is not None
    current = tx.current(exec_id)
    tx.write_attributes(response.upsert_attributes)
    tx.delete_messages(response.delete_from_channel, strict=False)
    tx.publish(response.publish_to_channel)
    tx.update(evolve(current, status=ExecStatus.COMPLETED, ended_at=tx.now))
    tx.history(exec_id, "step_completed", {"attempt": current.attempts_started, **events(response)})
    apply_decision(tx, current, response.step_decision, result.extras, decode)


def stage_execute_failed(
    tx: Tx,
    exec_id: str,
    attempt: int,
    options: pb.StepOptions,
    outcome: AttemptOutcome,
    *,
    unstarted: int | None = None,
) -> bool:
    """Stage a failed ``execute`` attempt; returns whether it is retried.

    ``unstarted``: it never reached user code, and this is the start count to
    restore (undoing a mark made at dispatch). With no retry left the Step fails
    and :func:`route_failure` says what follows."""
    current = tx.current(exec_id)
    if unstarted is not None and current.attempts_started >= attempt:
        current = evolve(current, attempts_started=unstarted)
    policy = options.execute_retry_policy if options.HasField("execute_retry_policy") else None
    first = current.first_attempt_at or current.created_at
    delay = next_retry_delay(policy, attempt, first, tx.now, outcome.retry_after)
    tx.history(
        exec_id,
        "attempt_failed",
        {
            "method": "execute",
            "attempt": attempt,
            "error_type": outcome.error_type,
            "error": outcome.detail,
            "started": current.attempts_started >= attempt,
        },
    )
    failed = evolve(current, attempts_failed=attempt, last_error=outcome.detail)
    if delay is not None:
        tx.update(evolve(failed, next_attempt_at=tx.now + delay))
        return True
    tx.update(evolve(failed, status=ExecStatus.FAILED, ended_at=tx.now))
    route_failure(tx, failed, options, outcome)
    return False


def route_failure(
    tx: Tx, failed: ExecRecord, options: pb.StepOptions, outcome: AttemptOutcome
) -> None:
    """A Step failed for good: fail the run, or proceed to the Step its failure
    policy names (with the failure as its recovery)."""
    if options.execute_failure_policy != _FAIL_PROCEED:
        tx.history(failed.exec_id, "step_failed", {"error": outcome.detail})
        tx.close(RunStatus.FAILED, "worker_api_failed", f"{failed.exec_id}: {outcome.detail}")
        return
    progress = (
        StepAttemptProgress.NOT_STARTED
        if failed.attempts_started == 0
        else StepAttemptProgress.NOT_COMPLETED
    )
    movement = pb.StepMovement(
        step_type=options.execute_failure_proceed_step_type,
        step_input=pb.Value.FromString(failed.input),
    )
    movement.step_options.CopyFrom(options.execute_failure_proceed_step_options)
    target = tx.create(
        movement,
        None,
        from_exec_id=failed.exec_id,
        recovery=RecoveryRecord(
            detail=outcome.detail, error_type=outcome.error_type, progress=progress.value
        ),
        remote=failed.failure_remote,
    )
    tx.history(
        failed.exec_id,
        "step_failed",
        {"error": outcome.detail, "routed_to": target.exec_id, "progress": progress.value},
    )
    finish_if_idle(tx)


def deferrable(tx: Tx, completed: Iterable[str], steps: Mapping[str, Any]) -> bool:
    """Whether ``tx`` (the completions of the executions ``completed``) may be
    written in the background: every Step that completed ran in this host and is
    effect-free (``steps``: the Flow's registered Steps), the run stays open, and
    every Step it makes ready runs in this host."""
    if tx.closed or not tx.new_execs:
        return False
    for exec_id in completed:
        record = tx.current(exec_id)
        registered = steps.get(record.step_type)
        if record.remote is not None or registered is None:
            return False
        if not is_effect_free(registered.step):
            return False
    return all(record.remote is None for record in tx.new_execs)


def events(response: Any) -> dict[str, Any]:
    """The history detail naming a response's recorded events (none: empty)."""
    if not response.record_events:
        return {}
    return {"events": [kv.key for kv in response.record_events]}
