"""``AgentSessionFlow``: one durable Flow run per agent session."""

from __future__ import annotations

from typing import Any

from dex import Context, Flow, PersistenceSchema, RPCResult, StepList, StepMovement, Stream, rpc

from dex_agents_ray.session import _rpcs
from dex_agents_ray.session._api import (
    AgentEvent,
    AgentMessagesPage,
    AgentSessionOptions,
    AgentSessionStartInput,
    AgentSnapshot,
    AnswerQuestionRequest,
    CancelTurnRequest,
    DeleteQueuedMessageRequest,
    ExecutePlanRequest,
    ListAgentMessagesRequest,
    ResolveInterruptRequest,
    SteerUserMessageRequest,
    UpdateSessionSettingsRequest,
)
from dex_agents_ray.session._compaction import ContextCompactionRunner
from dex_agents_ray.session._config import SessionConfig
from dex_agents_ray.session._runner import AgentFrameworkRunner, PlanModeRunner
from dex_agents_ray.session._schema import (
    AGENT_EVENTS_STREAM_NAME,
    AGENT_MESSAGE_CHUNKS,
    AGENT_MESSAGES,
    AGENT_TOOL_CALLS,
    PENDING_INTERRUPTS,
    PENDING_PLAN_EXECUTION,
    QUEUED_USER_MESSAGES,
    SHARED_PERSISTENCE,
    STEERED_USER_MESSAGES,
    TURN_CANCELLATION_REQUEST,
)
from dex_agents_ray.session._steps_tools import (
    CallSingleAttemptTool,
    CallTool,
    CancelToolTask,
    PollToolTask,
    RecordToolFailure,
    RecordToolOutcomeUnknown,
)
from dex_agents_ray.session._steps_turn import (
    ApplyTurnControl,
    AwaitUserMessage,
    CompactContext,
    FinishTurnCancellation,
    RecordTurnFailure,
    ResumeTurn,
    RunModel,
    StartAgentSession,
)
from dex_agents_ray.session._steps_wait import AwaitQuestionAnswer, AwaitTimer, AwaitToolApproval
from dex_agents_ray.session._values import AgentUserMessage

__all__ = ["AgentSessionFlow"]


