"""Movements to the session's Steps, each with its own options.

The Steps find each other through ``_step_table`` (by their spec names), so a
Step module imports this one and this one imports no Step module: a tool Step
asks a question, the question Step returns to the tool Step, and neither
imports the other.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from dex import Context, RetryPolicy, Step, StepMovement, StepOptions

from dex_agents_ray.session._config import SessionConfig
from dex_agents_ray.session._messages import chunks_after
from dex_agents_ray.session._records import (
    record_options,
    single_attempt_effect,
    sync_options,
    tool_step_options,
)
from dex_agents_ray.session._schema import (
    AGENT_MESSAGE_CHUNKS,
    AGENT_MESSAGES,
    AGENT_TOOL_CALLS,
    CONTEXT_SUMMARY,
)
from dex_agents_ray.session._step_table import step
from dex_agents_ray.session._values import AgentToolCall

__all__ = [
    "approval_movement",
    "cancel_task_movement",
    "cancel_task_options",
    "model_movement",
    "model_step_options",
    "poll_movement",
    "question_movement",
    "run_model_movement",
    "timer_movement",
    "tool_movement",
]


def tool_movement(config: SessionConfig, record: AgentToolCall) -> StepMovement[Any]:
    """``CallTool`` for ``read``/``idempotent_write``, else ``CallSingleAttemptTool``."""
    if single_attempt_effect(record.effect):
        options = tool_step_options(
            config,
            record,
            single_attempt=True,
            failure_step=step("RecordToolOutcomeUnknown"),
        )
        return StepMovement.of(step("CallSingleAttemptTool"), record.tool_call_id, options=options)
    options = tool_step_options(
        config, record, single_attempt=False, failure_step=step("RecordToolFailure")
    )
    return StepMovement.of(step("CallTool"), record.tool_call_id, options=options)


def poll_movement(config: SessionConfig, record: AgentToolCall) -> StepMovement[Any]:
    """``PollToolTask``: 3 attempts, failure route by the call's effect."""
    failure = step(
        "RecordToolOutcomeUnknown" if single_attempt_effect(record.effect) else "RecordToolFailure"
    )
    options = tool_step_options(config, record, single_attempt=False, failure_step=failure)
    return StepMovement.of(step("PollToolTask"), record.tool_call_id, options=options)


def approval_movement(tool_call_id: str) -> StepMovement[Any]:
    """``AwaitToolApproval`` of one call."""
    options = record_options(tool_call_id, lock_interrupts=True)
    return StepMovement.of(step("AwaitToolApproval"), tool_call_id, options=options)


def question_movement(tool_call_id: str, raises: str | None = None) -> StepMovement[Any]:
    """``AwaitQuestionAnswer`` of one call; ``raises`` is the interrupt ID of a tool's
    question it raises first, whose record (if another call has that ID) it also loads."""
    options = record_options(tool_call_id, lock_interrupts=True)
    if raises is not None:
        options = replace(
            options,
            execute_load_attribute_map_instances=(
                *options.execute_load_attribute_map_instances,
                AGENT_TOOL_CALLS.load(raises),
            ),
        )
    return StepMovement.of(step("AwaitQuestionAnswer"), tool_call_id, options=options)


def timer_movement(tool_call_id: str) -> StepMovement[Any]:
    """``AwaitTimer`` of one ``durable_wait`` call."""
    return StepMovement.of(step("AwaitTimer"), tool_call_id, options=record_options(tool_call_id))


def cancel_task_movement(tool_call_id: str) -> StepMovement[Any]:
    """``CancelToolTask`` of one call whose started task ``cancel_turn`` abandons."""
    options = cancel_task_options(tool_call_id)
    return StepMovement.of(step("CancelToolTask"), tool_call_id, options=options)


def cancel_task_options(tool_call_id: str) -> StepOptions:
    """Per-movement options of ``CancelToolTask`` (``cancel_turn`` abandons a started
    task): 3 attempts in 2 minutes, 30 s timeout, failure route
    ``RecordToolOutcomeUnknown``."""
    load = (AGENT_TOOL_CALLS.load(tool_call_id),)
    return sync_options(
        execute_method_timeout=timedelta(seconds=30),
        execute_retry=RetryPolicy(
            initial_interval=timedelta(seconds=1),
            maximum_attempts=3,
            total_duration=timedelta(minutes=2),
        ),
        execute_load_attribute_map_instances=load,
    ).on_execute_failure_proceed_to(
        step("RecordToolOutcomeUnknown"), options=record_options(tool_call_id)
    )


def run_model_movement(context: Context, config: SessionConfig) -> StepMovement[Any]:
    """The movement to ``RunModel`` (see ``model_movement``)."""
    return model_movement(context, config, step("RunModel"), None)


def model_movement(
    context: Context, config: SessionConfig, to: type[Step[Any]], input: Any
) -> StepMovement[Any]:
    """A movement to ``RunModel`` or ``CompactContext``. Once the session has a
    summary it loads only the chunks after it (through per-movement load
    options), so a long session's model Steps read a bounded part of it."""
    summary = CONTEXT_SUMMARY.get(context)
    if summary is None:
        return StepMovement.of(to, input)
    loads = tuple(
        AGENT_MESSAGE_CHUNKS.load(key) for key in chunks_after(context, summary.last_sequence)
    )
    options = replace(
        model_step_options(config),
        execute_load_attribute_maps=(AGENT_MESSAGES, AGENT_TOOL_CALLS),
        execute_load_attribute_map_instances=loads,
    )
    return StepMovement.of(to, input, options=options)


def model_step_options(config: SessionConfig) -> StepOptions:
    """``RunModel``'s (and ``CompactContext``'s) options: the limit's timeouts and
    attempts, the failure route ``RecordTurnFailure``, every message loaded."""
    limit = config.options.run_model_limit
    return sync_options(
        ray=config.options.model_ray_options,
        execute_method_timeout=limit.timeout,
        heartbeat_timeout=limit.heartbeat_timeout,
        execute_retry=RetryPolicy(
            initial_interval=timedelta(seconds=1),
            backoff_coefficient=2.0,
            maximum_attempts=limit.maximum_attempts,
            total_duration=limit.retry_budget,
        ),
        execute_load_attribute_maps=(AGENT_MESSAGES, AGENT_MESSAGE_CHUNKS, AGENT_TOOL_CALLS),
    ).on_execute_failure_proceed_to(step("RecordTurnFailure"))
