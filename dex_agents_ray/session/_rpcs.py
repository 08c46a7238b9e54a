"""What the session's RPCs do. Each returns its output; the Flow wraps it.

``resolve_interrupt`` and ``answer_question`` lock ``PendingInterrupts``: they
remove the interrupt and publish the decision in one commit, so a decision is
applied once and never lost. Bad input returns ``False`` and changes nothing.
"""

from __future__ import annotations

from typing import Any

from dex import Context

from dex_agents_ray.engine import taken_channel_messages
from dex_agents_ray.media import ImageValidationError, validate_image_references
from dex_agents_ray.session._api import (
    MAX_LIST_MESSAGES_LIMIT,
    SNAPSHOT_MESSAGE_LIMIT,
    AgentMessagesPage,
    AgentSnapshot,
    AnswerQuestionRequest,
    CancelTurnRequest,
    DeleteQueuedMessageRequest,
    ExecutePlanRequest,
    ListAgentMessagesRequest,
    QueuedUserMessage,
    ResolveInterruptRequest,
    SteerUserMessageRequest,
    UpdateSessionSettingsRequest,
)
from dex_agents_ray.session._config import SessionConfig
from dex_agents_ray.session._control import cancelled
from dex_agents_ray.session._messages import load_messages
from dex_agents_ray.session._runner import ImageUserMessageBuilder
from dex_agents_ray.session._schema import (
    AGENT_MESSAGE_INDEX,
    AGENT_PLAN,
    AGENT_STATE,
    AGENT_USAGE,
    INTERRUPT_RESOLUTIONS,
    PENDING_INTERRUPTS,
    PENDING_PLAN_EXECUTION,
    PLAN_EXECUTIONS,
    QUEUED_USER_MESSAGES,
    SESSION_SETTINGS,
    STEERED_USER_MESSAGES,
    TURN_CANCELLATION_REQUEST,
    TURN_CONTROL_REQUESTS,
    plan_execution_key,
)
from dex_agents_ray.session._settings import session_settings_problem
from dex_agents_ray.session._turns import turn_records
from dex_agents_ray.session._values import (
    AgentInterrupt,
    AgentInterruptResolution,
    AgentUsage,
    AgentUserMessage,
    InterruptKind,
    PlanExecutionRequest,
    PlanStatus,
    TurnCancellationRequest,
    TurnControlKind,
    TurnControlRequest,
    utc_now,
)

__all__ = [
    "answer_question",
    "get_agent_snapshot",
    "list_agent_messages",
    "resolve_interrupt",
    "cancel_turn",
    "delete_queued_message",
    "execute_plan",
    "send_user_message",
    "steer_user_message",
    "update_session_settings",
]


def send_user_message(context: Context, config: SessionConfig, message: AgentUserMessage) -> bool:
    """Queue ``message``; ``False`` for blank text, ``plan_mode`` (off), or images the
    runner cannot take."""
    if not isinstance(message.text, str) or not message.text.strip():
        return False
    if message.plan_mode and not config.options.plan_mode_enabled:
        return False
    if message.images:
        if not isinstance(config.runner, ImageUserMessageBuilder):
            return False
        try:
            validate_image_references(message.images)
        except ImageValidationError:
            return False
    QUEUED_USER_MESSAGES.publish(context, message)
    return True


def _queued_entry(context: Context, message_id: object) -> Any:
    """The queued message ``message_id`` in this RPC's snapshot, or ``None``."""
    if not isinstance(message_id, str) or not message_id:
        return None
    try:
        return QUEUED_USER_MESSAGES.find_pending_message(context, message_id)
    except ValueError:  # not a valid message ID at all
        return None


def steer_user_message(
    context: Context, config: SessionConfig, request: SteerUserMessageRequest
) -> bool:
    """Steer the running turn with a queued message (moved by its ID) or new text.

    ``False`` for both or neither, blank text, a message no longer queued, or a turn
    that does not accept steering; with no active turn, ``text`` is queued and a
    ``message_id`` is ``False`` (the message starts the next turn anyway). The move
    deletes the queued message strictly: if the session consumed it meanwhile, the
    engine refuses the commit with ``ChannelMessageNotFoundError``.
    """
    by_id, text = request.message_id is not None, request.text is not None
    if by_id == text:
        return False
    if text and (not isinstance(request.text, str) or not request.text.strip()):
        return False
    state = AGENT_STATE.get(context)
    if state is None:
        return False
    if state.active_turn_id is None:
        if not text:
            return False
        message = AgentUserMessage(text=str(request.text), plan_mode=request.plan_mode)
        return send_user_message(context, config, message)
    if not state.accepts_turn_control:
        return False
    if by_id:
        entry = _queued_entry(context, request.message_id)
        if entry is None:
            return False
        QUEUED_USER_MESSAGES.delete(context, entry.message_id)
        STEERED_USER_MESSAGES.publish(context, entry.value)
    else:
        if request.plan_mode and not config.options.plan_mode_enabled:
            return False
        STEERED_USER_MESSAGES.publish(
            context, AgentUserMessage(text=str(request.text), plan_mode=request.plan_mode)
        )
    TURN_CONTROL_REQUESTS.publish(
        context, TurnControlRequest(kind=TurnControlKind.STEER, turn_id=state.active_turn_id)
    )
    return True


