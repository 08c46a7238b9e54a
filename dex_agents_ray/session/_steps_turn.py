"""The turn Steps: ``StartAgentSession``, ``AwaitUserMessage``, ``RunModel``,
``ResumeTurn``, ``ApplyTurnControl``, ``RecordTurnFailure`` and
``FinishTurnCancellation``. They run in the session's host.

Turn control (the spec's "Steering and turn cancellation"): a steer ends the turn
at its next safe boundary (``RunModel`` before a model call, ``ResumeTurn`` once
the calls that had started have their results); ``cancel_turn`` cancels the model
call and the waiting Steps at once and starts ``FinishTurnCancellation``. Both
end in ``ApplyTurnControl``, whose input is the turn it ends (``""`` when
``AwaitUserMessage`` woke for steered messages with no turn active; the spec's
table gives it no input, but a route that comes second must find the turn
ended and do nothing).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any, cast

import dex
from dex import AsyncContext, Context, RetryPolicy, Step, StepDecision, StepOptions, Wait

from dex_agents_ray.engine import effect_free
from dex_agents_ray.session._api import AgentEventType, AgentSessionStartInput
from dex_agents_ray.session._compaction import (
    CompactContextInput,
    ContextCompactionRunner,
    ContextSummaryRequest,
    ContextSummaryResult,
)
from dex_agents_ray.session._config import Heartbeats, SessionConfig
from dex_agents_ray.session._control import cancelled, control_reason, steered, wake_waiting_calls
from dex_agents_ray.session._messages import apply_retention
from dex_agents_ray.session._movements import (
    cancel_task_movement,
    model_movement,
    model_step_options,
    question_movement,
    run_model_movement,
    timer_movement,
)
from dex_agents_ray.session._policy import (
    TOOL_CALL_NOT_RUN_ERROR_PREFIX,
    TOOL_CALL_SKIPPED_AFTER_WRITE_DETAIL,
)
from dex_agents_ray.session._records import finish_record, sync_options
from dex_agents_ray.session._runner import (
    AgentTurnContext,
    ImageUserMessageBuilder,
    implements,
    plan_execution_message,
)
from dex_agents_ray.session._schema import (
    AGENT_MESSAGE_CHUNKS,
    AGENT_MESSAGE_INDEX,
    AGENT_MESSAGES,
    AGENT_PLAN,
    AGENT_STATE,
    AGENT_TOOL_CALLS,
    AGENT_USAGE,
    CONTEXT_SUMMARY,
    INTERRUPT_RESOLUTIONS,
    PENDING_INTERRUPTS,
    PENDING_PLAN_EXECUTION,
    PLAN_EXECUTIONS,
    QUEUED_USER_MESSAGES,
    SESSION_SETTINGS,
    STEERED_USER_MESSAGES,
    TOOL_CALL_RESULTS,
    TURN_CANCELLATION_REQUEST,
    TURN_CONTROL_REQUESTS,
    plan_execution_key,
)
from dex_agents_ray.session._settings import (
    INVALID_START_SESSION_SETTINGS_REASON,
    session_settings_problem,
)
from dex_agents_ray.session._spend import (
    SPEND_LIMIT_REFUSED_PREFIX,
    ModelCallPurpose,
    ModelSpendDecision,
    ModelSpendRequest,
)
from dex_agents_ray.session._step_table import session_step
from dex_agents_ray.session._tool_requests import start_queued_write
from dex_agents_ray.session._turns import (
    apply_outcome,
    begin_turn,
    end_controlled_turn,
    fail_turn,
    planning_mode,
    record_usage,
    turn_context,
    turn_records,
)
from dex_agents_ray.session._values import (
    AgentPlan,
    AgentState,
    AgentStatus,
    AgentToolCall,
    AgentToolCallStatus,
    AgentUsage,
    AgentUserMessage,
    CancellationReason,
    ContextSummary,
    FrameworkMessage,
    InteractionMode,
    InterruptKind,
    PlanStatus,
    ToolCallCompleted,
    utc_now,
)
from dex_agents_ray.session.tracing._decorators import activation_step, model_step
from dex_agents_ray.session.tracing._notes import note_model_result

logger = logging.getLogger("dex_agents_ray.session")

__all__ = [
    "ApplyTurnControl",
    "AwaitUserMessage",
    "CompactContext",
    "FinishTurnCancellation",
    "RecordTurnFailure",
    "ResumeTurn",
    "RunModel",
    "StartAgentSession",
]

NO_TURN = ""
"""``ApplyTurnControl``'s input when no turn was active."""
_TURN_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), backoff_coefficient=2.0, maximum_attempts=3
)


