"""Starting and ending turns, and what ``RunModel`` does with each outcome."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import dex
from dex import AsyncContext, Context, StepDecision

from dex_agents_ray.media import validate_image_references
from dex_agents_ray.session._api import AgentEventType
from dex_agents_ray.session._config import SessionConfig
from dex_agents_ray.session._messages import (
    MessageTooLargeError,
    append_messages,
    apply_retention,
    load_messages,
)
from dex_agents_ray.session._movements import run_model_movement
from dex_agents_ray.session._runner import (
    AgentEventWriter,
    AgentTurnContext,
    ToolCallsRequested,
    TurnCompleted,
    TurnContinued,
    UnfinishedTurnMessageBuilder,
    build_turn_failure_note,
    implements,
)
from dex_agents_ray.session._schema import (
    AGENT_PLAN,
    AGENT_STATE,
    AGENT_TOOL_CALLS,
    AGENT_USAGE,
    CONTEXT_SUMMARY,
    FRAMEWORK_RUN_STATE,
    PENDING_INTERRUPTS,
    SESSION_SETTINGS,
    TURN_REPLY_SEQUENCE,
    TURN_SESSION_SETTINGS,
)
from dex_agents_ray.session._step_table import step
from dex_agents_ray.session._tool_requests import (
    TurnRequestError,
    check_tool_calls,
    defer_tool_calls,
)
from dex_agents_ray.session._values import (
    AgentState,
    AgentStatus,
    AgentToolCall,
    AgentUsage,
    AgentUserMessage,
    FrameworkMessage,
    InteractionMode,
    MessageRole,
    PlanStatus,
    TurnReplySequence,
    TurnSessionSettings,
    utc_now,
)

logger = logging.getLogger("dex_agents_ray.session")

__all__ = [
    "apply_outcome",
    "begin_turn",
    "record_usage",
    "fail_turn",
    "turn_context",
    "turn_records",
]

NEW_MESSAGES_WITHOUT_BUILDER = (
    "the runner stored turn messages (new_messages) but does not implement "
    "build_unfinished_turn_messages"
)


def require_messages(messages: Sequence[object], what: str) -> list[FrameworkMessage]:
    """Check a runner's messages before any is stored."""
    checked = []
    for index, message in enumerate(messages):
        if not isinstance(message, FrameworkMessage):
            raise TypeError(f"{what}[{index}] is a {type(message).__name__}, not FrameworkMessage")
        if not isinstance(message.framework_item, str):
            raise TypeError(f"{what}[{index}].framework_item must be a str")
        validate_image_references(message.images)
        checked.append(message)
    return checked


def turn_records(context: Context) -> list[AgentToolCall]:
    """This turn's tool call records in deferral order (needs the map loaded)."""
    records = [
        AGENT_TOOL_CALLS.get(context, key)
        for key in AGENT_TOOL_CALLS.get_all_instance_keys(context)
    ]
    return sorted((r for r in records if r is not None), key=lambda r: r.deferral_order)


def begin_turn(
    context: Context,
    config: SessionConfig,
    state: AgentState,
    message: FrameworkMessage | Sequence[FrameworkMessage],
    *,
    mode: InteractionMode = InteractionMode.CHAT,
) -> AgentState:
    """Store the turn's user message(s) (a steered turn has one per steered message,
    in order) and make the turn active (status ``running_model``) in ``mode``.

    A message too large to store fails the turn at once (no retry could store
    it): the returned state has no active turn and says why in ``last_turn_error``.
    """
    messages = [message] if isinstance(message, FrameworkMessage) else list(message)
    if not messages:
        raise ValueError("a turn starts with at least one user message")
    for each in messages:
        if each.role is not MessageRole.USER:
            raise ValueError(f"build_user_message returned a {each.role.value!r} message")
    require_messages(messages, "user message")
    turn_number = state.turn_count + 1
    turn_id = f"turn-{turn_number}"
    first = state.last_sequence + 1
    try:
        last = append_messages(
            context,
            config.options,
            last_sequence=state.last_sequence,
            turn_id=turn_id,
            messages=messages,
            now=utc_now(),
        )
    except MessageTooLargeError as error:
        return _refuse_turn(context, config, state, turn_id, f"the user message: {error}")
    TURN_REPLY_SEQUENCE.set(context, TurnReplySequence(turn_id=turn_id, first_sequence=last + 1))
    # The turn's own copy: its model calls read only this, so a settings update
    # (or a crash) while it runs changes nothing for it.
    TURN_SESSION_SETTINGS.set(
        context,
        TurnSessionSettings(
            turn_id=turn_id, session_settings=dict(SESSION_SETTINGS.get(context) or {})
        ),
    )
    FRAMEWORK_RUN_STATE.delete(context)
    started = replace(
        state,
        status=AgentStatus.RUNNING_MODEL,
        interaction_mode=mode,
        turn_count=turn_number,
        active_turn_id=turn_id,
        last_sequence=last,
        accepts_turn_control=True,
    )
    AGENT_STATE.set(context, started)
    config.emit(context, AgentEventType.TURN_STARTED, {"sequence": first}, turn_id=turn_id)
    return started