def delete_queued_message(context: Context, request: DeleteQueuedMessageRequest) -> bool:
    """Delete a queued message; ``False`` for one no longer queued."""
    entry = _queued_entry(context, request.message_id)
    if entry is None:
        return False
    QUEUED_USER_MESSAGES.delete(context, entry.message_id)
    return True


def cancel_turn(context: Context, request: CancelTurnRequest) -> tuple[bool, bool]:
    """Record the cancellation of the active turn: ``(result, started)``.

    ``started`` says the caller must cancel the turn's model call and waiting
    Steps and start ``FinishTurnCancellation``. ``False`` when no turn is active,
    ``turn_id`` names another turn, or the turn does not accept cancellation; a
    second call for the same turn returns ``True`` and changes nothing, also
    once the cancellation has ended the turn. The
    turn's pending interrupts are withdrawn here, so answering one of them
    returns ``False`` from now on. Needs ``TurnCancellationRequest`` and
    ``PendingInterrupts`` locked.
    """
    state = AGENT_STATE.get(context)
    turn_id = request.turn_id
    if cancelled(context, turn_id):
        return True, False  # recorded before (the turn may have ended since)
    if state is None or state.active_turn_id is None or turn_id != state.active_turn_id:
        return False, False
    if not state.accepts_turn_control:
        return False, False
    TURN_CANCELLATION_REQUEST.set(context, TurnCancellationRequest(turn_id=turn_id))
    pending = PENDING_INTERRUPTS.get(context) or []
    kept = [i for i in pending if i.turn_id != turn_id]
    if len(kept) != len(pending):
        PENDING_INTERRUPTS.set(context, kept)
    return True, True


def execute_plan(context: Context, request: ExecutePlanRequest) -> bool:
    """Approve plan ``request.revision`` for execution: ``True`` only while the session
    waits for a user message, the plan has this revision and is ``draft`` or
    ``active``, no execution of it is pending, and nothing is queued, steered, or
    pending. Needs ``PendingPlanExecution`` locked."""
    revision = request.revision
    state = AGENT_STATE.get(context)
    plan = AGENT_PLAN.get(context)
    if isinstance(revision, bool) or not isinstance(revision, int):
        return False
    if state is None or state.active_turn_id is not None:
        return False
    if plan is None or plan.revision != revision:
        return False
    if plan.status not in (PlanStatus.DRAFT, PlanStatus.ACTIVE):
        return False
    pending = PENDING_PLAN_EXECUTION.get(context)
    if pending is not None and pending.revision == revision:
        return False
    if QUEUED_USER_MESSAGES.size(context) or STEERED_USER_MESSAGES.size(context):
        return False
    if PENDING_INTERRUPTS.get(context):
        return False
    approval = PlanExecutionRequest(revision=revision)
    PENDING_PLAN_EXECUTION.set(context, approval)
    PLAN_EXECUTIONS.publish(context, plan_execution_key(revision), approval)
    return True


def update_session_settings(context: Context, request: UpdateSessionSettingsRequest) -> bool:
    """Replace the settings; ``False`` before the session initialized, for ``None``,
    or for settings that are not a JSON object within the limit (and tolerance)."""
    settings = request.session_settings
    if AGENT_STATE.get(context) is None or settings is None:
        return False
    if session_settings_problem(settings) is not None:
        return False
    SESSION_SETTINGS.set(context, dict(settings))
    return True


def _take_pending(context: Context, interrupt_id: str) -> AgentInterrupt | None:
    """Remove and return ``interrupt_id`` while it is pending and before its deadline."""
    pending = PENDING_INTERRUPTS.get(context) or []
    found = next((i for i in pending if i.interrupt_id == interrupt_id), None)
    if found is None:
        return None
    if found.deadline is not None and utc_now() >= found.deadline:
        return None
    PENDING_INTERRUPTS.set(context, [i for i in pending if i.interrupt_id != interrupt_id])
    return found


