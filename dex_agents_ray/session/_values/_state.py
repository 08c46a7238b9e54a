"""The session's state and usage, a turn's settings, and the turn-control requests
(steer, cancel)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from dex_agents_ray.engine import share_decoded_values
from dex_agents_ray.session._values._base import STATE_SCHEMA_VERSION, check_schema_version, utc_now
from dex_agents_ray.session._wire import wire_value

__all__ = [
    "AgentState",
    "AgentStatus",
    "AgentUsage",
    "InteractionMode",
    "TurnCancellationRequest",
    "TurnControlKind",
    "TurnControlRequest",
    "TurnSessionSettings",
]


@dataclass(frozen=True, kw_only=True)
class AgentUsage:
    """Tokens and model calls, for one model call or the whole session."""

    input_tokens: int = 0
    """Input tokens, cached ones included."""
    output_tokens: int = 0
    """Output tokens, reasoning ones included."""
    cached_input_tokens: int = 0
    """The part of ``input_tokens`` read from a prompt cache."""
    reasoning_tokens: int = 0
    """The part of ``output_tokens`` spent on reasoning."""
    model_calls: int = 0
    """Model calls made; a runner reports 1 for a ``run_model_step`` that called the model."""

    def __post_init__(self) -> None:
        for name in (
            "input_tokens",
            "output_tokens",
            "cached_input_tokens",
            "reasoning_tokens",
            "model_calls",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"AgentUsage.{name} must be an int >= 0, not {value!r}")

    def __add__(self, other: AgentUsage) -> AgentUsage:
        return AgentUsage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cached_input_tokens=self.cached_input_tokens + other.cached_input_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            model_calls=self.model_calls + other.model_calls,
        )

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens


class AgentStatus(StrEnum):
    """What the session is doing."""

    WAITING_FOR_USER_MESSAGE = "waiting_for_user_message"
    """No turn is active."""
    RUNNING_MODEL = "running_model"
    """A turn is in ``RunModel``."""
    RUNNING_TOOLS = "running_tools"
    """A turn waits for its tool calls."""
    COMPACTING_CONTEXT = "compacting_context"
    """A turn summarizes older messages (context compaction)."""


class InteractionMode(StrEnum):
    """What kind of turn is active."""

    CHAT = "chat"
    """An ordinary turn."""
    PLANNING = "planning"
    """A plan-mode turn that may only call ``write_todos``."""
    EXECUTING = "executing"
    """A turn that executes an approved plan."""


@dataclass(frozen=True, kw_only=True)
@wire_value
class AgentState:
    """The session's state (``AgentState`` Attribute)."""

    status: AgentStatus
    """What the session is doing."""
    interaction_mode: InteractionMode = InteractionMode.CHAT
    """The active or last turn's mode."""
    turn_count: int = 0
    """Turns started so far; the active turn is ``turn-<turn_count>``."""
    active_turn_id: str | None = None
    """The running turn; ``None`` while the session waits for a user message."""
    last_turn_error: str | None = None
    """Why the last failed turn failed; ``None`` once a later turn completes."""
    last_sequence: int = 0
    """Sequence of the newest stored message; 0 before the first."""
    accepts_turn_control: bool = True
    """Whether the active turn can be steered or cancelled."""
    started_at: datetime = field(default_factory=utc_now)
    """When the session started."""
    schema_version: int = STATE_SCHEMA_VERSION
    """The stored format's version."""

    def __post_init__(self) -> None:
        check_schema_version("AgentState", self.schema_version)


@dataclass(frozen=True, kw_only=True)
class TurnSessionSettings:
    """The settings a turn started with (``TurnSessionSettings``), tagged with it:
    its model calls read only this copy, so a running turn keeps them across a
    crash. A copy an earlier turn left reads as no settings."""

    turn_id: str
    """The turn that copied them."""
    session_settings: dict[str, Any] = field(default_factory=dict)
    """The session's settings when the turn started; empty for none."""


class TurnControlKind(StrEnum):
    """What a ``TurnControlRequests`` message asks."""

    STEER = "steer"
    """Apply steered messages at the next safe boundary."""
    CANCEL = "cancel"
    """Stop the turn."""


@dataclass(frozen=True, kw_only=True)
@wire_value
class TurnControlRequest:
    """Internal: wakes the turn's waiting Steps for a steer."""

    kind: TurnControlKind
    """Steer or cancel."""
    turn_id: str | None = None
    """The turn it applies to; ``None`` for whichever is active."""


@dataclass(frozen=True, kw_only=True)
@wire_value
class TurnCancellationRequest:
    """The cancellation ``cancel_turn`` recorded (written only by it)."""

    turn_id: str
    """The cancelled turn."""
    requested_at: datetime = field(default_factory=utc_now)
    """When ``cancel_turn`` committed."""


# Every Step and RPC of a session reads its state back: the engine decodes each
# stored JSON text once per process.
share_decoded_values(AgentState)
