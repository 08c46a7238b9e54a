"""``RunModel`` after ``ToolCallsRequested``: one record per call, and where each goes.

Ordinary calls wait for approval or go to their tool Step; enabled built-in
tools are routed by the session itself: ``ask_user`` to ``AwaitQuestionAnswer``,
``durable_wait`` to ``AwaitTimer``, and ``write_todos`` settles in this
commit. Every record that is final here publishes its one result here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from dex import Context, StepMovement

from dex_agents_ray.errors import DexAgentsError
from dex_agents_ray.session._api import AgentEventType
from dex_agents_ray.session._builtin_tools import (
    BuiltInArgumentsError,
    parse_ask_user,
    parse_durable_wait,
    parse_write_todos,
)
from dex_agents_ray.session._config import SessionConfig
from dex_agents_ray.session._movements import (
    approval_movement,
    question_movement,
    timer_movement,
    tool_movement,
)
from dex_agents_ray.session._policy import BuiltInTool, ToolEffect, ToolPolicy
from dex_agents_ray.session._records import finish_record, interrupt_payload
from dex_agents_ray.session._runner import PLANNING_TURN_CALL_REJECTED, DeferredToolCall
from dex_agents_ray.session._schema import (
    AGENT_PLAN,
    AGENT_TOOL_CALLS,
    AGENT_TRACE_CONTEXT,
    PENDING_INTERRUPTS,
)
from dex_agents_ray.session._values import (
    AgentInterrupt,
    AgentPlan,
    AgentToolCall,
    AgentToolCallStatus,
    InterruptKind,
    PlanStatus,
    PlanTodo,
    TodoStatus,
)
from dex_agents_ray.session.tracing._notes import note_tool_calls_created

__all__ = ["TurnRequestError", "check_tool_calls", "defer_tool_calls"]

WRITE_TODOS_REPEATED = "write_todos was called more than once in one response"


class TurnRequestError(DexAgentsError, ValueError):
    """A ``ToolCallsRequested`` that fails the turn at once, without a retry."""


def check_tool_calls(calls: Sequence[DeferredToolCall], existing: Sequence[str]) -> None:
    """Refuse IDs that are empty, contain ``/``, or repeat within the turn."""
    seen = set(existing)
    for call in calls:
        if not isinstance(call, DeferredToolCall):
            raise TypeError(f"ToolCallsRequested.tool_calls holds a {type(call).__name__}")
        tool_call_id = call.tool_call_id
        if not isinstance(tool_call_id, str) or not tool_call_id:
            raise TurnRequestError("a tool call ID is empty")
        if "/" in tool_call_id:
            raise TurnRequestError(f"tool call ID {tool_call_id!r} contains '/'")
        if tool_call_id in seen:
            raise TurnRequestError(f"tool call ID {tool_call_id!r} repeats within the turn")
        if not isinstance(call.tool_name, str) or not call.tool_name:
            raise TurnRequestError(f"tool call {tool_call_id!r} has no tool name")
        if not isinstance(call.arguments, str):
            raise TurnRequestError(f"tool call {tool_call_id!r} has arguments that are not text")
        if not isinstance(call.policy, ToolPolicy):
            raise TurnRequestError(f"tool call {tool_call_id!r} has no ToolPolicy")
        seen.add(tool_call_id)


@dataclass
class _Deferral:
    """What one commit of ``RunModel`` collects while it defers a response's calls."""

    context: Context
    config: SessionConfig
    turn_id: str
    now: datetime
    movements: list[StepMovement[Any]]
    interrupts: list[AgentInterrupt]
    planning: bool = False
    """A planning turn: only ``write_todos`` runs, and it writes a draft."""

    def emit(self, type: AgentEventType, payload: dict[str, Any]) -> None:
        self.config.emit(self.context, type, payload, turn_id=self.turn_id)

    def raise_interrupt(self, interrupt: AgentInterrupt) -> None:
        self.interrupts.append(interrupt)
        self.emit(AgentEventType.INTERRUPT_RAISED, interrupt_payload(interrupt))

    def deadline(self) -> datetime | None:
        after = self.config.options.interrupt_deadline
        return None if after is None else self.now + after


