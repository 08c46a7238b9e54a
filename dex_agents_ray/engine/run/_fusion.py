"""Waits evaluated inside the commit that creates their Step.

A Step's ``wait_for`` normally runs after the commit that created the Step, in
the Step's own task, and its result is a commit of its own. When the new Step
runs in this host, is marked effect-free (``_effect_free``), and its
``wait_for`` is a coroutine that completes without waiting on anything (it only
reads the run and returns a condition: a session's ``ResumeTurn`` and
``AwaitUserMessage``), the driver runs that ``wait_for`` while it builds the
creating commit, against the run as that commit leaves it, and stages its
result there: one commit instead of two, each Step with its own history entries
(``step_scheduled``, then ``wait_for_completed``).

The creating commit never waits on its successor. A ``wait_for`` that awaits
something, raises, or writes to a Stream is dropped unstaged, and the Step's
task runs it the usual way as its first attempt: a failure there is the
successor's own, and the commit that created it stands as it would have alone.
A crash loses both or neither, as it would lose the creating commit alone; the
successor's evaluation only reads the run, so running it again after a reload
changes nothing.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
from collections.abc import Coroutine
from typing import Any

from dex.dexpb import dex_pb2 as pb

from dex_agents_ray.engine._options import StepAttemptProgress
from dex_agents_ray.engine.run._attempts import FlowDefinition
from dex_agents_ray.engine.run._effect_free import is_effect_free
from dex_agents_ray.engine.run._state import RunState, Tx
from dex_agents_ray.engine.run._transactions import stage_wait_for
from dex_agents_ray.engine.sdk._invoke import AttributeValues, StepResult, invoke_step
from dex_agents_ray.engine.sdk._sdk import InvocationMethod
from dex_agents_ray.engine.store._records import ExecRecord, ExecStatus, RunStatus

__all__ = ["fuse_waits"]


def fuse_waits(tx: Tx, state: RunState, definition: FlowDefinition) -> list[str]:
    """Evaluate, inside ``tx``, the ``wait_for`` of each Step that ``tx`` creates
    and that may be fused (see the module docstring), and stage each result that
    came back at once; the executions whose wait was staged."""
    if tx.closed or tx.run.status is not RunStatus.RUNNING:
        return []
    fused = []
    for record in tx.new_execs:
        options = _fusable_options(record, definition)
        if options is None:
            continue
        result = _evaluate_now(tx, state, definition, record, options)
        if result is not None:
            stage_wait_for(tx, record.exec_id, result)
            fused.append(record.exec_id)
    return fused


def _fusable_options(record: ExecRecord, definition: FlowDefinition) -> pb.StepOptions | None:
    """``record``'s options if its wait may be staged in the creating commit."""
    if record.status is not ExecStatus.WAIT_FOR or record.remote is not None:
        return None
    if record.next_attempt_at is not None:
        return None
    registered = definition.flow.steps.get(record.step_type)
    if registered is None or not is_effect_free(registered.step):
        return None
    if not inspect.iscoroutinefunction(registered.step.wait_for):
        return None  # a sync handler runs in a thread: never twice
    options: pb.StepOptions = pb.StepOptions.FromString(record.options)
    # Channels a wait_for loads and Attribute locks it takes are read and taken
    # by its own task (the run as stored, under the lock table).
    if (
        options.wait_for_lock_attribute_keys
        or options.wait_for_load_channel_names
        or options.wait_for_load_channel_map_instances
    ):
        return None
    return options


def _evaluate_now(
    tx: Tx,
    state: RunState,
    definition: FlowDefinition,
    record: ExecRecord,
    options: pb.StepOptions,
) -> pb.InvokeWaitForMethodResponse | None:
    """``record``'s first ``wait_for`` attempt against the run as ``tx`` leaves it,
    if it completes without awaiting, raising or writing to a Stream."""
    loaded = options.wait_for_load_attribute_map_instances
    frames: list[Any] = []
    coroutine = invoke_step(
        definition.mapper,
        definition.flow,
        InvocationMethod.WAIT_FOR,
        tx.wait_for_request(record, 1),
        attempt_progress=StepAttemptProgress.UNSPECIFIED,
        is_active=lambda: True,
        sink=frames.append,
        attribute_values=AttributeValues(tx.attribute_snapshot(loaded), state.decoded),
    )
    result = _run_without_waiting(coroutine)
    if result is None or result.wait_for is None or frames:
        return None
    return result.wait_for


def _run_without_waiting(coroutine: Coroutine[Any, Any, StepResult]) -> StepResult | None:
    """The coroutine's result if it returns without suspending (in a copy of this
    context, as a task of its own would run); ``None`` if it suspends (it is
    closed there) or raises."""
    context = contextvars.copy_context()
    try:
        context.run(coroutine.send, None)
    except StopIteration as done:
        result: StepResult = done.value
        return result
    except (Exception, asyncio.CancelledError):  # the task's own attempt will say
        return None
    try:
        context.run(coroutine.close)
    except Exception:
        pass  # what a handler does as it is closed is its own; the task runs it again
    return None
