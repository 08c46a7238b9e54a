"""``AgentSessionClient``: start and operate sessions through an engine client."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any, TypeVar

from dex import FlowConfig, StartFlowOptions, StreamMessage
from dex.flow_config import ActiveStepSearchMode
from dex.runtime_errors import RpcLockConflictError

from dex_agents_ray.media import AgentImageReference, validate_image_references
from dex_agents_ray.session._api import (
    AgentEvent,
    AgentMessagesPage,
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
from dex_agents_ray.session._flow import AgentSessionFlow
from dex_agents_ray.session._flow_client import FlowClient
from dex_agents_ray.session._runner import ImageUserMessageBuilder
from dex_agents_ray.session._settings import validate_session_settings
from dex_agents_ray.session._values import AgentUserMessage

__all__ = ["AGENT_SESSION_ACTIVE_STEP_SEARCH_MODE", "AgentSessionClient"]

AGENT_SESSION_ACTIVE_STEP_SEARCH_MODE = ActiveStepSearchMode.WITH_WAIT_FOR
"""The active-Step search mode ``start_session`` sets, so a query on
``ActiveStepTypes`` finds sessions waiting in ``AwaitToolApproval`` or
``AwaitQuestionAnswer``. Pass it in ``config_override`` when starting a session
with the engine client directly, or to ``update_flow_config`` for a running one.
The engine indexes a run's active Steps by its mode: with this one only the
Steps that wait (``Await*``), none with ``ActiveStepSearchMode.DISABLED``."""

T = TypeVar("T")

LOCK_CONFLICT_RETRY_SECONDS = 5.0
"""How long ``resolve_interrupt`` and ``answer_question`` retry ``RpcLockConflictError``."""


class AgentSessionClient:
    """Start sessions of one ``AgentSessionFlow`` and operate them.

    Wraps an engine client (``FlowEngine.client``, an ``EngineClient``; any
    :class:`FlowClient`) as the spec's client wraps a Dex ``AsyncClient``. Every
    session is searchable by the Steps it waits in::

        waiting = await engine.client.search_flows('ActiveStepTypes = "AwaitToolApproval"', 50)

    Args:
        client: The engine client (``dex.AsyncClient`` fits too).
        flow: The session Flow registered with that engine.
    """

    def __init__(self, client: FlowClient, flow: AgentSessionFlow) -> None:
        if not isinstance(flow, AgentSessionFlow):
            raise TypeError("flow must be an AgentSessionFlow")
        self.client = client
        self.flow = flow

    async def start_session(
        self,
        session_id: str,
        initial_message: str | None = None,
        *,
        images: Sequence[AgentImageReference] = (),
        session_settings: Mapping[str, Any] | None = None,
        start_environment: Mapping[str, str] | None = None,
        active_step_search_mode: ActiveStepSearchMode = AGENT_SESSION_ACTIVE_STEP_SEARCH_MODE,
        options: StartFlowOptions | None = None,
    ) -> str:
        """Start session ``session_id`` (the Flow ID); returns the run ID.

        A blank ``initial_message`` starts no turn. The session is searchable
        by the Steps it waits in (``active_step_search_mode``), so
        ``search_flows('ActiveStepTypes = "AwaitToolApproval"', ...)`` finds it
        while it waits for an approval (``AwaitQuestionAnswer`` for questions).
        ``options`` are the engine's start options; their ``config_override``
        wins over ``active_step_search_mode``.

        Raises:
            ImageValidationError: An image reference is invalid.
            ValueError: Images without an initial message, or for a runner that
                cannot take them (no ``ImageUserMessageBuilder``); session settings
                over ``MAX_SESSION_SETTINGS_BYTES``.
            TypeError: Session settings that are not a JSON object.
        """
        if session_settings is not None:
            validate_session_settings(session_settings)
        images = tuple(images)
        if images:
            validate_image_references(images)
            if initial_message is None or not initial_message.strip():
                raise ValueError("start_session: images need an initial_message")
            if not isinstance(self.flow.runner, ImageUserMessageBuilder):
                # The start Step could only fail the session for them: refuse before it exists.
                raise ValueError(
                    "start_session: images need a runner that implements "
                    "ImageUserMessageBuilder (the built-in loop does with a media_store)"
                )
        start = AgentSessionStartInput(
            initial_message=initial_message,
            images=images,
            session_settings=dict(session_settings or {}),
            start_environment=dict(start_environment or {}),
        )
        options = options or StartFlowOptions()
        if options.config_override is None:
            config = FlowConfig(active_step_search_mode=active_step_search_mode)
            options = replace(options, config_override=config)
        run_id: str = await self.client.start_flow(self.flow, session_id, start, options)
        return run_id

    async def send_user_message(
        self,
        session_id: str,
        text: str,
        *,
        images: Sequence[AgentImageReference] = (),
        plan_mode: bool = False,
    ) -> bool:
        """Queue a user message; ``False`` for blank text or images the runner cannot take.

        Raises:
            ImageValidationError: An image reference is invalid (checked before sending).
        """
        images = tuple(images)
        if images:
            validate_image_references(images)
        message = AgentUserMessage(text=text, images=images, plan_mode=plan_mode)
        result: bool = await self.client.invoke_rpc(
            self.flow.send_user_message, session_id, message
        )
        return result

    async def steer_user_message(
        self,
        session_id: str,
        *,
        message_id: str | None = None,
        text: str | None = None,
        plan_mode: bool = False,
    ) -> bool:
        """Steer the running turn with a queued message (``message_id`` from
        ``AgentSnapshot.queued_messages``) or with new ``text``; give exactly one.

        The turn ends at its next safe Step boundary (a started model call or
        tool call is never interrupted) and the next turn's user messages are
        every steered message, in order. With no turn active, ``text`` is queued
        like ``send_user_message``. Returns ``False`` for both or neither, blank
        text, a message no longer queued, or a turn that does not accept steering.

        Raises:
            ChannelMessageNotFoundError: The session consumed the message while
                the RPC ran; nothing changed (reload the snapshot).
        """
        request = SteerUserMessageRequest(message_id=message_id, text=text, plan_mode=plan_mode)
        result: bool = await self.client.invoke_rpc(
            self.flow.steer_user_message, session_id, request
        )
        return result

    async def delete_queued_message(self, session_id: str, message_id: str) -> bool:
        """Delete a queued message; ``False`` for one no longer queued."""
        request = DeleteQueuedMessageRequest(message_id=message_id)
        result: bool = await self.client.invoke_rpc(
            self.flow.delete_queued_message, session_id, request
        )
        return result

    async def execute_plan(self, session_id: str, revision: int) -> bool:
        """Approve plan ``revision`` (``AgentSnapshot.plan``) for execution.

        ``True`` only while the session waits for a user message, the plan has
        this revision and is ``draft`` or ``active``, no execution of it is
        pending, and nothing is queued, steered, or pending; the session then
        starts an ``executing`` turn. Retries ``RpcLockConflictError`` for 5 seconds.
        """
        request = ExecutePlanRequest(revision=revision)
        return await _retry_lock_conflicts(
            lambda: self.client.invoke_rpc(self.flow.execute_plan, session_id, request)
        )

    async def cancel_turn(self, session_id: str, turn_id: str) -> bool:
        """Stop turn ``turn_id`` now: its model call and every wait (approvals,
        questions, durable waits, a task's next poll) are cancelled; a started
        tool call runs to its end and a started tool task is abandoned.

        Returns ``True`` once the cancellation is recorded (the turn may still
        complete first), also for a second call; ``False`` when no turn is active,
        ``turn_id`` names another turn, or the turn does not accept cancellation.
        Retries ``RpcLockConflictError`` for 5 seconds.
        """
        request = CancelTurnRequest(turn_id=turn_id)
        return await _retry_lock_conflicts(
            lambda: self.client.invoke_rpc(self.flow.cancel_turn, session_id, request)
        )

    async def update_session_settings(
        self, session_id: str, session_settings: Mapping[str, Any] | None
    ) -> bool:
        """Replace the session's settings (nothing is merged; ``{}`` clears them).

        They apply when the next turn starts; a running turn keeps its own.
        Returns ``False`` before the session initialized, or for ``None``.

        Raises:
            TypeError: Settings that are not a JSON object (checked before sending).
            ValueError: Settings over ``MAX_SESSION_SETTINGS_BYTES``.
        """
        if session_settings is not None:
            validate_session_settings(session_settings)
        request = UpdateSessionSettingsRequest(
            session_settings=None if session_settings is None else dict(session_settings)
        )
        result: bool = await self.client.invoke_rpc(
            self.flow.update_session_settings, session_id, request
        )
        return result

    async def resolve_interrupt(
        self,
        session_id: str,
        interrupt_id: str,
        *,
        approved: bool,
        rejection_message: str | None = None,
    ) -> bool:
        """Approve or reject a pending approval, or decline a question (``approved=False``).

        Returns ``False`` when the interrupt is not pending or past its deadline.
        Retries ``RpcLockConflictError`` for 5 seconds.
        """
        request = ResolveInterruptRequest(
            interrupt_id=interrupt_id, approved=approved, rejection_message=rejection_message
        )
        return await _retry_lock_conflicts(
            lambda: self.client.invoke_rpc(self.flow.resolve_interrupt, session_id, request)
        )

    async def answer_question(self, session_id: str, interrupt_id: str, answer: str) -> bool:
        """Answer a pending question; ``False`` when it is not pending, past its deadline,
        or the answer is blank or not an allowed choice. Retries lock conflicts for 5 s."""
        request = AnswerQuestionRequest(interrupt_id=interrupt_id, answer=answer)
        return await _retry_lock_conflicts(
            lambda: self.client.invoke_rpc(self.flow.answer_question, session_id, request)
        )

    async def get_agent_snapshot(self, session_id: str) -> AgentSnapshot:
        """The session as committed: state, recent messages, interrupts, tool calls, usage."""
        snapshot: AgentSnapshot = await self.client.invoke_rpc(
            self.flow.get_agent_snapshot, session_id
        )
        return snapshot

    async def list_agent_messages(
        self, session_id: str, *, before_sequence: int | None = None, limit: int = 50
    ) -> AgentMessagesPage:
        """One page of stored messages, oldest first; page back with ``next_before_sequence``."""
        request = ListAgentMessagesRequest(before_sequence=before_sequence, limit=limit)
        page: AgentMessagesPage = await self.client.invoke_rpc(
            self.flow.list_agent_messages, session_id, request
        )
        return page

    async def read_event(
        self, session_id: str, resume_token: str = "", timeout: timedelta | float | None = None
    ) -> StreamMessage[AgentEvent]:
        """The next ``AgentEvents`` message after ``resume_token`` (long poll up to
        ``timeout``, a ``timedelta`` or seconds)."""
        if timeout is not None and not isinstance(timeout, timedelta):
            timeout = timedelta(seconds=timeout)
        return await self.client.read_stream(
            session_id, self.flow.agent_events, resume_token, timeout
        )


async def _retry_lock_conflicts(call: Callable[[], Awaitable[T]]) -> T:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + LOCK_CONFLICT_RETRY_SECONDS
    delay = 0.02
    while True:
        try:
            return await call()
        except RpcLockConflictError:
            if loop.time() >= deadline:
                raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.25)
