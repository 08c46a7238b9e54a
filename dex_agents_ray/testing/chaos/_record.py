"""What a chaos campaign saw, and the faults it injected."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from dex_agents_ray.engine import StepHistoryEntry
from dex_agents_ray.session import AgentEvent, AgentMessage, AgentToolCall, InterruptKind

__all__ = [
    "CampaignRecord",
    "FaultKind",
    "FaultRecord",
    "ResolutionRecord",
    "SessionRecord",
    "ToolInvocation",
    "Violation",
]


class FaultKind(StrEnum):
    """The faults a campaign injects."""

    SESSION_HOST = "session_host"
    """SIGKILL of the process hosting a session that has a turn in flight."""
    TOOL_EXECUTOR = "tool_executor"
    """SIGKILL of one executor actor (a process running remote tool Steps)."""
    SCHEDULER = "scheduler"
    """SIGKILL of the namespace's scheduler actor (it wakes due timers)."""
    POSTGRES_RESTART = "postgres_restart"
    """The PostgreSQL server crash-restarted (``ChaosCampaign.restart_postgres``)."""
    STORE_CONNECTIONS = "store_connections"
    """Every other connection to the PostgreSQL database terminated."""
    NODE = "node"
    """A worker node of a multi-node cluster killed (its raylet and every process
    on it), then a node like it added back (``ChaosCampaign.nodes``)."""


@dataclass(frozen=True, kw_only=True)
class FaultRecord:
    """One fault the campaign tried to inject."""

    index: int
    """Its place in the seed's schedule, from 0."""
    kind: FaultKind
    """What was done."""
    at_seconds: float
    """Seconds since the campaign started."""
    target: str
    """The actor, session or server it hit."""
    injected: bool
    """``False`` when there was nothing to hit (``detail`` says why)."""
    detail: str = ""
    """Killed PIDs, or why nothing was injected."""
    affected_sessions: tuple[str, ...] = ()
    """The sessions with a turn in flight whose host the fault took (a node
    fault's); empty when the fault names none."""
    recovered_seconds: float | None = None
    """Seconds from the fault to the next turn any session completed, or, when
    ``affected_sessions`` names some, to the moment each of them had completed
    its next turn; ``None`` when that never came."""
    answered_seconds: float | None = None
    """With ``affected_sessions``: seconds from the fault until the first client
    call sent to each of them after it had answered (its host back, its run
    loaded); the rest of ``recovered_seconds`` is the turn finishing."""


@dataclass(frozen=True, kw_only=True)
class ToolInvocation:
    """One real run of a tool's code, as the tool logged it (see ``InvocationLog``)."""

    session_id: str
    turn_id: str
    tool_call_id: str
    attempt: int = 1


@dataclass(frozen=True, kw_only=True)
class ResolutionRecord:
    """An approval or answer the campaign sent to a session."""

    turn_id: str
    interrupt_id: str
    kind: InterruptKind
    approved: bool
    answer: str | None = None
    accepted: bool | None
    """``True``: the RPC returned ``True``; ``False``: refused; ``None``: the
    call raised, so it may or may not have been applied."""


@dataclass(kw_only=True)
class SessionRecord:
    """One session of the campaign: what was sent and what the store holds after."""

    session_id: str
    turns_expected: int
    turns_completed: int = 0
    user_messages: list[tuple[str, bool | None]] = field(default_factory=list)
    """Each user message sent and whether it was accepted (``None``: the call
    raised, so it may or may not have been)."""
    resolutions: list[ResolutionRecord] = field(default_factory=list)
    messages: list[AgentMessage] = field(default_factory=list)
    """The whole transcript after the campaign, oldest first."""
    tool_calls: dict[tuple[str, str], AgentToolCall] = field(default_factory=dict)
    """The latest form of each tool call record the campaign observed while
    polling, by ``(turn_id, tool_call_id)`` (a turn's records leave the snapshot
    when the turn ends, so a record may never have been seen final)."""
    first_final: dict[tuple[str, str], AgentToolCall] = field(default_factory=dict)
    """The first final form of each record the campaign observed while polling."""
    events: list[AgentEvent] = field(default_factory=list)
    """The ``AgentEvents`` stream, oldest first: ``tool_call_deferred`` names every
    tool call and its effect, ``tool_call_finished`` its one result."""
    history: list[StepHistoryEntry] = field(default_factory=list)
    turn_count: int = 0
    """The turns the session's state counts after the campaign (ended or not)."""
    active_turn_id: str | None = None
    """The turn the session's state still runs after the campaign, if any."""
    stuck: str | None = None
    """Why the session did not finish its turns; ``None`` when it did."""
    answered_after: bool = False
    """The session answered a client call after the campaign (on a new host)."""


@dataclass(kw_only=True)
class CampaignRecord:
    """Everything the invariant checker reads."""

    sessions: dict[str, SessionRecord] = field(default_factory=dict)
    invocations: list[ToolInvocation] = field(default_factory=list)
    """Real tool runs from the tools' own logs; the checker counts them."""
    caller_errors: list[str] = field(default_factory=list)
    """Client calls that raised (a store error surfacing to a caller, for one)."""
    single_attempt_effects: frozenset[str] = frozenset({"non_idempotent_write", "unclassified"})


@dataclass(frozen=True, kw_only=True)
class Violation:
    """One broken promise the checker found."""

    invariant: str
    """A short name: ``"1 at most once"``, ``"3 user message"``, ``"stuck"``..."""
    session_id: str | None
    detail: str

    def __str__(self) -> str:
        where = f" [{self.session_id}]" if self.session_id else ""
        return f"{self.invariant}{where}: {self.detail}"
