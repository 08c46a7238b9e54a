"""``SyncAgentSessionClient``: the blocking twin of ``AgentSessionClient``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dex import StreamMessage, StreamMessagesPage

from dex_agents_ray.media import AgentImageReference
from dex_agents_ray.session._api import AgentEvent, AgentSnapshot
from dex_agents_ray.session._client import AgentSessionClient
from dex_agents_ray.session._flow import AgentSessionFlow

if TYPE_CHECKING:
    from dex_agents_ray.engine import SyncEngineClient


class SyncAgentSessionClient:
    """Every ``AgentSessionClient`` method, blocking, over a ``SyncEngineClient``
    (``engine.sync_client()``): for code that cannot ``await`` (a script, a WSGI
    handler, a notebook cell that runs plain functions).

    Example::

        sessions = SyncAgentSessionClient(engine.sync_client(), flow)
        sessions.start_session("s1", "Where is order A1?")
        snapshot = sessions.get_agent_snapshot("s1")
    """

    def __init__(self, client: SyncEngineClient, flow: AgentSessionFlow) -> None:
        self.client = client
        self.sessions = AgentSessionClient(client.async_client, flow)
        self.flow = flow

    def start_session(
        self, session_id: str, initial_message: str | None = None, **options: Any
    ) -> str:
        """``AgentSessionClient.start_session`` (the same keyword options)."""
        return self.client.run(self.sessions.start_session(session_id, initial_message, **options))

    def send_user_message(
        self,
        session_id: str,
        text: str,
        *,
        images: Sequence[AgentImageReference] = (),
        plan_mode: bool = False,
    ) -> bool:
        return self.client.run(
            self.sessions.send_user_message(session_id, text, images=images, plan_mode=plan_mode)
        )

    def steer_user_message(
        self,
        session_id: str,
        *,
        message_id: str | None = None,
        text: str | None = None,
        plan_mode: bool = False,
    ) -> bool:
        return self.client.run(
            self.sessions.steer_user_message(
                session_id, message_id=message_id, text=text, plan_mode=plan_mode
            )
        )

    def delete_queued_message(self, session_id: str, message_id: str) -> bool:
        return self.client.run(self.sessions.delete_queued_message(session_id, message_id))

    def execute_plan(self, session_id: str, revision: int) -> bool:
        return self.client.run(self.sessions.execute_plan(session_id, revision))

    def cancel_turn(self, session_id: str, turn_id: str) -> bool:
        return self.client.run(self.sessions.cancel_turn(session_id, turn_id))

    def update_session_settings(self, session_id: str, settings: Mapping[str, Any]) -> bool:
        return self.client.run(self.sessions.update_session_settings(session_id, settings))

    def resolve_interrupt(
        self,
        session_id: str,
        interrupt_id: str,
        *,
        approved: bool,
        rejection_message: str | None = None,
    ) -> bool:
        return self.client.run(
            self.sessions.resolve_interrupt(
                session_id, interrupt_id, approved=approved, rejection_message=rejection_message
            )
        )

    def answer_question(self, session_id: str, interrupt_id: str, answer: str) -> bool:
        return self.client.run(self.sessions.answer_question(session_id, interrupt_id, answer))

    def get_agent_snapshot(self, session_id: str) -> AgentSnapshot:
        return self.client.run(self.sessions.get_agent_snapshot(session_id))

    def list_agent_messages(
        self, session_id: str, *, before_sequence: int | None = None, limit: int = 50
    ) -> Any:
        return self.client.run(
            self.sessions.list_agent_messages(
                session_id, before_sequence=before_sequence, limit=limit
            )
        )

    def read_event(
        self, session_id: str, resume_token: str = "", timeout: float | None = None
    ) -> StreamMessage[AgentEvent]:
        return self.client.run(self.sessions.read_event(session_id, resume_token, timeout))

    def list_events(self, session_id: str, page_size: int = 100) -> StreamMessagesPage[AgentEvent]:
        """The newest ``page_size`` events, newest first."""
        page: StreamMessagesPage[AgentEvent] = self.client.list_stream_messages(
            session_id, self.flow.agent_events, page_size
        )
        return page
