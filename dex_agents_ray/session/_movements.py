"""Movements to the session's per-call Steps, each with its own options.

Step modules refer to each other (a tool Step asks a question, the question
Step returns to the tool Step), so the Step classes are imported when a
movement is built rather than at module import.
"""

from __future__ import annotations

from typing import Any

from dex import StepMovement

from dex_agents_ray.session._records import (
    record_options,
    single_attempt_effect,
    tool_step_options,
)
from dex_agents_ray.session._schema import SessionConfig
from dex_agents_ray.session._values import AgentToolCall

__all__ = [
    "approval_movement",
    "cancel_task_movement",
    "poll_movement",
    "question_movement",
    "timer_movement",
    "tool_movement",
]


def tool_movement(config: SessionConfig, record: AgentToolCall) -> StepMovement[Any]:
    """``CallTool`` for ``read``/``idempotent_write``, else ``CallSingleAttemptTool``."""
    from dex_agents_ray.session._steps_tools import (
        CallSingleAttemptTool,
        CallTool,
        RecordToolFailure,
        RecordToolOutcomeUnknown,
    )

    if single_attempt_effect(record.effect):
        options = tool_step_options(
            config, record, single_attempt=True, failure_step=RecordToolOutcomeUnknown
        )
        return StepMovement.of(CallSingleAttemptTool, record.tool_call_id, options=options)
    options = tool_step_options(
        config, record, single_attempt=False, failure_step=RecordToolFailure
    )
    return StepMovement.of(CallTool, record.tool_call_id, options=options)


def poll_movement(config: SessionConfig, record: AgentToolCall) -> StepMovement[Any]:
    """``PollToolTask``: 3 attempts, failure route by the call's effect."""
    from dex_agents_ray.session._steps_tools import (
        PollToolTask,
        RecordToolFailure,
        RecordToolOutcomeUnknown,
    )

    failure = (
        RecordToolOutcomeUnknown if single_attempt_effect(record.effect) else RecordToolFailure
    )
    options = tool_step_options(config, record, single_attempt=False, failure_step=failure)
    return StepMovement.of(PollToolTask, record.tool_call_id, options=options)


def approval_movement(tool_call_id: str) -> StepMovement[Any]:
    """``AwaitToolApproval`` of one call."""
    from dex_agents_ray.session._steps_wait import AwaitToolApproval

    options = record_options(tool_call_id, lock_interrupts=True)
    return StepMovement.of(AwaitToolApproval, tool_call_id, options=options)


def question_movement(tool_call_id: str, raises: str | None = None) -> StepMovement[Any]:
    """``AwaitQuestionAnswer`` of one call; ``raises`` is the interrupt ID of a tool's
    question it raises first, whose record (if another call has that ID) it also loads."""
    from dataclasses import replace

    from dex_agents_ray.session._schema import AGENT_TOOL_CALLS
    from dex_agents_ray.session._steps_wait import AwaitQuestionAnswer

    options = record_options(tool_call_id, lock_interrupts=True)
    if raises is not None:
        options = replace(
            options,
            execute_load_attribute_map_instances=(
                *options.execute_load_attribute_map_instances,
                AGENT_TOOL_CALLS.load(raises),
            ),
        )
    return StepMovement.of(AwaitQuestionAnswer, tool_call_id, options=options)


def timer_movement(tool_call_id: str) -> StepMovement[Any]:
    """``AwaitTimer`` of one ``durable_wait`` call."""
    from dex_agents_ray.session._steps_wait import AwaitTimer

    return StepMovement.of(AwaitTimer, tool_call_id, options=record_options(tool_call_id))


def cancel_task_movement(tool_call_id: str) -> StepMovement[Any]:
    """``CancelToolTask`` of one call whose started task ``cancel_turn`` abandons."""
    from dex_agents_ray.session._steps_tools import CancelToolTask, cancel_task_options

    return StepMovement.of(CancelToolTask, tool_call_id, options=cancel_task_options(tool_call_id))
