"""Changing tool call records: finishing them, and the options of their Steps."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any, cast

from dex import Context, RetryPolicy, Step, StepDurability, StepOptions

from dex_agents_ray.engine import RayTaskOptions, RemoteStepOptions
from dex_agents_ray.session._api import AgentEventType
from dex_agents_ray.session._config import SessionConfig
from dex_agents_ray.session._policy import ToolEffect
from dex_agents_ray.session._runner import (
    ToolCallStepOptions,
    ToolCallStepOptionsProvider,
    implements,
)
from dex_agents_ray.session._schema import (
    AGENT_TOOL_CALLS,
    PENDING_INTERRUPTS,
    TOOL_CALL_RESULTS,
)
from dex_agents_ray.session._values import (
    AgentInterrupt,
    AgentToolCall,
    AgentToolCallStatus,
    ToolCallCompleted,
    utc_now,
)

__all__ = [
    "APPROVAL_DEADLINE_PASSED",
    "QUESTION_DEADLINE_PASSED",
    "TOOL_STEP_HEARTBEAT_TIMEOUT",
    "TOOL_STEP_TIMEOUT",
    "finish_record",
    "interrupt_payload",
    "load_record",
    "question_interrupt_id",
    "record_options",
    "sync_options",
    "tool_step_options",
]

TOOL_STEP_TIMEOUT = timedelta(minutes=15)
"""Each tool Step attempt's timeout unless the runner gives the call its own."""
TOOL_STEP_HEARTBEAT_TIMEOUT = timedelta(minutes=2)
"""A tool Step attempt without a heartbeat this long fails (the session beats every 20 s)."""
TOOL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), backoff_coefficient=2.0, maximum_attempts=3
)
"""``CallTool`` and ``PollToolTask``: 3 attempts."""
SINGLE_ATTEMPT = RetryPolicy(maximum_attempts=1)
"""``CallSingleAttemptTool``: 1 attempt."""
APPROVAL_DEADLINE_PASSED = "approval deadline passed"
"""``rejection_message`` of an approval whose ``interrupt_deadline`` passed."""
QUESTION_DEADLINE_PASSED = "question deadline passed"
"""What the model sees for a question whose ``interrupt_deadline`` passed."""


def sync_options(*, ray: RayTaskOptions | None = None, **fields: Any) -> StepOptions:
    """``StepOptions`` with both durabilities set to SYNC explicitly; a Ray task
    with ``ray`` options (``RemoteStepOptions``) when given."""
    fields.update(wait_for_durability=StepDurability.SYNC, execute_durability=StepDurability.SYNC)
    return StepOptions(**fields) if ray is None else RemoteStepOptions(ray=ray, **fields)


def record_options(tool_call_id: str, *, lock_interrupts: bool = False) -> StepOptions:
    """Options of a host Step that loads only the call's own record."""
    load = (AGENT_TOOL_CALLS.load(tool_call_id),)
    return sync_options(
        wait_for_load_attribute_map_instances=load,
        execute_load_attribute_map_instances=load,
        execute_lock_attributes=(PENDING_INTERRUPTS.lock(),) if lock_interrupts else (),
    )


def load_record(context: Context, tool_call_id: str) -> AgentToolCall:
    """The call's record; it must exist."""
    record = AGENT_TOOL_CALLS.get(context, tool_call_id)
    if record is None:
        raise LookupError(f"no tool call record {tool_call_id!r}")
    return record


def question_interrupt_id(record: AgentToolCall) -> str:
    """``<tool_call_id>-input-<n>``: the interrupt ID of the tool's latest question."""
    return f"{record.tool_call_id}-input-{record.input_request_count}"


def _call_options(config: SessionConfig, record: AgentToolCall) -> ToolCallStepOptions:
    if implements(config.runner, ToolCallStepOptionsProvider):
        given = cast(ToolCallStepOptionsProvider, config.runner).tool_call_step_options(record)
        if given is not None:
            return given
    return ToolCallStepOptions()


def _ray_options(
    config: SessionConfig, record: AgentToolCall, given: ToolCallStepOptions
) -> RayTaskOptions | None:
    """The task's Ray options, or ``None`` to run the Step in the host."""
    options = config.options
    inline = (
        given.run_inline
        if given.run_inline is not None
        else record.tool_name in options.inline_tools
    )
    if inline:
        return None
    if given.ray is not None:
        return given.ray
    return options.tool_ray_options_by_name.get(record.tool_name, options.tool_ray_options)


def tool_step_options(
    config: SessionConfig,
    record: AgentToolCall,
    *,
    single_attempt: bool,
    failure_step: type[Step[Any]],
) -> StepOptions:
    """Per-movement options of a tool Step (``CallTool``, ``CallSingleAttemptTool``,
    ``PollToolTask``): its own record, its retries, its placement, its failure route."""
    given = _call_options(config, record)
    retry = SINGLE_ATTEMPT if single_attempt else (given.retry_policy or TOOL_RETRY)
    load = (AGENT_TOOL_CALLS.load(record.tool_call_id),)
    fields: dict[str, Any] = {
        "wait_for_durability": StepDurability.SYNC,
        "execute_durability": StepDurability.SYNC,
        "execute_method_timeout": given.timeout or TOOL_STEP_TIMEOUT,
        "heartbeat_timeout": given.heartbeat_timeout or TOOL_STEP_HEARTBEAT_TIMEOUT,
        "execute_retry": retry,
        "wait_for_load_attribute_map_instances": load,
        "execute_load_attribute_map_instances": load,
    }
    ray = _ray_options(config, record, given)
    options = StepOptions(**fields) if ray is None else RemoteStepOptions(ray=ray, **fields)
    return options.on_execute_failure_proceed_to(
        failure_step, options=record_options(record.tool_call_id)
    )


def single_attempt_effect(effect: ToolEffect) -> bool:
    """Whether calls of ``effect`` run in ``CallSingleAttemptTool``."""
    return effect in (ToolEffect.NON_IDEMPOTENT_WRITE, ToolEffect.UNCLASSIFIED)


def finish_record(
    context: Context,
    config: SessionConfig,
    record: AgentToolCall,
    status: AgentToolCallStatus,
    **changes: Any,
) -> AgentToolCall:
    """Make ``record`` final: store it, publish its one result, write ``tool_call_finished``."""
    if not status.is_final:
        raise ValueError(f"{status} is not a final status")
    final = replace(record, status=status, finished_at=utc_now(), **changes)
    AGENT_TOOL_CALLS.set(context, record.tool_call_id, final)
    TOOL_CALL_RESULTS.publish(
        context,
        ToolCallCompleted(tool_call_id=record.tool_call_id, turn_id=record.turn_id, status=status),
    )
    config.emit(
        context,
        AgentEventType.TOOL_CALL_FINISHED,
        {"tool_call_id": record.tool_call_id, "tool_name": record.tool_name, "status": status},
        turn_id=record.turn_id,
    )
    return final


def interrupt_payload(interrupt: AgentInterrupt) -> dict[str, Any]:
    """The ``interrupt_raised`` payload of ``interrupt``."""
    return {
        "interrupt_id": interrupt.interrupt_id,
        "tool_call_id": interrupt.tool_call_id,
        "tool_name": interrupt.tool_name,
        "deadline": interrupt.deadline,
        "kind": interrupt.kind,
        "question": interrupt.question,
        "choices": list(interrupt.choices),
        "allows_free_text": interrupt.allows_free_text,
    }