async def _user_messages(
    config: SessionConfig, messages: Sequence[AgentUserMessage]
) -> list[FrameworkMessage]:
    """The runner's messages for ``messages``, built in a thread: the builders are
    synchronous runner code, and the host's event loop serves every session it
    holds (their RPCs, a snapshot read included) while one of them builds."""
    return await asyncio.to_thread(lambda: [_user_message(config, m) for m in messages])


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


@session_step
class StartAgentSession(_TurnStep):
    """Start Step: initializes state, usage and interrupts; starts the first turn."""

    def get_step_options(self) -> StepOptions | None:
        return sync_options(
            execute_retry=_TURN_RETRY, execute_load_attribute_maps=(AGENT_MESSAGES,)
        )

    @activation_step
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
        begin_turn(context, self.config, state, await _user_messages(self.config, [message]))
        return dex.go_to_many(run_model_movement(context, self.config))


@session_step
@effect_free
class AwaitUserMessage(_TurnStep):
    """Waits for, in this order, a steer, a queued user message, and (while the plan
    is ``draft`` or ``active``) the approval of its current revision; starts a
    ``chat`` or ``planning`` turn with the message, or an ``executing`` turn."""

    def get_step_options(self) -> StepOptions | None:
        return sync_options(
            execute_retry=_TURN_RETRY,
            execute_load_attribute_maps=(AGENT_MESSAGES, AGENT_TOOL_CALLS),
            execute_lock_attributes=(
                TURN_CANCELLATION_REQUEST.lock(),
                PENDING_PLAN_EXECUTION.lock(),
            ),
        ).on_execute_failure_proceed_to(RecordTurnFailure)

    async def wait_for(self, context: AsyncContext, input: None) -> Wait:  # type: ignore[override]
        conditions = [TURN_CONTROL_REQUESTS.for_one(), QUEUED_USER_MESSAGES.for_one()]
        plan = _executable_plan(context)
        if plan is not None:
            conditions.append(PLAN_EXECUTIONS.for_one(plan_execution_key(plan.revision)))
        return Wait.any_of(*conditions)

    @activation_step
    async def execute(self, context: AsyncContext, input: None) -> StepDecision:  # type: ignore[override]
        state = AGENT_STATE.get(context)
        if list(TURN_CONTROL_REQUESTS.results(context)) or steered(context):
            # A steer that came when no turn was left to apply it to.
            return dex.go_to(ApplyTurnControl, NO_TURN)
        messages = list(QUEUED_USER_MESSAGES.results(context))
        if state is None:
            return dex.go_to(AwaitUserMessage, None)
        if state.active_turn_id is not None:
            # A turn left active by an earlier failure; start over cleanly.
            state = replace(state, active_turn_id=None)
        if messages:
            mode = planning_mode(context, messages[:1])
            built = await _user_messages(self.config, messages[:1])
            begin_turn(context, self.config, state, built, mode=mode)
            return dex.go_to_many(run_model_movement(context, self.config))
        plan = _executable_plan(context)
        approvals = (
            list(PLAN_EXECUTIONS.results(context, plan_execution_key(plan.revision)))
            if plan is not None
            else []
        )
        if plan is None or not approvals:
            return dex.go_to(AwaitUserMessage, None)  # a stale wake
        self._execute_plan(context, state, plan)
        return dex.go_to_many(run_model_movement(context, self.config))

    def _execute_plan(self, context: Context, state: AgentState, plan: AgentPlan) -> None:
        """Start the ``executing`` turn of an approved plan revision."""
        config = self.config
        PENDING_PLAN_EXECUTION.delete(context)
        turn_id = f"turn-{state.turn_count + 1}"
        if plan.status is PlanStatus.DRAFT:
            plan = replace(plan, status=PlanStatus.ACTIVE)
            AGENT_PLAN.set(context, plan)
            config.emit(
                context,
                AgentEventType.PLAN_UPDATED,
                {"revision": plan.revision, "status": plan.status, "task_count": len(plan.todos)},
                turn_id=turn_id,
            )
        config.emit(
            context,
            AgentEventType.PLAN_EXECUTION_STARTED,
            {"revision": plan.revision},
            turn_id=turn_id,
        )
        message = config.runner.build_user_message(plan_execution_message(plan.revision))
        if not isinstance(message, FrameworkMessage):
            raise TypeError(f"build_user_message returned a {type(message).__name__}")
        begin_turn(context, config, state, message, mode=InteractionMode.EXECUTING)


