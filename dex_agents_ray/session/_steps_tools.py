"""The tool call Steps: each takes the tool call ID and loads only its own record.

``CallTool`` runs ``read`` and ``idempotent_write`` calls (3 attempts, failure
route ``RecordToolFailure``); ``CallSingleAttemptTool`` runs the others (1
attempt, failure route ``RecordToolOutcomeUnknown``); ``PollToolTask`` polls a
task a tool started; ``CancelToolTask`` abandons one. They run on Ray (pooled
executors, or a Ray task per attempt) unless the call runs inline; placement
never changes attempts or effects.
"""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import timedelta
from typing import Any

import dex
from dex import AsyncContext, Context, Step, StepDecision, StepOptions, Timer, Wait

from dex_agents_ray.engine import StepAttemptProgress
from dex_agents_ray.media import validate_image_references
from dex_agents_ray.session._api import AgentEventType
from dex_agents_ray.session._config import Heartbeats, SessionConfig, previous_checkpoint
from dex_agents_ray.session._control import cancelled, control_reason
from dex_agents_ray.session._movements import (
    cancel_task_movement,
    poll_movement,
    question_movement,
)
from dex_agents_ray.session._policy import (
    MISSING_TOOL_TASK_POLLER,
    TOOL_CALL_NOT_RUN_ERROR_PREFIX,
    ToolEffect,
    ToolExecutionError,
    ToolOutcomeUnknownError,
)
from dex_agents_ray.session._records import (
    finish_record,
    load_record,
    question_interrupt_id,
    sync_options,
)
from dex_agents_ray.session._runner import (
    DeferredToolExecution,
    ToolExecutionResult,
    ToolInputRequested,
    ToolTaskCancellation,
    ToolTaskCanceller,
    ToolTaskPending,
    ToolTaskPoll,
    ToolTaskPoller,
    ToolTaskStarted,
    implements,
    outcome_unknown_fields,
)
from dex_agents_ray.session._schema import AGENT_TOOL_CALLS
from dex_agents_ray.session._step_table import session_step
from dex_agents_ray.session._values import (
    AgentToolCall,
    AgentToolCallStatus,
    CancellationReason,
)
from dex_agents_ray.session.tracing._decorators import tool_step

__all__ = [
    "CallSingleAttemptTool",
    "CallTool",
    "CancelToolTask",
    "PollToolTask",
    "RecordToolFailure",
    "RecordToolOutcomeUnknown",
    "idempotency_key",
]

MAX_POLL_INTERVAL_SECONDS = 86_400
"""Polls are at most a day apart."""


def idempotency_key(flow_id: str, record: AgentToolCall) -> str:
    """``<flow_id>/<turn_id>/<tool_call_id>``, the same on every attempt."""
    return f"{flow_id}/{record.turn_id}/{record.tool_call_id}"


def poll_seconds(value: float) -> int:
    """An interval rounded up to whole seconds from 1 to a day."""
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise TypeError(f"poll_interval_seconds must be a number, not {value!r}")
    if math.isinf(value):
        return MAX_POLL_INTERVAL_SECONDS
    return min(max(math.ceil(value), 1), MAX_POLL_INTERVAL_SECONDS)


def _effect_failure(record: AgentToolCall) -> AgentToolCallStatus:
    """``failed`` for a read; ``outcome_unknown`` for a write, which may have happened."""
    return (
        AgentToolCallStatus.FAILED
        if record.effect is ToolEffect.READ
        else AgentToolCallStatus.OUTCOME_UNKNOWN
    )


def _finish_result(
    context: Context, config: SessionConfig, record: AgentToolCall, result: ToolExecutionResult
) -> None:
    if not isinstance(result.output, str):
        raise TypeError("ToolExecutionResult.output must be a str")
    images = tuple(result.images)
    validate_image_references(images)
    cut = result.truncated_output_bytes
    if cut is not None and (isinstance(cut, bool) or not isinstance(cut, int) or cut < 0):
        raise TypeError("ToolExecutionResult.truncated_output_bytes must be an int or None")
    finish_record(
        context,
        config,
        record,
        AgentToolCallStatus.SUCCEEDED,
        output=result.output,
        images=images,
        truncated_output_bytes=cut,
    )


