"""Interrupts: what the session waits for a person to decide, and the decision."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from dex_agents_ray.session._policy import ToolEffect
from dex_agents_ray.session._values._base import utc_now
from dex_agents_ray.session._wire import wire_value

__all__ = ["AgentInterrupt", "AgentInterruptResolution", "InterruptKind"]


class InterruptKind(StrEnum):
    """What an interrupt asks of a person."""

    APPROVAL = "approval"
    """Approve or reject a tool call."""
    QUESTION = "question"
    """Answer a question (``ask_user`` or a tool's)."""


@dataclass(frozen=True, kw_only=True)
@wire_value
class AgentInterrupt:
    """Something the session waits for a person to decide."""

    interrupt_id: str
    """The ID to resolve: the tool call ID, or ``<tool_call_id>-input-<n>``."""
    kind: InterruptKind
    """Approval or question."""
    tool_call_id: str
    """The tool call it belongs to."""
    tool_name: str
    """The tool of that call."""
    turn_id: str
    """The turn that raised it."""
    arguments: str
    """The call's arguments JSON, for an approval UI."""
    effect: ToolEffect | None = None
    """The call's effect; ``None`` for built-in calls."""
    deadline: datetime | None = None
    """When it expires (the host's clock); ``None`` never."""
    question: str | None = None
    """The question text; ``None`` for an approval."""
    choices: tuple[str, ...] = ()
    """Allowed answers; empty allows any answer."""
    allows_free_text: bool = True
    """Whether an answer outside ``choices`` is accepted."""
    created_at: datetime = field(default_factory=utc_now)
    """When it was raised."""


@dataclass(frozen=True, kw_only=True)
@wire_value
class AgentInterruptResolution:
    """A person's decision, published to ``InterruptResolutions[<interrupt id>]``."""

    interrupt_id: str
    """The interrupt it resolves."""
    kind: InterruptKind
    """Approval or question."""
    approved: bool
    """Approved (or answered); ``False`` rejects an approval or declines a question."""
    rejection_message: str | None = None
    """Why it was rejected; ``None`` on approval or when no reason was given."""
    answer: str | None = None
    """The answer to a question; ``None`` otherwise."""
    resolved_at: datetime = field(default_factory=utc_now)
    """When the RPC committed."""