class AgentSessionFlow(Flow[AgentSessionStartInput]):
    """The durable agent session Flow: one run per session, the Flow ID is the session ID.

    Every model call is one ``RunModel`` Step and every tool call its own Step,
    so a crash repeats at most the one call that was running. Register one per
    agent, each with its own ``flow_type``; all Steps are ``async``, so a
    ``dex.Registry`` needs ``allow_async_handlers=True``.

    Args:
        runner: The adapter; it is pickled with the Flow, so it must hold only
            what a Ray worker can rebuild (no open connections).
        flow_type: The Flow type (one per agent).
        options: Tool policies, built-in tools, deadlines and placement.

    Raises:
        TypeError: ``runner`` lacks a method of ``AgentFrameworkRunner``, or
            ``options.plan_mode_enabled`` with a runner that is not a ``PlanModeRunner``.
        ValueError: ``flow_type`` is blank.
    """

    def __init__(
        self,
        runner: AgentFrameworkRunner[Any],
        *,
        flow_type: str,
        options: AgentSessionOptions | None = None,
    ) -> None:
        if not isinstance(flow_type, str) or not flow_type.strip() or "/" in flow_type:
            raise ValueError(f"flow_type must be a non-empty name without '/', got {flow_type!r}")
        if not isinstance(runner, AgentFrameworkRunner):
            raise TypeError(
                f"runner {type(runner).__name__} does not implement AgentFrameworkRunner "
                "(build_user_message, run_model_step, execute_deferred_tool_call)"
            )
        options = options or AgentSessionOptions()
        if not isinstance(options, AgentSessionOptions):
            raise TypeError("options must be an AgentSessionOptions")
        if options.compaction is not None and not isinstance(runner, ContextCompactionRunner):
            raise TypeError(
                f"AgentSessionOptions.compaction needs a ContextCompactionRunner "
                f"(estimate_input_tokens, select_compaction_cutoff, summarize_context); "
                f"{type(runner).__name__} is not one"
            )
        if options.plan_mode_enabled and not (
            isinstance(runner, PlanModeRunner) and runner.supports_plan_mode is True
        ):
            raise TypeError(
                f"plan_mode_enabled needs a PlanModeRunner (supports_plan_mode is True); "
                f"{type(runner).__name__} is not one"
            )
        self.agent_events: Stream[AgentEvent] = Stream(
            AGENT_EVENTS_STREAM_NAME, AgentEvent, options.event_stream_capacity_bytes
        )
        self.config = SessionConfig(
            flow_type=flow_type, runner=runner, options=options, events=self.agent_events
        )
        config = self.config
        self._steps: StepList[AgentSessionStartInput] = StepList.start_step(
            StartAgentSession(config)
        ).other_steps(
            AwaitUserMessage(config),
            RunModel(config),
            CompactContext(config),
            AwaitToolApproval(config),
            AwaitQuestionAnswer(config),
            AwaitTimer(config),
            CallTool(config),
            CallSingleAttemptTool(config),
            PollToolTask(config),
            RecordToolFailure(config),
            RecordToolOutcomeUnknown(config),
            ResumeTurn(config),
            ApplyTurnControl(config),
            RecordTurnFailure(config),
            FinishTurnCancellation(config),
            CancelToolTask(config),
        )

    @property
    def runner(self) -> AgentFrameworkRunner[Any]:
        """The adapter."""
        return self.config.runner

    @property
    def options(self) -> AgentSessionOptions:
        """The session options."""
        return self.config.options

    def get_flow_type(self) -> str:
        return self.config.flow_type

    def get_steps(self) -> StepList[AgentSessionStartInput]:
        return self._steps

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(*SHARED_PERSISTENCE, self.agent_events)

    @rpc(is_transactional=True)
    def send_user_message(self, context: Context, input: AgentUserMessage) -> RPCResult[bool]:
        """Queue a user message; ``False`` for blank text (see the spec's RPC table)."""
        return RPCResult(_rpcs.send_user_message(context, self.config, input))

    @rpc(is_transactional=True, load_channels=(QUEUED_USER_MESSAGES,))
    def steer_user_message(
        self, context: Context, input: SteerUserMessageRequest
    ) -> RPCResult[bool]:
        """Steer the running turn with a queued message (by ID) or new text; with no
        turn active, ``text`` is queued. ``False`` for bad input or a message no
        longer queued; ``ChannelMessageNotFoundError`` when it was consumed meanwhile."""
        return RPCResult(_rpcs.steer_user_message(context, self.config, input))

    @rpc(is_transactional=True, load_channels=(QUEUED_USER_MESSAGES,))
    def delete_queued_message(
        self, context: Context, input: DeleteQueuedMessageRequest
    ) -> RPCResult[bool]:
        """Delete a queued message; ``False`` for one no longer queued."""
        return RPCResult(_rpcs.delete_queued_message(context, input))

    @rpc(lock_attributes=(PENDING_PLAN_EXECUTION.lock(),))
    def execute_plan(self, context: Context, input: ExecutePlanRequest) -> RPCResult[bool]:
        """Approve a reviewed plan revision; the session starts an ``executing`` turn."""
        return RPCResult(_rpcs.execute_plan(context, input))

    @rpc(lock_attributes=(TURN_CANCELLATION_REQUEST.lock(), PENDING_INTERRUPTS.lock()))
    def cancel_turn(self, context: Context, input: CancelTurnRequest) -> RPCResult[bool]:
        """Stop the active turn now: its model call and waiting Steps are cancelled and
        ``FinishTurnCancellation`` ends it. ``False`` when no turn is active,
        ``turn_id`` names another turn, or the turn does not accept cancellation."""
        result, started = _rpcs.cancel_turn(context, input)
        if not started:
            return RPCResult(result)
        finish = StepMovement.of(FinishTurnCancellation, input.turn_id)
        return RPCResult(result, next_steps=(finish,)).with_canceling_steps(
            RunModel,
            CompactContext,
            AwaitToolApproval,
            AwaitQuestionAnswer,
            AwaitTimer,
            PollToolTask,
        )

    @rpc(is_transactional=True)
    def update_session_settings(
        self, context: Context, input: UpdateSessionSettingsRequest
    ) -> RPCResult[bool]:
        """Replace the session's settings (``{}`` clears them); they apply from the
        next turn. ``False`` before the session initialized, or for settings it refuses."""
        return RPCResult(_rpcs.update_session_settings(context, input))

    @rpc(lock_attributes=(PENDING_INTERRUPTS.lock(),))
    def resolve_interrupt(
        self, context: Context, input: ResolveInterruptRequest
    ) -> RPCResult[bool]:
        """Approve or reject a pending approval, or decline a question."""
        return RPCResult(_rpcs.resolve_interrupt(context, input))

    @rpc(lock_attributes=(PENDING_INTERRUPTS.lock(),))
    def answer_question(self, context: Context, input: AnswerQuestionRequest) -> RPCResult[bool]:
        """Answer a pending question."""
        return RPCResult(_rpcs.answer_question(context, input))

    @rpc(
        load_attribute_maps=(AGENT_MESSAGES, AGENT_MESSAGE_CHUNKS, AGENT_TOOL_CALLS),
        load_channels=(QUEUED_USER_MESSAGES, STEERED_USER_MESSAGES),
    )
    def get_agent_snapshot(self, context: Context) -> RPCResult[AgentSnapshot]:
        """The session as committed."""
        return RPCResult(_rpcs.get_agent_snapshot(context))

    @rpc(load_attribute_maps=(AGENT_MESSAGES, AGENT_MESSAGE_CHUNKS))
    def list_agent_messages(
        self, context: Context, input: ListAgentMessagesRequest
    ) -> RPCResult[AgentMessagesPage]:
        """A page of stored messages, oldest first."""
        return RPCResult(_rpcs.list_agent_messages(context, input))