def _ask(context: Context, record: AgentToolCall, request: ToolInputRequested) -> StepDecision:
    """Store a tool's question on its record and move to ``AwaitQuestionAnswer``."""
    if not isinstance(request.question, str) or not request.question.strip():
        raise ValueError("ToolInputRequested.question must be a non-empty string")
    choices = tuple(request.choices)
    asking = replace(
        record,
        status=AgentToolCallStatus.AWAITING_ANSWER,
        question=request.question,
        choices=choices,
        allows_free_text=bool(request.allows_free_text) or not choices,
        question_raised=False,
        input_request_count=record.input_request_count + 1,
        input_continuation=request.continuation,
        task_answer_pending=False,
    )
    AGENT_TOOL_CALLS.set(context, record.tool_call_id, asking)
    raises = question_interrupt_id(asking)
    return dex.go_to_many(question_movement(record.tool_call_id, raises))


def _started_before(context: Context) -> bool:
    """Whether an earlier attempt of this Step wrote ``tool_call_started``: every
    attempt heartbeats with a value right after it (``marks_start``), and the
    store keeps the last value for the next attempt, even after its host died."""
    return context.has_last_heartbeat_value()


async def _run_tool(step: _ToolStep, context: AsyncContext, tool_call_id: str) -> StepDecision:
    config = step.config
    record = load_record(context, tool_call_id)
    if record.is_final or record.status is not AgentToolCallStatus.APPROVED:
        return dex.dead_end()
    # A tool that has started runs to the end: a retry after a started attempt
    # runs however the turn was steered or cancelled since.
    reason = None if _started_before(context) else control_reason(context, record.turn_id)
    if reason is not None:
        # Steered or cancelled before it started: it never runs.
        finish_record(
            context, config, record, AgentToolCallStatus.REJECTED, cancellation_reason=reason
        )
        return dex.dead_end()
    config.emit(
        context,
        AgentEventType.TOOL_CALL_STARTED,
        {"tool_call_id": record.tool_call_id, "tool_name": record.tool_name},
        turn_id=record.turn_id,
    )
    beats = Heartbeats(context, previous_checkpoint(context), marks_start=True)
    await beats.beat()
    runner = config.runner
    writer = config.event_writer(context, record.turn_id)
    call = DeferredToolExecution(
        flow_id=context.flow_id,
        tool_call=record,
        idempotency_key=idempotency_key(context.flow_id, record),
        attempt=context.attempt,
        events=writer,
        heartbeat=beats.beat,
        heartbeat_checkpoint=beats.checkpoint,
        save_heartbeat_checkpoint=beats.save,
        input_answers=record.input_answers,
        context=context,
        supports_tool_tasks=implements(runner, ToolTaskPoller),
    )
    try:
        async with beats.running():
            outcome: Any = await runner.execute_deferred_tool_call(call)
    except ToolExecutionError as error:
        finish_record(context, config, record, AgentToolCallStatus.FAILED, error=error.message)
        return dex.dead_end()
    except ToolOutcomeUnknownError as error:
        finish_record(
            context,
            config,
            record,
            AgentToolCallStatus.OUTCOME_UNKNOWN,
            **outcome_unknown_fields(error),
        )
        return dex.dead_end()
    finally:
        writer.close()
    if isinstance(outcome, ToolExecutionResult):
        _finish_result(context, config, record, outcome)
        return dex.dead_end()
    if isinstance(outcome, ToolInputRequested):
        return _ask(context, record, outcome)
    if isinstance(outcome, ToolTaskStarted):
        return _start_task(context, config, record, outcome)
    raise TypeError(
        f"execute_deferred_tool_call returned {type(outcome).__name__}; expected "
        "ToolExecutionResult, ToolInputRequested or ToolTaskStarted"
    )