def resolve_interrupt(context: Context, request: ResolveInterruptRequest) -> bool:
    """Approve or reject an approval, or decline a question."""
    if not isinstance(request.interrupt_id, str) or not isinstance(request.approved, bool):
        return False
    pending = PENDING_INTERRUPTS.get(context) or []
    found = next((i for i in pending if i.interrupt_id == request.interrupt_id), None)
    if found is None or (found.kind is InterruptKind.QUESTION and request.approved):
        return False
    interrupt = _take_pending(context, request.interrupt_id)
    if interrupt is None:
        return False
    INTERRUPT_RESOLUTIONS.publish(
        context,
        interrupt.interrupt_id,
        AgentInterruptResolution(
            interrupt_id=interrupt.interrupt_id,
            kind=interrupt.kind,
            approved=request.approved,
            rejection_message=None if request.approved else request.rejection_message,
        ),
    )
    return True


def answer_question(context: Context, request: AnswerQuestionRequest) -> bool:
    """Answer a pending question; ``False`` for a blank answer or one outside ``choices``."""
    answer = request.answer
    if not isinstance(request.interrupt_id, str) or not isinstance(answer, str):
        return False
    if not answer.strip():
        return False
    pending = PENDING_INTERRUPTS.get(context) or []
    found = next((i for i in pending if i.interrupt_id == request.interrupt_id), None)
    if found is None or found.kind is not InterruptKind.QUESTION:
        return False
    if found.choices and not found.allows_free_text and answer not in found.choices:
        return False
    interrupt = _take_pending(context, request.interrupt_id)
    if interrupt is None:
        return False
    INTERRUPT_RESOLUTIONS.publish(
        context,
        interrupt.interrupt_id,
        AgentInterruptResolution(
            interrupt_id=interrupt.interrupt_id,
            kind=InterruptKind.QUESTION,
            approved=True,
            answer=answer,
        ),
    )
    return True


def _queued(context: Context, steered: bool) -> tuple[QueuedUserMessage, ...]:
    """The queued (or steered) messages. A queued message ``AwaitUserMessage`` has
    taken comes first: the engine took it off the Channel for the Step, and it
    is stored with its turn only when that turn starts, so until then it is
    listed here (and a client that checks what it sent does not send it again).
    Steered messages leave their Channel in the commit that applies them."""
    channel = STEERED_USER_MESSAGES if steered else QUEUED_USER_MESSAGES
    entries = list(channel.pending_messages(context))
    if not steered:
        entries = [*taken_channel_messages(context, channel), *entries]
    return tuple(
        QueuedUserMessage(
            message_id=entry.message_id,
            text=entry.value.text,
            images=entry.value.images,
            plan_mode=entry.value.plan_mode,
        )
        for entry in entries
    )


def get_agent_snapshot(context: Context) -> AgentSnapshot:
    """The session as committed (needs every message map, the records and the queues loaded)."""
    state = AGENT_STATE.get(context)
    messages = load_messages(context)[-SNAPSHOT_MESSAGE_LIMIT:]
    queued = _queued(context, steered=False)
    return AgentSnapshot(
        state=state,
        messages=tuple(messages),
        pending_interrupts=tuple(PENDING_INTERRUPTS.get(context) or ()),
        tool_calls=tuple(turn_records(context)),
        usage=AGENT_USAGE.get(context) or AgentUsage(),
        queued_message_count=len(queued),
        plan=AGENT_PLAN.get(context),
        queued_messages=queued,
        steered_messages=_queued(context, steered=True),
        session_settings=dict(SESSION_SETTINGS.get(context) or {}),
    )


def list_agent_messages(context: Context, request: ListAgentMessagesRequest) -> AgentMessagesPage:
    """One page of stored messages, oldest first, before ``request.before_sequence``."""
    limit = min(max(int(request.limit), 1), MAX_LIST_MESSAGES_LIMIT)
    messages = load_messages(context)
    if request.before_sequence is not None:
        messages = [m for m in messages if m.sequence < request.before_sequence]
    page = messages[-limit:]
    more = len(messages) > len(page)
    index = AGENT_MESSAGE_INDEX.get(context)
    return AgentMessagesPage(
        messages=tuple(page),
        next_before_sequence=page[0].sequence if more and page else None,
        deleted_before_sequence=None if index is None else index.deleted_before_sequence,
    )