@session_step
class RunModel(_TurnStep):
    """One model call: 15 min timeout, 2 min heartbeat timeout, 3 attempts in 30 min,
    failure route ``RecordTurnFailure``."""

    def get_step_options(self) -> StepOptions | None:
        return model_step_options(self.config)

    @model_step
    async def execute(self, context: AsyncContext, input: None) -> StepDecision:  # type: ignore[override]
        config = self.config
        state = AGENT_STATE.get(context)
        if state is None or state.active_turn_id is None:
            return dex.go_to(AwaitUserMessage, None)
        if cancelled(context, state.active_turn_id):
            return dex.dead_end()  # FinishTurnCancellation ends the turn
        if steered(context):
            return dex.go_to(ApplyTurnControl, state.active_turn_id)
        records = turn_records(context)
        queued = _queued_writes(records)
        if queued:
            return _next_queued_write(context, config, state, queued)
        if state.status is not AgentStatus.RUNNING_MODEL:
            state = replace(state, status=AgentStatus.RUNNING_MODEL)
        beats = Heartbeats(context, None)
        writer = config.event_writer(context, state.active_turn_id)
        turn = turn_context(context, config, state, writer, beats.beat, records)
        try:
            cutoff = await _compaction_cutoff(context, config, turn)
            if cutoff is not None:
                AGENT_STATE.set(context, replace(state, status=AgentStatus.COMPACTING_CONTEXT))
                through = CompactContextInput(through_sequence=cutoff)
                return dex.go_to_many(model_movement(context, config, CompactContext, through))
            async with beats.running():
                spend = _spend_request(context, config, turn, ModelCallPurpose.MODEL_CALL)
                refused = await _reserve(config, spend)
                if refused is not None:
                    return fail_turn(context, config, state, refused, turn)
                try:
                    outcome = await config.runner.run_model_step(turn)
                except Exception as error:
                    await _record_failure(config, spend, error)
                    raise
                note_model_result(outcome)
                await _record_spend(config, spend, getattr(outcome, "usage", None))
        finally:
            writer.close()
        return apply_outcome(context, config, state, turn, outcome)


