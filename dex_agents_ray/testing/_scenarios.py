"""``ContextWindowSessionScenario``: one session driven past a small context window,
for any runner, to check that compaction keeps it going.

Give it the ``AgentSessionClient`` of a Flow whose options set a small
``CompactionPolicy`` (and, to check retention too, a small
``retained_message_limit``). ``run()`` sends ``turns`` user messages one turn
at a time, reading the ``AgentEvents`` stream as an application does, and
returns what happened; it raises ``AssertionError`` naming the turn when a turn
fails, or when the session never compacted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from dex_agents_ray.session import AgentEventType, AgentSessionClient

__all__ = ["ContextWindowScenarioResult", "ContextWindowSessionScenario"]


@dataclass(frozen=True, kw_only=True)
class ContextWindowScenarioResult:
    """What a ``ContextWindowSessionScenario`` run saw."""

    turns: int
    """Turns completed."""
    compactions: int
    """``compaction_finished`` events."""
    summary_generation: int
    """The last summary's generation."""
    stored_messages: int
    """Messages the session still stores (retention deletes older ones)."""
    deleted_before_sequence: int | None
    """Where retention's deletions end; ``None`` when nothing was deleted."""
    last_sequence: int
    """The newest message's sequence."""


@dataclass(kw_only=True)
class ContextWindowSessionScenario:
    """Drives one session past a small context window (see the module docstring)."""

    sessions: AgentSessionClient
    """The client of a Flow with a small ``CompactionPolicy``."""
    session_id: str = "context-window"
    """The session to start."""
    turns: int = 30
    """User messages to send, one turn each."""
    message: Callable[[int], str] = field(
        default=lambda turn: (
            f"Message {turn}: please look at my order again and tell me what changed. "
            + "Here is everything I know about it. " * 8
        )
    )
    """The text of turn ``n`` (from 1); long by default, to fill the window fast."""
    timeout: float = 120.0
    """Seconds one turn may take."""
    require_compaction: bool = True
    """Fail when the session never compacted."""

    async def run(self) -> ContextWindowScenarioResult:
        token, compactions, generation = "", 0, 0
        for turn in range(1, self.turns + 1):
            if turn == 1:
                await self.sessions.start_session(self.session_id, self.message(turn))
            elif not await self.sessions.send_user_message(self.session_id, self.message(turn)):
                raise AssertionError(f"turn {turn}: send_user_message returned False")
            while True:
                event = await self.sessions.read_event(self.session_id, token, self.timeout)
                token = event.resume_token
                value = event.value
                if value.type is AgentEventType.COMPACTION_FINISHED:
                    compactions += 1
                    generation = int(value.payload.get("generation", generation))
                if value.type is AgentEventType.TURN_FAILED:
                    raise AssertionError(f"turn {turn} failed: {value.payload.get('error')}")
                if value.type is AgentEventType.TURN_COMPLETED:
                    break
        snapshot = await self.sessions.get_agent_snapshot(self.session_id)
        state = snapshot.state
        if state is None:
            raise AssertionError("the session has no state")
        if self.require_compaction and compactions == 0:
            raise AssertionError(
                f"the session ran {self.turns} turns without compacting: make the "
                "CompactionPolicy's context_window_tokens smaller, or the turns longer"
            )
        page = await self.sessions.list_agent_messages(self.session_id, limit=1)
        return ContextWindowScenarioResult(
            turns=self.turns,
            compactions=compactions,
            summary_generation=generation,
            stored_messages=state.last_sequence - (page.deleted_before_sequence or 1) + 1,
            deleted_before_sequence=page.deleted_before_sequence,
            last_sequence=state.last_sequence,
        )