def _refuse_turn(
    context: Context, config: SessionConfig, state: AgentState, turn_id: str, error: str
) -> AgentState:
    """Start turn ``turn_id`` and fail it at once, storing nothing of it."""
    refused = replace(
        state,
        status=AgentStatus.WAITING_FOR_USER_MESSAGE,
        turn_count=state.turn_count + 1,
        active_turn_id=None,
        last_turn_error=error,
    )
    AGENT_STATE.set(context, refused)
    sequence = {"sequence": state.last_sequence + 1}
    config.emit(context, AgentEventType.TURN_STARTED, sequence, turn_id=turn_id)
    config.emit(context, AgentEventType.TURN_FAILED, {"error": error}, turn_id=turn_id)
    return refused


def planning_mode(context: Context, messages: Sequence[AgentUserMessage]) -> InteractionMode:
    """``planning`` when a message asks for plan mode or a draft plan exists, else ``chat``."""
    plan = AGENT_PLAN.get(context)
    if any(m.plan_mode for m in messages) or (plan is not None and plan.status is PlanStatus.DRAFT):
        return InteractionMode.PLANNING
    return InteractionMode.CHAT


def turn_session_settings(context: Context, turn_id: str) -> dict[str, Any]:
    """The settings turn ``turn_id`` started with; a copy another turn left reads as none."""
    copy = TURN_SESSION_SETTINGS.get(context)
    if copy is None or copy.turn_id != turn_id:
        return {}
    return dict(copy.session_settings)


def turn_context(
    context: AsyncContext,
    config: SessionConfig,
    state: AgentState,
    writer: AgentEventWriter,
    heartbeat: Any,
    records: Sequence[AgentToolCall] | None = None,
) -> AgentTurnContext:
    """What the runner sees of the active turn (messages and records must be loaded);
    ``records``: this invocation's :func:`turn_records`, when read already."""
    assert state.active_turn_id is not None
    options = config.options
    summary = CONTEXT_SUMMARY.get(context)
    if summary is None:
        messages = load_messages(context)
    else:
        done = summary.last_sequence
        messages = [m for m in load_messages(context, after=done) if m.sequence > done]
    return AgentTurnContext(
        flow_id=context.flow_id,
        turn_id=state.active_turn_id,
        attempt=context.attempt,
        messages=tuple(messages),
        context_summary=summary,
        framework_run_state=FRAMEWORK_RUN_STATE.get(context),
        tool_calls={
            r.tool_call_id: r for r in (turn_records(context) if records is None else records)
        },
        events=writer,
        heartbeat=heartbeat,
        enabled_built_in_tools=options.built_in_tools,
        interaction_mode=state.interaction_mode,
        session_settings=turn_session_settings(context, state.active_turn_id),
        plan=AGENT_PLAN.get(context),
        tool_policies=options.tool_policies,
        default_tool_effect=options.default_tool_effect,
        step_execution_id=context.step_execution_id,
    )