def _start_task(
    context: Context, config: SessionConfig, record: AgentToolCall, started: ToolTaskStarted
) -> StepDecision:
    if not isinstance(config.runner, ToolTaskPoller):
        finish_record(
            context, config, record, _effect_failure(record), error=MISSING_TOOL_TASK_POLLER
        )
        return dex.dead_end()
    if not isinstance(started.task_id, str) or not started.task_id:
        raise ValueError("ToolTaskStarted.task_id must be a non-empty string")
    waiting = replace(
        record,
        status=AgentToolCallStatus.WAITING_FOR_TASK,
        task_id=started.task_id,
        task_poll_interval_seconds=poll_seconds(started.poll_interval_seconds),
        task_answer_pending=False,
    )
    AGENT_TOOL_CALLS.set(context, record.tool_call_id, waiting)
    config.emit(
        context,
        AgentEventType.TOOL_TASK_STARTED,
        {
            "tool_call_id": record.tool_call_id,
            "tool_name": record.tool_name,
            "task_id": started.task_id,
        },
        turn_id=record.turn_id,
    )
    if cancelled(context, record.turn_id):
        # cancel_turn came while the tool ran: the task is abandoned at once.
        return dex.go_to_many(cancel_task_movement(record.tool_call_id))
    return dex.go_to_many(poll_movement(config, waiting))


class _ToolStep(Step[str]):
    """Shared by the tool call Steps: holds the session configuration."""

    def __init__(self, config: SessionConfig) -> None:
        self.config = config

    def get_step_options(self) -> StepOptions | None:
        return sync_options()


@session_step
class CallTool(_ToolStep):
    """Runs one ``read`` or ``idempotent_write`` call: 3 attempts, then ``RecordToolFailure``."""

    @tool_step
    async def execute(self, context: AsyncContext, input: str) -> StepDecision:  # type: ignore[override]
        return await _run_tool(self, context, input)


@session_step
class CallSingleAttemptTool(_ToolStep):
    """Runs one ``non_idempotent_write`` or ``unclassified`` call: 1 attempt, then
    ``RecordToolOutcomeUnknown``."""

    @tool_step
    async def execute(self, context: AsyncContext, input: str) -> StepDecision:  # type: ignore[override]
        return await _run_tool(self, context, input)


@session_step
class PollToolTask(_ToolStep):
    """Waits for the poll interval (or at once after an answer), then polls the task once."""

    async def wait_for(self, context: AsyncContext, input: str) -> Wait:  # type: ignore[override]
        record = load_record(context, input)
        if record.status is not AgentToolCallStatus.WAITING_FOR_TASK:
            return Wait.skip_immediately()
        seconds = 0 if record.task_answer_pending else (record.task_poll_interval_seconds or 1)
        return Wait.until(Timer.by_duration(timedelta(seconds=seconds)))

    @tool_step
    async def execute(self, context: AsyncContext, input: str) -> StepDecision:  # type: ignore[override]
        config = self.config
        record = load_record(context, input)
        if record.status is not AgentToolCallStatus.WAITING_FOR_TASK:
            return dex.dead_end()
        runner = config.runner
        if not isinstance(runner, ToolTaskPoller):
            finish_record(
                context, config, record, _effect_failure(record), error=MISSING_TOOL_TASK_POLLER
            )
            return dex.dead_end()
        beats = Heartbeats(context, previous_checkpoint(context))
        writer = config.event_writer(context, record.turn_id)
        pending = record.input_answers[-1] if record.task_answer_pending else None
        poll = ToolTaskPoll(
            flow_id=context.flow_id,
            tool_call=record,
            idempotency_key=idempotency_key(context.flow_id, record),
            attempt=context.attempt,
            events=writer,
            heartbeat=beats.beat,
            pending_answer=pending,
            context=context,
        )
        try:
            async with beats.running():
                outcome: Any = await runner.poll_tool_task(poll)
        except ToolExecutionError as error:
            finish_record(context, config, record, AgentToolCallStatus.FAILED, error=error.message)
            return dex.dead_end()
        except ToolOutcomeUnknownError as error:
            finish_record(
                context,
                config,
                record,
                AgentToolCallStatus.OUTCOME_UNKNOWN,
                **outcome_unknown_fields(error),
            )
            return dex.dead_end()
        finally:
            writer.close()
        return self._apply(context, record, outcome)

    def _apply(self, context: Context, record: AgentToolCall, outcome: object) -> StepDecision:
        config = self.config
        if isinstance(outcome, ToolExecutionResult):
            _finish_result(context, config, record, outcome)
            return dex.dead_end()
        if isinstance(outcome, ToolTaskPending):
            waiting = replace(
                record,
                task_poll_interval_seconds=poll_seconds(outcome.poll_interval_seconds),
                input_continuation=outcome.continuation,
                task_answer_pending=False,
            )
            AGENT_TOOL_CALLS.set(context, record.tool_call_id, waiting)
            return dex.go_to_many(poll_movement(config, waiting))
        if isinstance(outcome, ToolInputRequested):
            return _ask(context, record, outcome)
        raise TypeError(
            f"poll_tool_task returned {type(outcome).__name__}; expected ToolExecutionResult, "
            "ToolTaskPending or ToolInputRequested"
        )


