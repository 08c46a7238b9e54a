"""The Steps that wait for a person or for time, one per tool call.

``AwaitToolApproval`` waits for ``resolve_interrupt``; ``AwaitQuestionAnswer``
raises a tool's question and waits for ``answer_question``; ``AwaitTimer``
holds a ``durable_wait``. Each takes the tool call ID, loads only its own
record, and (for interrupts) locks ``PendingInterrupts`` in Execute. No
process holds a wait: the engine keeps the Timer and the Channels.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

import dex
from dex import AsyncContext, Context, Step, StepDecision, StepOptions, Timer, Wait
from dex.runtime_errors import AttributeMapNotLoadedError

from dex_agents_ray.session._api import AgentEventType
from dex_agents_ray.session._config import SessionConfig
from dex_agents_ray.session._control import control_reason
from dex_agents_ray.session._movements import (
    approval_movement,
    poll_movement,
    question_movement,
    timer_movement,
    tool_movement,
)
from dex_agents_ray.session._policy import BuiltInTool
from dex_agents_ray.session._records import (
    APPROVAL_DEADLINE_PASSED,
    QUESTION_DEADLINE_PASSED,
    finish_record,
    interrupt_payload,
    load_record,
    question_interrupt_id,
    sync_options,
)
from dex_agents_ray.session._runner import DECLINED_TEXT
from dex_agents_ray.session._schema import (
    AGENT_TOOL_CALLS,
    INTERRUPT_RESOLUTIONS,
    PENDING_INTERRUPTS,
    TOOL_CALL_CANCELLATIONS,
)
from dex_agents_ray.session._step_table import session_step
from dex_agents_ray.session._values import (
    AgentInterrupt,
    AgentInterruptResolution,
    AgentToolCall,
    AgentToolCallStatus,
    InterruptKind,
    QuestionAnswer,
    QuestionResolution,
    ToolCallCancellation,
    utc_now,
)
from dex_agents_ray.session.tracing._decorators import approval_step

__all__ = [
    "AwaitQuestionAnswer",
    "AwaitTimer",
    "AwaitToolApproval",
    "pending_interrupt",
]


def pending_interrupt(context: Context, interrupt_id: str) -> AgentInterrupt | None:
    """The pending interrupt ``interrupt_id``, or ``None``."""
    for interrupt in PENDING_INTERRUPTS.get(context) or []:
        if interrupt.interrupt_id == interrupt_id:
            return interrupt
    return None


def _remove_interrupt(context: Context, interrupt_id: str) -> None:
    pending = PENDING_INTERRUPTS.get(context) or []
    PENDING_INTERRUPTS.set(context, [i for i in pending if i.interrupt_id != interrupt_id])


def _deadline_timer(context: Context, interrupt_id: str) -> list[Any]:
    interrupt = pending_interrupt(context, interrupt_id)
    if interrupt is None or interrupt.deadline is None:
        return []
    remaining = max(timedelta(0), interrupt.deadline - utc_now())
    return [Timer.by_duration(remaining)]


def _deadline_passed(context: Context, interrupt_id: str) -> bool | None:
    """``None`` when the interrupt is no longer pending (an RPC resolved it)."""
    interrupt = pending_interrupt(context, interrupt_id)
    if interrupt is None:
        return None
    return interrupt.deadline is not None and utc_now() >= interrupt.deadline


def _resolved_event(
    context: Context,
    config: SessionConfig,
    record: AgentToolCall,
    interrupt_id: str,
    *,
    kind: InterruptKind,
    approved: bool,
    rejection_message: str | None = None,
    answered: bool = False,
    cancellation: ToolCallCancellation | None = None,
) -> None:
    config.emit(
        context,
        AgentEventType.INTERRUPT_RESOLVED,
        {
            "interrupt_id": interrupt_id,
            "approved": approved,
            "rejection_message": rejection_message,
            "kind": kind,
            "answered": answered,
            "cancellation_reason": None if cancellation is None else cancellation.reason,
        },
        turn_id=record.turn_id,
    )


def _withdraw(
    context: Context,
    config: SessionConfig,
    record: AgentToolCall,
    interrupt_id: str,
    kind: InterruptKind,
    *,
    cancellation: ToolCallCancellation | None = None,
    rejection_message: str | None = None,
) -> StepDecision:
    """End a waiting call whose interrupt was cancelled or expired: remove the
    interrupt, write ``interrupt_resolved``, record the call ``rejected``."""
    _remove_interrupt(context, interrupt_id)
    _resolved_event(
        context,
        config,
        record,
        interrupt_id,
        kind=kind,
        approved=False,
        rejection_message=rejection_message,
        cancellation=cancellation,
    )
    changes: dict[str, Any] = {}
    if cancellation is not None:
        changes["cancellation_reason"] = cancellation.reason
    if rejection_message is not None:
        changes["rejection_message"] = rejection_message
    finish_record(context, config, record, AgentToolCallStatus.REJECTED, **changes)
    return dex.dead_end()


def _record_exists(context: Context, tool_call_id: str) -> bool:
    """Whether the turn has a call with this ID (its instance is loaded when it matters)."""
    try:
        return AGENT_TOOL_CALLS.get(context, tool_call_id) is not None
    except AttributeMapNotLoadedError:
        return False


def _cancellation(context: Context, record: AgentToolCall) -> ToolCallCancellation | None:
    """The wake that ends this call's wait, while its turn is steered or cancelled.

    A wake left over from an earlier turn (tool call IDs can repeat across turns)
    is consumed and ignored, and the Step waits again."""
    woken: ToolCallCancellation | None = _first(
        TOOL_CALL_CANCELLATIONS.results(context, record.tool_call_id)
    )
    if woken is None:
        return None
    reason = control_reason(context, record.turn_id)
    return None if reason is None else replace(woken, reason=reason)


def _first(values: Any) -> Any:
    values = list(values)
    return values[0] if values else None


class _WaitStep(Step[str]):
    def __init__(self, config: SessionConfig) -> None:
        self.config = config

    def get_step_options(self) -> StepOptions | None:
        return sync_options()

    def _resume_moved(self, record: AgentToolCall) -> StepDecision:
        """A record that moved on already (the Step repeats after a crash)."""
        if record.status is AgentToolCallStatus.APPROVED:
            return dex.go_to_many(tool_movement(self.config, record))
        if record.status is AgentToolCallStatus.WAITING_FOR_TASK:
            return dex.go_to_many(poll_movement(self.config, record))
        return dex.dead_end()


@session_step
class AwaitToolApproval(_WaitStep):
    """Waits for ``resolve_interrupt`` of one call, or its deadline."""

    async def wait_for(self, context: AsyncContext, input: str) -> Wait:  # type: ignore[override]
        record = load_record(context, input)
        if record.status is not AgentToolCallStatus.AWAITING_APPROVAL:
            return Wait.skip_immediately()
        return Wait.any_of(
            *_deadline_timer(context, input),
            INTERRUPT_RESOLUTIONS.for_one(input),
            TOOL_CALL_CANCELLATIONS.for_one(input),
        )

    @approval_step
    async def execute(self, context: AsyncContext, input: str) -> StepDecision:  # type: ignore[override]
        config = self.config
        record = load_record(context, input)
        if record.status is not AgentToolCallStatus.AWAITING_APPROVAL:
            return self._resume_moved(record)
        resolution: AgentInterruptResolution | None = _first(
            INTERRUPT_RESOLUTIONS.results(context, input)
        )
        if resolution is not None:
            message = None if resolution.approved else resolution.rejection_message
            _resolved_event(
                context,
                config,
                record,
                input,
                kind=InterruptKind.APPROVAL,
                approved=resolution.approved,
                rejection_message=message,
            )
            if not resolution.approved:
                finish_record(
                    context, config, record, AgentToolCallStatus.REJECTED, rejection_message=message
                )
                return dex.dead_end()
            approved = replace(record, status=AgentToolCallStatus.APPROVED)
            AGENT_TOOL_CALLS.set(context, input, approved)
            return dex.go_to_many(tool_movement(config, approved))
        cancellation = _cancellation(context, record)
        if cancellation is not None:
            return _withdraw(
                context, config, record, input, InterruptKind.APPROVAL, cancellation=cancellation
            )
        if _deadline_passed(context, input):
            return _withdraw(
                context,
                config,
                record,
                input,
                InterruptKind.APPROVAL,
                rejection_message=APPROVAL_DEADLINE_PASSED,
            )
        # A Timer that fired early, or an answer that committed with the deadline: wait again.
        return dex.go_to_many(approval_movement(input))


def _answer_output(answer: str) -> str:
    return json.dumps({"status": "answered", "answer": answer}, separators=(",", ":"))


@session_step
class AwaitQuestionAnswer(_WaitStep):
    """Raises a tool's question, then waits for ``answer_question``, a decline, or the deadline."""

    async def wait_for(self, context: AsyncContext, input: str) -> Wait:  # type: ignore[override]
        record = load_record(context, input)
        if record.status is not AgentToolCallStatus.AWAITING_ANSWER:
            return Wait.skip_immediately()
        if not record.question_raised or record.interrupt_id is None:
            return Wait.until(Timer.by_duration(timedelta(0)))
        return Wait.any_of(
            *_deadline_timer(context, record.interrupt_id),
            INTERRUPT_RESOLUTIONS.for_one(record.interrupt_id),
            TOOL_CALL_CANCELLATIONS.for_one(input),
        )

    async def execute(self, context: AsyncContext, input: str) -> StepDecision:  # type: ignore[override]
        record = load_record(context, input)
        if record.status is not AgentToolCallStatus.AWAITING_ANSWER:
            return self._resume_moved(record)
        if not record.question_raised or record.interrupt_id is None:
            return self._raise(context, record)
        interrupt_id = record.interrupt_id
        resolution: AgentInterruptResolution | None = _first(
            INTERRUPT_RESOLUTIONS.results(context, interrupt_id)
        )
        if resolution is not None:
            answered = resolution.approved and resolution.answer is not None
            _resolved_event(
                context,
                self.config,
                record,
                interrupt_id,
                kind=InterruptKind.QUESTION,
                approved=resolution.approved,
                answered=answered,
            )
            if answered:
                assert resolution.answer is not None
                return self._settle(context, record, QuestionResolution.ANSWERED, resolution.answer)
            return self._settle(context, record, QuestionResolution.DECLINED, None)
        cancellation = _cancellation(context, record)
        if cancellation is not None and record.task_id is None:
            return _withdraw(
                context,
                self.config,
                record,
                interrupt_id,
                InterruptKind.QUESTION,
                cancellation=cancellation,
            )
        if _deadline_passed(context, interrupt_id):
            _remove_interrupt(context, interrupt_id)
            _resolved_event(
                context,
                self.config,
                record,
                interrupt_id,
                kind=InterruptKind.QUESTION,
                approved=False,
                rejection_message=QUESTION_DEADLINE_PASSED,
            )
            return self._settle(context, record, QuestionResolution.DEADLINE_PASSED, None)
        return dex.go_to_many(question_movement(input))

    def _raise(self, context: Context, record: AgentToolCall) -> StepDecision:
        """Raise a tool's question as ``<tool_call_id>-input-<n>`` (under the lock)."""
        interrupt_id = question_interrupt_id(record)
        pending = PENDING_INTERRUPTS.get(context) or []
        used = any(
            i.interrupt_id == interrupt_id or i.tool_call_id == interrupt_id for i in pending
        )
        if used or _record_exists(context, interrupt_id):
            finish_record(
                context,
                self.config,
                record,
                AgentToolCallStatus.FAILED,
                error=f"the tool's question ID {interrupt_id} is already used in this turn",
            )
            return dex.dead_end()
        deadline_after = self.config.options.interrupt_deadline
        interrupt = AgentInterrupt(
            interrupt_id=interrupt_id,
            kind=InterruptKind.QUESTION,
            tool_call_id=record.tool_call_id,
            tool_name=record.tool_name,
            turn_id=record.turn_id,
            arguments=record.arguments,
            effect=record.effect,
            deadline=None if deadline_after is None else utc_now() + deadline_after,
            question=record.question,
            choices=record.choices,
            allows_free_text=record.allows_free_text,
        )
        PENDING_INTERRUPTS.set(context, [*pending, interrupt])
        raised = replace(record, question_raised=True, interrupt_id=interrupt_id)
        AGENT_TOOL_CALLS.set(context, record.tool_call_id, raised)
        self.config.emit(
            context,
            AgentEventType.INTERRUPT_RAISED,
            interrupt_payload(interrupt),
            turn_id=record.turn_id,
        )
        return dex.go_to_many(question_movement(record.tool_call_id))

    def _settle(
        self,
        context: Context,
        record: AgentToolCall,
        resolution: QuestionResolution,
        answer: str | None,
    ) -> StepDecision:
        config = self.config
        if record.built_in_tool is BuiltInTool.ASK_USER:
            if resolution is QuestionResolution.ANSWERED:
                assert answer is not None
                output = _answer_output(answer)
                status = AgentToolCallStatus.SUCCEEDED
            else:
                output = (
                    DECLINED_TEXT
                    if resolution is QuestionResolution.DECLINED
                    else QUESTION_DEADLINE_PASSED
                )
                status = AgentToolCallStatus.REJECTED
            finish_record(context, config, record, status, output=output)
            return dex.dead_end()
        assert record.interrupt_id is not None
        answered = QuestionAnswer(
            interrupt_id=record.interrupt_id,
            resolution=resolution,
            answer=answer,
            continuation=record.input_continuation,
        )
        answers = (*record.input_answers, answered)
        if record.task_id is not None:
            # The task has started: every resolution goes back to it.
            polling = replace(
                record,
                status=AgentToolCallStatus.WAITING_FOR_TASK,
                input_answers=answers,
                task_answer_pending=True,
                question=None,
            )
            AGENT_TOOL_CALLS.set(context, record.tool_call_id, polling)
            return dex.go_to_many(poll_movement(config, polling))
        if resolution is QuestionResolution.ANSWERED:
            approved = replace(
                record, status=AgentToolCallStatus.APPROVED, input_answers=answers, question=None
            )
            AGENT_TOOL_CALLS.set(context, record.tool_call_id, approved)
            return dex.go_to_many(tool_movement(config, approved))
        output = (
            DECLINED_TEXT
            if resolution is QuestionResolution.DECLINED
            else (QUESTION_DEADLINE_PASSED)
        )
        finish_record(
            context,
            config,
            record,
            AgentToolCallStatus.REJECTED,
            output=output,
            input_answers=answers,
        )
        return dex.dead_end()