@session_step
class CompactContext(Step[CompactContextInput]):
    """Calls ``summarize_context`` once and stores ``ContextSummary``, then goes back
    to ``RunModel``; ``RunModel``'s timeouts, attempts and failure route. A crash
    reruns only the summary call."""

    def __init__(self, config: SessionConfig) -> None:
        self.config = config

    def get_step_options(self) -> StepOptions | None:
        return model_step_options(self.config)

    @model_step
    async def execute(self, context: AsyncContext, input: CompactContextInput) -> StepDecision:  # type: ignore[override]
        config = self.config
        state = AGENT_STATE.get(context)
        policy = config.options.compaction
        runner = config.runner
        if state is None or state.active_turn_id is None:
            return dex.go_to(AwaitUserMessage, None)
        if cancelled(context, state.active_turn_id):
            return dex.dead_end()  # FinishTurnCancellation ends the turn
        previous = CONTEXT_SUMMARY.get(context)
        done = previous.last_sequence if previous is not None else 0
        if policy is None or not isinstance(runner, ContextCompactionRunner):
            raise TypeError("CompactContext needs a compaction policy and runner")
        if input.through_sequence > done:
            beats = Heartbeats(context, None)
            writer = config.event_writer(context, state.active_turn_id)
            turn = turn_context(context, config, state, writer, beats.beat)
            messages = [m for m in turn.messages if m.sequence <= input.through_sequence]
            request = ContextSummaryRequest(
                flow_id=context.flow_id,
                turn_id=state.active_turn_id,
                attempt=context.attempt,
                previous_summary=previous,
                messages=tuple(messages),
                through_sequence=input.through_sequence,
                input_token_budget=policy.context_window_tokens,
                session_settings=turn.session_settings,
                events=writer,
                heartbeat=beats.beat,
            )
            config.emit(
                context,
                AgentEventType.COMPACTION_STARTED,
                {"through_sequence": input.through_sequence},
                turn_id=state.active_turn_id,
            )
            try:
                async with beats.running():
                    spend = _spend_request(context, config, turn, ModelCallPurpose.CONTEXT_SUMMARY)
                    refused = await _reserve(config, spend)
                    if refused is not None:
                        return fail_turn(context, config, state, refused, turn)
                    try:
                        result = await runner.summarize_context(request)
                    except Exception as error:
                        await _record_failure(config, spend, error)
                        raise
                    note_model_result(result)
                    await _record_spend(config, spend, getattr(result, "usage", None))
            finally:
                writer.close()
            if not isinstance(result, ContextSummaryResult):
                raise TypeError(f"summarize_context returned {type(result).__name__}")
            if not isinstance(result.text, str) or not result.text.strip():
                raise ValueError("ContextSummaryResult.text must be a non-blank str")
            generation = (previous.generation if previous is not None else 0) + 1
            CONTEXT_SUMMARY.set(
                context,
                ContextSummary(
                    generation=generation,
                    first_sequence=1,
                    last_sequence=input.through_sequence,
                    text=result.text,
                ),
            )
            record_usage(context, config, state, result.usage)
            config.emit(
                context,
                AgentEventType.COMPACTION_FINISHED,
                {"generation": generation, "through_sequence": input.through_sequence},
                turn_id=state.active_turn_id,
            )
            apply_retention(context, config.options, state.last_sequence)
        AGENT_STATE.set(context, replace(state, status=AgentStatus.RUNNING_MODEL))
        return dex.go_to_many(run_model_movement(context, self.config))


@session_step
@effect_free
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
        turn_id = state.active_turn_id
        records = turn_records(context)
        reason = control_reason(context, turn_id)
        if reason is CancellationReason.STEERED:
            # Steering ends the turn's waits for a person or for time now; calls
            # that started run to their end. (A cancel's waits were cancelled.)
            wake_waiting_calls(context, records, reason)
        results: list[ToolCallCompleted] = list(TOOL_CALL_RESULTS.results(context))
        ours = sum(1 for result in results if result.turn_id == turn_id)
        unfinished = sum(1 for r in records if not r.is_final and not r.write_queued)
        remaining = max(input - ours, unfinished)
        if remaining > 0:
            return dex.go_to(ResumeTurn, remaining)
        if reason is not None:
            return dex.go_to(ApplyTurnControl, turn_id)
        AGENT_STATE.set(context, replace(state, status=AgentStatus.RUNNING_MODEL))
        return dex.go_to_many(run_model_movement(context, self.config))