def defer_tool_calls(
    context: Context,
    config: SessionConfig,
    *,
    turn_id: str,
    calls: Sequence[DeferredToolCall],
    first_order: int,
    now: datetime,
    planning: bool = False,
) -> tuple[list[StepMovement[Any]], int]:
    """Record every call; the movements of those that wait or run, and how many
    ordered writes wait queued (no result comes for them until ``RunModel`` starts
    them). In a planning turn every call but ``write_todos`` is rejected in this
    commit."""
    deferral = _Deferral(context, config, turn_id, now, [], [], planning)
    enabled = config.options.built_in_tools
    todo_calls = sum(1 for call in calls if call.tool_name == BuiltInTool.WRITE_TODOS.value)
    writing = False
    queued = 0
    trace_context = AGENT_TRACE_CONTEXT.get(context)  # the activation's root (see Tracing)
    for index, call in enumerate(calls):
        built_in = BuiltInTool(call.tool_name) if call.tool_name in enabled else None
        effect = ToolEffect.READ if built_in is not None else call.policy.effect
        record = AgentToolCall(
            tool_call_id=call.tool_call_id,
            turn_id=turn_id,
            tool_name=call.tool_name,
            arguments=call.arguments,
            effect=effect,
            requires_approval=built_in is None and call.policy.approval_required,
            status=AgentToolCallStatus.APPROVED,
            deferral_order=first_order + index,
            built_in_tool=built_in,
            tool_source_reference=call.tool_source_reference,
            runner_tool_state=call.runner_tool_state,
            created_at=now,
            ordered=built_in is None and bool(call.ordered),
            trace_context=trace_context,
        )
        deferral.emit(
            AgentEventType.TOOL_CALL_DEFERRED,
            {
                "tool_call_id": record.tool_call_id,
                "tool_name": record.tool_name,
                "effect": record.effect,
                "requires_approval": record.requires_approval,
            },
        )
        if planning and built_in is not BuiltInTool.WRITE_TODOS:
            finish_record(
                context,
                config,
                record,
                AgentToolCallStatus.REJECTED,
                output=PLANNING_TURN_CALL_REJECTED,
            )
        elif built_in is None and record.ordered and writing:
            # Runs after the response's ordered writes before it (RunModel starts it).
            AGENT_TOOL_CALLS.set(context, record.tool_call_id, _with(record, write_queued=True))
            queued += 1
        elif built_in is None:
            writing = writing or record.ordered
            _defer_ordinary(deferral, record)
        elif built_in is BuiltInTool.WRITE_TODOS and todo_calls > 1:
            finish_record(
                context, config, record, AgentToolCallStatus.FAILED, error=WRITE_TODOS_REPEATED
            )
        else:
            _defer_built_in(deferral, record, built_in)
    if deferral.interrupts:
        pending = PENDING_INTERRUPTS.get(context) or []
        PENDING_INTERRUPTS.set(context, [*pending, *deferral.interrupts])
    approvals = sum(1 for i in deferral.interrupts if i.kind is InterruptKind.APPROVAL)
    note_tool_calls_created([call.tool_call_id for call in calls], approvals)
    return deferral.movements, queued


def start_queued_write(
    context: Context, config: SessionConfig, record: AgentToolCall, now: datetime
) -> StepMovement[Any]:
    """Start an ordered write that waited for the one before it: raise its approval
    now, or move to its tool Step."""
    deferral = _Deferral(context, config, record.turn_id, now, [], [])
    _defer_ordinary(deferral, _with(record, write_queued=False))
    if deferral.interrupts:
        pending = PENDING_INTERRUPTS.get(context) or []
        PENDING_INTERRUPTS.set(context, [*pending, *deferral.interrupts])
    return deferral.movements[0]


def _defer_ordinary(deferral: _Deferral, record: AgentToolCall) -> None:
    if not record.requires_approval:
        AGENT_TOOL_CALLS.set(deferral.context, record.tool_call_id, record)
        deferral.movements.append(tool_movement(deferral.config, record))
        return
    waiting = _with(record, status=AgentToolCallStatus.AWAITING_APPROVAL)
    waiting = _with(waiting, interrupt_id=record.tool_call_id)
    AGENT_TOOL_CALLS.set(deferral.context, record.tool_call_id, waiting)
    deferral.raise_interrupt(
        AgentInterrupt(
            interrupt_id=record.tool_call_id,
            kind=InterruptKind.APPROVAL,
            tool_call_id=record.tool_call_id,
            tool_name=record.tool_name,
            turn_id=record.turn_id,
            arguments=record.arguments,
            effect=record.effect,
            deadline=deferral.deadline(),
            created_at=deferral.now,
        )
    )
    deferral.movements.append(approval_movement(record.tool_call_id))