def _end_turn(
    context: Context,
    config: SessionConfig,
    state: AgentState,
    *,
    error: str | None,
    control: tuple[AgentEventType, dict[str, Any]] | None = None,
) -> None:
    for key in AGENT_TOOL_CALLS.get_all_instance_keys(context):
        AGENT_TOOL_CALLS.delete(context, key)
    FRAMEWORK_RUN_STATE.delete(context)
    PENDING_INTERRUPTS.set(context, [])
    AGENT_STATE.set(
        context,
        replace(
            state,
            status=AgentStatus.WAITING_FOR_USER_MESSAGE,
            active_turn_id=None,
            last_turn_error=error,
        ),
    )
    turn_id = state.active_turn_id
    if control is not None:
        event, payload = control
        config.emit(context, event, payload, turn_id=turn_id)
    elif error is None:
        config.emit(
            context,
            AgentEventType.TURN_COMPLETED,
            {"message_count": state.last_sequence},
            turn_id=turn_id,
        )
    else:
        config.emit(context, AgentEventType.TURN_FAILED, {"error": error}, turn_id=turn_id)


def _store(
    context: Context, config: SessionConfig, state: AgentState, messages: Sequence[FrameworkMessage]
) -> AgentState:
    assert state.active_turn_id is not None
    last = append_messages(
        context,
        config.options,
        last_sequence=state.last_sequence,
        turn_id=state.active_turn_id,
        messages=messages,
        now=utc_now(),
    )
    apply_retention(context, config.options, last)
    return replace(state, last_sequence=last)


def record_usage(context: Context, config: SessionConfig, state: AgentState, usage: object) -> None:
    if not isinstance(usage, AgentUsage):
        raise TypeError(f"the outcome's usage is a {type(usage).__name__}, not AgentUsage")
    total = (AGENT_USAGE.get(context) or AgentUsage()) + usage
    AGENT_USAGE.set(context, total)
    config.emit(
        context,
        AgentEventType.USAGE_RECORDED,
        {"recorded": usage, "session": total},
        turn_id=state.active_turn_id,
    )


def fail_turn(
    context: Context,
    config: SessionConfig,
    state: AgentState,
    error: str,
    turn: AgentTurnContext | None,
) -> StepDecision:
    """End the active turn as failed: unfinished-turn messages, the note, cleared records."""
    if state.active_turn_id is None:
        AGENT_STATE.set(context, replace(state, last_turn_error=error))
        return dex.go_to(step("AwaitUserMessage"), None)
    state = _store_unfinished(context, config, state, turn)
    _end_turn(context, config, state, error=error)
    return dex.go_to(step("AwaitUserMessage"), None)


def end_controlled_turn(
    context: Context,
    config: SessionConfig,
    state: AgentState,
    turn: AgentTurnContext | None,
    *,
    cancelled: bool,
    steered_count: int,
) -> AgentState:
    """End a steered or cancelled turn as a failed one ends (the runner's
    unfinished-turn messages, or the note listing the calls that ran), with
    ``turn_cancelled`` or ``turn_steered`` instead of ``turn_failed``."""
    state = _store_unfinished(context, config, state, turn)
    if cancelled:
        control = (AgentEventType.TURN_CANCELLED, {"message_count": state.last_sequence})
    else:
        control = (
            AgentEventType.TURN_STEERED,
            {"steered_message_count": steered_count, "message_count": state.last_sequence},
        )
    _end_turn(context, config, state, error=None, control=control)
    return replace(
        state,
        status=AgentStatus.WAITING_FOR_USER_MESSAGE,
        active_turn_id=None,
        last_turn_error=None,
    )


def _store_unfinished(
    context: Context, config: SessionConfig, state: AgentState, turn: AgentTurnContext | None
) -> AgentState:
    """Store what an unfinished turn leaves: the runner's messages, then the note."""
    records = [r for r in turn_records(context) if r.is_final]
    messages: list[FrameworkMessage] = []
    runner = config.runner
    if turn is not None and isinstance(runner, UnfinishedTurnMessageBuilder):
        try:
            messages = require_messages(
                list(runner.build_unfinished_turn_messages(turn)), "unfinished turn messages"
            )
        except Exception:
            logger.warning(
                "build_unfinished_turn_messages failed; storing only the note", exc_info=True
            )
            messages = []
    note: list[FrameworkMessage] = []
    if records:
        built = runner.build_user_message(build_turn_failure_note(records))
        if not isinstance(built, FrameworkMessage) or built.role is not MessageRole.USER:
            raise ValueError("build_user_message must return a user FrameworkMessage")
        note.append(built)
    try:
        return _store(context, config, state, messages + note)
    except MessageTooLargeError:
        if not messages:
            raise
        logger.warning(
            "build_unfinished_turn_messages returned a message too large to store; "
            "storing only the note",
            exc_info=True,
        )
        return _store(context, config, state, note)