def wait_output(seconds: int, reason: str) -> str:
    """What the model sees after a ``durable_wait``."""
    return json.dumps(
        {"status": "completed", "waited_seconds": seconds, "reason": reason}, separators=(",", ":")
    )


@session_step
class AwaitTimer(_WaitStep):
    """Holds one ``durable_wait`` on a durable Timer; no process holds the wait."""

    async def wait_for(self, context: AsyncContext, input: str) -> Wait:  # type: ignore[override]
        record = load_record(context, input)
        if record.status is not AgentToolCallStatus.WAITING_FOR_TIMER or record.wait_until is None:
            return Wait.skip_immediately()
        remaining = max(timedelta(0), record.wait_until - utc_now())
        return Wait.any_of(Timer.by_duration(remaining), TOOL_CALL_CANCELLATIONS.for_one(input))

    async def execute(self, context: AsyncContext, input: str) -> StepDecision:  # type: ignore[override]
        config = self.config
        record = load_record(context, input)
        if record.status is not AgentToolCallStatus.WAITING_FOR_TIMER or record.wait_until is None:
            return self._resume_moved(record)
        cancellation = _cancellation(context, record)
        if cancellation is not None:
            finish_record(
                context,
                config,
                record,
                AgentToolCallStatus.REJECTED,
                cancellation_reason=cancellation.reason,
            )
            return dex.dead_end()
        if utc_now() < record.wait_until:
            return dex.go_to_many(timer_movement(input))
        output = wait_output(record.wait_seconds or 0, record.wait_reason or "")
        finish_record(context, config, record, AgentToolCallStatus.SUCCEEDED, output=output)
        return dex.dead_end()