def _with(record: AgentToolCall, **changes: Any) -> AgentToolCall:
    return replace(record, **changes)


def _defer_built_in(deferral: _Deferral, record: AgentToolCall, tool: BuiltInTool) -> None:
    context, config = deferral.context, deferral.config
    try:
        if tool is BuiltInTool.ASK_USER:
            _defer_ask_user(deferral, record)
        elif tool is BuiltInTool.DURABLE_WAIT:
            _defer_durable_wait(deferral, record)
        else:
            _write_todos(deferral, record)
    except BuiltInArgumentsError as error:
        finish_record(context, config, record, AgentToolCallStatus.FAILED, error=str(error))


def _defer_ask_user(deferral: _Deferral, record: AgentToolCall) -> None:
    arguments = parse_ask_user(record.arguments)
    waiting = _with(
        record,
        status=AgentToolCallStatus.AWAITING_ANSWER,
        interrupt_id=record.tool_call_id,
        question=arguments.question,
        choices=arguments.choices,
        allows_free_text=arguments.allows_free_text,
        question_raised=True,
    )
    AGENT_TOOL_CALLS.set(deferral.context, record.tool_call_id, waiting)
    deferral.raise_interrupt(
        AgentInterrupt(
            interrupt_id=record.tool_call_id,
            kind=InterruptKind.QUESTION,
            tool_call_id=record.tool_call_id,
            tool_name=record.tool_name,
            turn_id=record.turn_id,
            arguments=record.arguments,
            deadline=deferral.deadline(),
            question=arguments.question,
            choices=arguments.choices,
            allows_free_text=arguments.allows_free_text,
            created_at=deferral.now,
        )
    )
    deferral.movements.append(question_movement(record.tool_call_id))


def _defer_durable_wait(deferral: _Deferral, record: AgentToolCall) -> None:
    arguments = parse_durable_wait(record.arguments, deferral.config.options.max_durable_wait)
    wait_until = deferral.now + timedelta(seconds=arguments.seconds)
    waiting = _with(
        record,
        status=AgentToolCallStatus.WAITING_FOR_TIMER,
        wait_until=wait_until,
        wait_reason=arguments.reason,
        wait_seconds=arguments.seconds,
    )
    AGENT_TOOL_CALLS.set(deferral.context, record.tool_call_id, waiting)
    deferral.emit(
        AgentEventType.TIMER_STARTED,
        {"tool_call_id": record.tool_call_id, "wait_until": wait_until, "reason": arguments.reason},
    )
    deferral.movements.append(timer_movement(record.tool_call_id))


def plan_status(todos: Sequence[PlanTodo]) -> PlanStatus:
    """``cleared`` for no tasks, ``completed`` when all are, else ``active``."""
    if not todos:
        return PlanStatus.CLEARED
    if all(todo.status is TodoStatus.COMPLETED for todo in todos):
        return PlanStatus.COMPLETED
    return PlanStatus.ACTIVE


def _write_todos(deferral: _Deferral, record: AgentToolCall) -> None:
    todos = parse_write_todos(record.arguments)
    context = deferral.context
    current = AGENT_PLAN.get(context)
    revision = (current.revision if current is not None else 0) + 1
    status = plan_status(todos)
    if deferral.planning and status is not PlanStatus.CLEARED:
        status = PlanStatus.DRAFT  # reviewed by the user before it runs (execute_plan)
    AGENT_PLAN.set(
        context,
        AgentPlan(
            revision=revision,
            status=status,
            todos=todos,
            turn_id=deferral.turn_id,
            updated_at=deferral.now,
        ),
    )
    if status is PlanStatus.CLEARED:
        output: dict[str, Any] = {"status": "cleared", "revision": revision}
    else:
        output = {"status": "updated", "revision": revision, "task_count": len(todos)}
    deferral.emit(
        AgentEventType.PLAN_UPDATED,
        {"revision": revision, "status": status, "task_count": len(todos)},
    )
    finish_record(
        context,
        deferral.config,
        record,
        AgentToolCallStatus.SUCCEEDED,
        output=json.dumps(output, separators=(",", ":")),
    )