@session_step
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


@session_step
class ApplyTurnControl(Step[str]):
    """Ends a steered or cancelled turn and starts the next one with every steered
    message, in order; consumes every steered message and stale wake.

    The input is the turn to end (``NO_TURN``: no turn was active); a turn that
    has ended already, or another turn, is left alone.
    """

    def __init__(self, config: SessionConfig) -> None:
        self.config = config

    def get_step_options(self) -> StepOptions | None:
        return sync_options(
            execute_retry=_TURN_RETRY,
            execute_load_attribute_maps=(AGENT_MESSAGES, AGENT_MESSAGE_CHUNKS, AGENT_TOOL_CALLS),
            execute_load_channels=(STEERED_USER_MESSAGES, TURN_CONTROL_REQUESTS),
            execute_lock_attributes=(TURN_CANCELLATION_REQUEST.lock(),),
        )

    @activation_step
    async def execute(self, context: AsyncContext, input: str) -> StepDecision:  # type: ignore[override]
        config = self.config
        state = AGENT_STATE.get(context)
        if state is None:
            return dex.dead_end()
        if input != NO_TURN and state.active_turn_id != input:
            return dex.dead_end()  # the other route ended it first
        if input == NO_TURN and state.active_turn_id is not None:
            return dex.dead_end()  # a turn started meanwhile: its own Steps apply the steer
        for wake in TURN_CONTROL_REQUESTS.pending_messages(context):
            TURN_CONTROL_REQUESTS.delete(context, wake.message_id)
        steering = list(STEERED_USER_MESSAGES.pending_messages(context))
        for entry in steering:
            STEERED_USER_MESSAGES.delete(context, entry.message_id)
        if input != NO_TURN:
            reason = (
                CancellationReason.TURN_CANCELLED
                if cancelled(context, input)
                else CancellationReason.STEERED
            )
            for record in _queued_writes(turn_records(context)):
                finish_record(
                    context,
                    config,
                    record,
                    AgentToolCallStatus.REJECTED,
                    cancellation_reason=reason,
                    write_queued=False,
                )
            writer = config.event_writer(context, input)
            writer.close()
            turn = turn_context(context, config, state, writer, Heartbeats(context, None).beat)
            state = end_controlled_turn(
                context,
                config,
                state,
                turn,
                cancelled=cancelled(context, input),
                steered_count=len(steering),
            )
        if not steering:
            return dex.go_to(AwaitUserMessage, None)
        messages = await _user_messages(config, [entry.value for entry in steering])
        mode = planning_mode(context, [entry.value for entry in steering])
        begin_turn(context, config, state, messages, mode=mode)
        return dex.go_to_many(run_model_movement(context, self.config))