def apply_outcome(
    context: Context,
    config: SessionConfig,
    state: AgentState,
    turn: AgentTurnContext,
    outcome: object,
) -> StepDecision:
    """Commit what ``run_model_step`` returned and choose the next Step.

    A message too large to store fails the turn at once: no retry of the model
    call could store it (the outcome's usage stays recorded).
    """
    try:
        return _apply_outcome(context, config, state, turn, outcome)
    except MessageTooLargeError as error:
        return fail_turn(context, config, state, f"the runner's reply: {error}", turn)


def _apply_outcome(
    context: Context,
    config: SessionConfig,
    state: AgentState,
    turn: AgentTurnContext,
    outcome: object,
) -> StepDecision:
    has_builder = implements(config.runner, UnfinishedTurnMessageBuilder)
    if isinstance(outcome, TurnCompleted):
        messages = require_messages(list(outcome.new_messages), "TurnCompleted.new_messages")
        record_usage(context, config, state, outcome.usage)
        state = _store(context, config, state, messages)
        error = outcome.turn_error
        if error is not None and not isinstance(error, str):
            raise TypeError("TurnCompleted.turn_error must be a str or None")
        _end_turn(context, config, state, error=error or None)
        return dex.go_to(step("AwaitUserMessage"), None)
    if isinstance(outcome, TurnContinued):
        _require_run_state(outcome.framework_run_state, "TurnContinued")
        messages = require_messages(list(outcome.new_messages), "TurnContinued.new_messages")
        record_usage(context, config, state, outcome.usage)
        state = _store(context, config, state, messages)
        if not has_builder:
            return fail_turn(context, config, state, NEW_MESSAGES_WITHOUT_BUILDER, None)
        FRAMEWORK_RUN_STATE.set(context, outcome.framework_run_state)
        AGENT_STATE.set(context, state)
        return dex.go_to_many(run_model_movement(context, config))
    if isinstance(outcome, ToolCallsRequested):
        return _apply_tool_calls(context, config, state, turn, outcome, has_builder)
    raise TypeError(
        f"run_model_step returned {type(outcome).__name__}; expected TurnCompleted, "
        "ToolCallsRequested or TurnContinued"
    )


def _require_run_state(value: object, what: str) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what}.framework_run_state must be a non-empty string")


def _apply_tool_calls(
    context: Context,
    config: SessionConfig,
    state: AgentState,
    turn: AgentTurnContext,
    outcome: ToolCallsRequested,
    has_builder: bool,
) -> StepDecision:
    _require_run_state(outcome.framework_run_state, "ToolCallsRequested")
    calls = list(outcome.tool_calls)
    if not calls:
        raise ValueError("ToolCallsRequested.tool_calls is empty")
    messages = require_messages(list(outcome.new_messages), "ToolCallsRequested.new_messages")
    record_usage(context, config, state, outcome.usage)
    state = _store(context, config, state, messages)
    if messages and not has_builder:
        return fail_turn(context, config, state, NEW_MESSAGES_WITHOUT_BUILDER, None)
    try:
        check_tool_calls(calls, list(turn.tool_calls))
    except TurnRequestError as error:
        return fail_turn(context, config, state, f"invalid tool calls: {error}", turn)
    assert state.active_turn_id is not None
    first_order = max((r.deferral_order for r in turn.tool_calls.values()), default=-1) + 1
    movements, queued = defer_tool_calls(
        context,
        config,
        turn_id=state.active_turn_id,
        calls=calls,
        first_order=first_order,
        now=utc_now(),
        planning=state.interaction_mode is InteractionMode.PLANNING,
    )
    FRAMEWORK_RUN_STATE.set(context, outcome.framework_run_state)
    AGENT_STATE.set(context, replace(state, status=AgentStatus.RUNNING_TOOLS))
    resume_turn = dex.StepMovement.of(step("ResumeTurn"), len(calls) - queued)
    return dex.go_to_many(*movements, resume_turn)
