"""The turn Steps: ``StartAgentSession``, ``AwaitUserMessage``, ``RunModel``,
``ResumeTurn`` and ``RecordTurnFailure``. They run in the session's host."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import dex
from dex import AsyncContext, Context, RetryPolicy, Step, StepDecision, StepOptions, Wait

from dex_agents_ray.session._api import AgentSessionStartInput
from dex_agents_ray.session._records import sync_options
from dex_agents_ray.session._runner import ImageUserMessageBuilder
from dex_agents_ray.session._schema import (
    AGENT_MESSAGE_CHUNKS,
    AGENT_MESSAGES,
    AGENT_STATE,
    AGENT_TOOL_CALLS,
    AGENT_USAGE,
    PENDING_INTERRUPTS,
    QUEUED_USER_MESSAGES,
    SESSION_SETTINGS,
    TOOL_CALL_RESULTS,
    TURN_CANCELLATION_REQUEST,
    TURN_CONTROL_REQUESTS,
    Heartbeats,
    SessionConfig,
)
from dex_agents_ray.session._settings import (
    INVALID_START_SESSION_SETTINGS_REASON,
    session_settings_problem,
)
from dex_agents_ray.session._turns import (
    apply_outcome,
    begin_turn,
    fail_turn,
    turn_context,
    turn_records,
)
from dex_agents_ray.session._values import (
    AgentState,
    AgentStatus,
    AgentUsage,
    AgentUserMessage,
    FrameworkMessage,
    ToolCallCompleted,
)

__all__ = [
    "AwaitUserMessage",
    "RecordTurnFailure",
    "ResumeTurn",
    "RunModel",
    "StartAgentSession",
]

_TURN_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), backoff_coefficient=2.0, maximum_attempts=3
)


def _user_message(config: SessionConfig, message: AgentUserMessage) -> FrameworkMessage:
    """The runner's message for ``message``, with the session's copy of its images."""
    runner = config.runner
    if message.images:
        if not isinstance(runner, ImageUserMessageBuilder):
            raise TypeError("the runner cannot take images (no build_user_message_with_images)")
        built = runner.build_user_message_with_images(message.text, message.images)
    else:
        built = runner.build_user_message(message.text)
    if not isinstance(built, FrameworkMessage):
        raise TypeError(f"build_user_message returned a {type(built).__name__}")
    if message.images:
        built = replace(built, images=tuple(message.images))
    return built


class _TurnStep(Step[Any]):
    def __init__(self, config: SessionConfig) -> None:
        self.config = config


class StartAgentSession(_TurnStep):
    """Start Step: initializes state, usage and interrupts; starts the first turn."""

    def get_step_options(self) -> StepOptions | None:
        return sync_options(
            execute_retry=_TURN_RETRY, execute_load_attribute_maps=(AGENT_MESSAGES,)
        )

    async def execute(self, context: AsyncContext, input: AgentSessionStartInput) -> StepDecision:  # type: ignore[override]
        state = AGENT_STATE.get(context) or AgentState(status=AgentStatus.WAITING_FOR_USER_MESSAGE)
        AGENT_USAGE.set(context, AGENT_USAGE.get(context) or AgentUsage())
        problem = session_settings_problem(input.session_settings)
        if problem is not None:  # no retry can change the start input
            return dex.force_fail(f"{INVALID_START_SESSION_SETTINGS_REASON}: {problem}")
        PENDING_INTERRUPTS.set(context, [])
        SESSION_SETTINGS.set(context, dict(input.session_settings))
        text = input.initial_message
        if text is None or not text.strip():
            AGENT_STATE.set(context, state)
            return dex.go_to(AwaitUserMessage, None)
        message = AgentUserMessage(text=text, images=input.images)
        begin_turn(context, self.config, state, _user_message(self.config, message))
        return dex.go_to(RunModel, None)


class AwaitUserMessage(_TurnStep):
    """Waits for a queued user message and starts a turn with it."""

    def get_step_options(self) -> StepOptions | None:
        return sync_options(
            execute_retry=_TURN_RETRY,
            execute_load_attribute_maps=(AGENT_MESSAGES, AGENT_TOOL_CALLS),
            execute_lock_attributes=(TURN_CANCELLATION_REQUEST.lock(),),
        ).on_execute_failure_proceed_to(RecordTurnFailure)

    async def wait_for(self, context: AsyncContext, input: None) -> Wait:  # type: ignore[override]
        return Wait.any_of(TURN_CONTROL_REQUESTS.for_one(), QUEUED_USER_MESSAGES.for_one())

    async def execute(self, context: AsyncContext, input: None) -> StepDecision:  # type: ignore[override]
        state = AGENT_STATE.get(context)
        messages = list(QUEUED_USER_MESSAGES.results(context))
        if state is None or not messages:
            # A turn control request with nothing to steer (reserved for steering).
            return dex.go_to(AwaitUserMessage, None)
        if state.active_turn_id is not None:
            # A turn left active by an earlier failure; start over cleanly.
            state = replace(state, active_turn_id=None)
        begin_turn(context, self.config, state, _user_message(self.config, messages[0]))
        return dex.go_to(RunModel, None)


class RunModel(_TurnStep):
    """One model call: 15 min timeout, 2 min heartbeat timeout, 3 attempts in 30 min,
    failure route ``RecordTurnFailure``."""

    def get_step_options(self) -> StepOptions | None:
        limit = self.config.options.run_model_limit
        return sync_options(
            ray=self.config.options.model_ray_options,
            execute_method_timeout=limit.timeout,
            heartbeat_timeout=limit.heartbeat_timeout,
            execute_retry=RetryPolicy(
                initial_interval=timedelta(seconds=1),
                backoff_coefficient=2.0,
                maximum_attempts=limit.maximum_attempts,
                total_duration=limit.retry_budget,
            ),
            execute_load_attribute_maps=(AGENT_MESSAGES, AGENT_MESSAGE_CHUNKS, AGENT_TOOL_CALLS),
        ).on_execute_failure_proceed_to(RecordTurnFailure)

    async def execute(self, context: AsyncContext, input: None) -> StepDecision:  # type: ignore[override]
        config = self.config
        state = AGENT_STATE.get(context)
        if state is None or state.active_turn_id is None:
            return dex.go_to(AwaitUserMessage, None)
        if state.status is not AgentStatus.RUNNING_MODEL:
            state = replace(state, status=AgentStatus.RUNNING_MODEL)
        beats = Heartbeats(context, None)
        writer = config.event_writer(context, state.active_turn_id)
        turn = turn_context(context, config, state, writer, beats.beat)
        try:
            async with beats.running():
                outcome = await config.runner.run_model_step(turn)
        finally:
            writer.close()
        return apply_outcome(context, config, state, turn, outcome)


class ResumeTurn(Step[int]):
    """Waits for the results of the response's tool calls, then calls the model again."""

    def __init__(self, config: SessionConfig) -> None:
        self.config = config

    def get_step_options(self) -> StepOptions | None:
        return sync_options(
            execute_load_attribute_maps=(AGENT_TOOL_CALLS,),
            execute_lock_attributes=(PENDING_INTERRUPTS.lock(),),
        )

    async def wait_for(self, context: AsyncContext, input: int) -> Wait:  # type: ignore[override]
        return Wait.any_of(TOOL_CALL_RESULTS.for_n(input), TURN_CONTROL_REQUESTS.for_one())

    async def execute(self, context: AsyncContext, input: int) -> StepDecision:  # type: ignore[override]
        state = AGENT_STATE.get(context)
        if state is None or state.active_turn_id is None:
            return dex.dead_end()
        results: list[ToolCallCompleted] = list(TOOL_CALL_RESULTS.results(context))
        ours = sum(1 for result in results if result.turn_id == state.active_turn_id)
        unfinished = sum(1 for record in turn_records(context) if not record.is_final)
        remaining = max(input - ours, unfinished)
        if remaining > 0:
            return dex.go_to(ResumeTurn, remaining)
        AGENT_STATE.set(context, replace(state, status=AgentStatus.RUNNING_MODEL))
        return dex.go_to(RunModel, None)


class RecordTurnFailure(_TurnStep):
    """``RunModel``'s failure route: records ``last_turn_error`` and ends the turn."""

    def get_step_options(self) -> StepOptions | None:
        return sync_options(
            execute_retry=_TURN_RETRY,
            execute_load_attribute_maps=(AGENT_MESSAGES, AGENT_MESSAGE_CHUNKS, AGENT_TOOL_CALLS),
        )

    async def execute(self, context: AsyncContext, input: None) -> StepDecision:  # type: ignore[override]
        config = self.config
        state = AGENT_STATE.get(context)
        if state is None:
            state = AgentState(status=AgentStatus.WAITING_FOR_USER_MESSAGE)
        error = _failure_text(context)
        turn = None
        if state.active_turn_id is not None:
            writer = config.event_writer(context, state.active_turn_id)
            writer.close()
            turn = turn_context(context, config, state, writer, Heartbeats(context, None).beat)
        return fail_turn(context, config, state, error, turn)


def _failure_text(context: Context) -> str:
    error = context.recovery_error
    if error is None:
        return "the turn failed"
    detail = error.detail or "the turn failed"
    return f"{error.error_type}: {detail}" if error.error_type else detail