@session_step
class FinishTurnCancellation(Step[str]):
    """What ``cancel_turn`` starts: ends a turn whose model call it cancelled, or
    settles each call whose wait it cancelled, and hands started tasks to
    ``CancelToolTask``; ``ResumeTurn`` then ends the turn."""

    def __init__(self, config: SessionConfig) -> None:
        self.config = config

    def get_step_options(self) -> StepOptions | None:
        return sync_options(
            execute_retry=_TURN_RETRY,
            execute_load_attribute_maps=(AGENT_TOOL_CALLS,),
            execute_lock_attributes=(TURN_CANCELLATION_REQUEST.lock(), PENDING_INTERRUPTS.lock()),
        )

    async def execute(self, context: AsyncContext, input: str) -> StepDecision:  # type: ignore[override]
        state = AGENT_STATE.get(context)
        if state is None or state.active_turn_id != input:
            return dex.dead_end()
        if state.status is not AgentStatus.RUNNING_TOOLS:
            # The model call (or compaction) was cancelled: nothing else runs.
            return dex.go_to(ApplyTurnControl, input)
        movements: list[Any] = []
        for record in turn_records(context):
            if not record.is_final:
                movement = self._settle(context, record)
                if movement is not None:
                    movements.append(movement)
        return dex.go_to_many(*movements) if movements else dex.dead_end()

    def _settle(self, context: Context, record: AgentToolCall) -> Any:
        """Record one call whose wait ``cancel_turn`` cancelled; a movement where its
        own Step must finish it (a started task, an answer or Timer that came first)."""
        config, status = self.config, record.status
        if record.write_queued:
            finish_record(
                context,
                config,
                record,
                AgentToolCallStatus.REJECTED,
                cancellation_reason=CancellationReason.TURN_CANCELLED,
                write_queued=False,
            )
            return None
        if status is AgentToolCallStatus.WAITING_FOR_TASK or (
            status is AgentToolCallStatus.AWAITING_ANSWER and record.task_id is not None
        ):
            return cancel_task_movement(record.tool_call_id)
        if status is AgentToolCallStatus.AWAITING_ANSWER:
            interrupt_id = record.interrupt_id
            if (
                interrupt_id is not None
                and record.built_in_tool is not None
                and INTERRUPT_RESOLUTIONS.size(context, interrupt_id) > 0
            ):
                return question_movement(record.tool_call_id)  # the answer came first
        elif status is AgentToolCallStatus.WAITING_FOR_TIMER:
            if record.wait_until is not None and record.wait_until <= utc_now():
                return timer_movement(record.tool_call_id)  # the Timer fired first
        elif status is not AgentToolCallStatus.AWAITING_APPROVAL:
            return None  # its tool Step runs to its end, or records it cancelled
        if record.interrupt_id is not None and status is not AgentToolCallStatus.WAITING_FOR_TIMER:
            kind = (
                InterruptKind.APPROVAL
                if status is AgentToolCallStatus.AWAITING_APPROVAL
                else InterruptKind.QUESTION
            )
            config.emit(
                context,
                AgentEventType.INTERRUPT_RESOLVED,
                {
                    "interrupt_id": record.interrupt_id,
                    "approved": False,
                    "rejection_message": None,
                    "kind": kind,
                    "answered": False,
                    "cancellation_reason": CancellationReason.TURN_CANCELLED,
                },
                turn_id=record.turn_id,
            )
        finish_record(
            context,
            config,
            record,
            AgentToolCallStatus.REJECTED,
            cancellation_reason=CancellationReason.TURN_CANCELLED,
        )
        return None


def _spend_request(
    context: Context, config: SessionConfig, turn: AgentTurnContext, purpose: ModelCallPurpose
) -> ModelSpendRequest | None:
    if config.options.spend_limit is None:
        return None
    return ModelSpendRequest(
        flow_id=context.flow_id,
        turn_id=turn.turn_id,
        step_execution_id=context.step_execution_id,
        attempt=context.attempt,
        purpose=purpose,
        session_settings=dict(turn.session_settings),
    )


async def _reserve(config: SessionConfig, request: ModelSpendRequest | None) -> str | None:
    """``None`` when the call may go ahead; else the turn's ``last_turn_error``."""
    limit = config.options.spend_limit
    if limit is None or request is None:
        return None
    decision = await limit.reserve(request)
    if not isinstance(decision, ModelSpendDecision):
        raise TypeError(f"ModelSpendLimit.reserve returned {type(decision).__name__}")
    if decision.allowed:
        return None
    return f"{SPEND_LIMIT_REFUSED_PREFIX}: {decision.reason or 'no reason given'}"


async def _record_spend(
    config: SessionConfig, request: ModelSpendRequest | None, usage: object
) -> None:
    limit = config.options.spend_limit
    if limit is None or request is None or not isinstance(usage, AgentUsage):
        return
    try:
        await limit.record(request, usage)
    except Exception:  # the call happened: a lost count must not fail the Step
        logger.warning(
            "session %s: the spend limit's record failed", request.flow_id, exc_info=True
        )