def _never_ran(context: Context, record: AgentToolCall) -> bool:
    """Whether no attempt of the failed Step reached the tool, and the call never ran before."""
    error = context.recovery_error
    progress = getattr(error, "attempt_progress", None)
    return (
        progress == StepAttemptProgress.NOT_STARTED
        and record.input_request_count == 0
        and record.task_id is None
    )


def _recovery_detail(context: Context) -> str:
    error = context.recovery_error
    if error is None:
        return "the tool Step failed"
    return error.detail or error.error_type or "the tool Step failed"


def _record_failure(
    context: Context, config: SessionConfig, tool_call_id: str, *, by_effect: bool
) -> StepDecision:
    record = load_record(context, tool_call_id)
    if record.is_final:
        return dex.dead_end()
    detail = _recovery_detail(context)
    if _never_ran(context, record):
        status = AgentToolCallStatus.FAILED
        detail = f"{TOOL_CALL_NOT_RUN_ERROR_PREFIX}: {detail}"
    elif by_effect:
        status = _effect_failure(record)
    else:
        status = AgentToolCallStatus.OUTCOME_UNKNOWN
    finish_record(context, config, record, status, error=detail)
    return dex.dead_end()


@session_step
class RecordToolFailure(_ToolStep):
    """Failure route of ``CallTool`` (and of a read's ``PollToolTask``)."""

    async def execute(self, context: AsyncContext, input: str) -> StepDecision:  # type: ignore[override]
        return _record_failure(context, self.config, input, by_effect=True)


@session_step
class RecordToolOutcomeUnknown(_ToolStep):
    """Failure route of ``CallSingleAttemptTool`` (and its ``PollToolTask``, ``CancelToolTask``)."""

    async def execute(self, context: AsyncContext, input: str) -> StepDecision:  # type: ignore[override]
        return _record_failure(context, self.config, input, by_effect=False)


@session_step
class CancelToolTask(_ToolStep):
    """Abandons a started task: asks the runner to cancel it, records ``outcome_unknown``."""

    async def execute(self, context: AsyncContext, input: str) -> StepDecision:  # type: ignore[override]
        config = self.config
        record = load_record(context, input)
        if record.is_final:
            return dex.dead_end()
        runner = config.runner
        if isinstance(runner, ToolTaskCanceller) and record.task_id is not None:
            await runner.cancel_tool_task(
                ToolTaskCancellation(
                    flow_id=context.flow_id,
                    tool_call=record,
                    idempotency_key=idempotency_key(context.flow_id, record),
                    attempt=context.attempt,
                )
            )
        finish_record(
            context,
            config,
            record,
            AgentToolCallStatus.OUTCOME_UNKNOWN,
            cancellation_reason=CancellationReason.TURN_CANCELLED,
            error="the turn was cancelled while the tool's task ran",
        )
        return dex.dead_end()