async def _record_failure(
    config: SessionConfig, request: ModelSpendRequest | None, error: Exception
) -> None:
    """Tell the spend limit the call it allowed raised (``record_failure``, optional)."""
    limit = config.options.spend_limit
    hear = getattr(limit, "record_failure", None)
    if request is None or hear is None:
        return
    try:
        await hear(request, error)
    except Exception:  # the call's own error is what the attempt reports
        logger.warning(
            "session %s: the spend limit's record_failure failed", request.flow_id, exc_info=True
        )


async def _compaction_cutoff(
    context: Context, config: SessionConfig, turn: AgentTurnContext
) -> int | None:
    """The sequence to summarize through before this model call, or ``None``."""
    policy = config.options.compaction
    if not implements(config.runner, ContextCompactionRunner):
        index = AGENT_MESSAGE_INDEX.get(context)
        if index is not None and index.deleted_before_sequence is not None:
            logger.warning(
                "session %s: messages before %d were deleted, and the runner cannot "
                "compact: its input starts after them with no summary",
                context.flow_id,
                index.deleted_before_sequence,
            )
        return None
    if policy is None:
        return None
    runner = cast(ContextCompactionRunner, config.runner)
    estimate = runner.estimate_input_tokens(turn)
    tokens = await estimate if inspect.isawaitable(estimate) else estimate
    if not isinstance(tokens, int) or tokens + policy.reserved_input_tokens < policy.trigger_tokens:
        return None
    cutoff = runner.select_compaction_cutoff(turn, policy.retained_token_budget)
    done = turn.context_summary.last_sequence if turn.context_summary is not None else 0
    if cutoff is None or cutoff <= done:
        return None  # a second high estimate with no new cutoff: call the model
    return min(cutoff, max((m.sequence for m in turn.messages), default=cutoff))


def _queued_writes(records: list[AgentToolCall]) -> list[AgentToolCall]:
    """The turn's ordered writes that wait for the one before them, in model order."""
    return [r for r in records if r.write_queued and not r.is_final]


def _next_queued_write(
    context: Context, config: SessionConfig, state: AgentState, queued: list[AgentToolCall]
) -> StepDecision:
    """Before any model call: start the next queued ordered write, or, once the write
    before it did not succeed, skip every queued one (``failed``, ``skipped``)."""
    first = queued[0]
    earlier = [
        r
        for r in turn_records(context)
        if r.ordered and not r.write_queued and r.deferral_order < first.deferral_order
    ]
    previous = max(earlier, key=lambda r: r.deferral_order, default=None)
    AGENT_STATE.set(context, replace(state, status=AgentStatus.RUNNING_TOOLS))
    if previous is not None and previous.status is not AgentToolCallStatus.SUCCEEDED:
        for record in queued:
            finish_record(
                context,
                config,
                record,
                AgentToolCallStatus.FAILED,
                error=f"{TOOL_CALL_NOT_RUN_ERROR_PREFIX}: {TOOL_CALL_SKIPPED_AFTER_WRITE_DETAIL}",
                skipped=True,
                write_queued=False,
            )
        return dex.go_to(ResumeTurn, len(queued))
    movement = start_queued_write(context, config, first, utc_now())
    return dex.go_to_many(movement, dex.StepMovement.of(ResumeTurn, 1))


def _executable_plan(context: Context) -> AgentPlan | None:
    """The plan while it is ``draft`` or ``active`` (one ``execute_plan`` can run)."""
    plan: AgentPlan | None = AGENT_PLAN.get(context)
    if plan is None or plan.status not in (PlanStatus.DRAFT, PlanStatus.ACTIVE):
        return None
    return plan


def _failure_text(context: Context) -> str:
    error = context.recovery_error
    if error is None:
        return "the turn failed"
    detail = error.detail or "the turn failed"
    return f"{error.error_type}: {detail}" if error.error_type else detail
