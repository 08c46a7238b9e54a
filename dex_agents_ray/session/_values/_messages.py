"""Messages: what the user sent, what the session stored (the window, its chunks
and their index), where a turn's replies start, and the compaction summary."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from dex_agents_ray.engine import share_decoded_values
from dex_agents_ray.media import AgentImageReference
from dex_agents_ray.session._values._base import STATE_SCHEMA_VERSION, check_schema_version, utc_now
from dex_agents_ray.session._wire import wire_value

__all__ = [
    "AgentMessage",
    "AgentMessageChunk",
    "AgentMessageChunkInfo",
    "AgentMessageIndex",
    "AgentUserMessage",
    "ContextSummary",
    "FrameworkMessage",
    "MessageRole",
    "TurnReplySequence",
]


class MessageRole(StrEnum):
    """Who a stored message is from."""

    USER = "user"
    """The user, or a session note the model reads as user text."""
    ASSISTANT = "assistant"
    """The model: an answer, reasoning, or a tool request."""
    TOOL = "tool"
    """A tool result."""


@dataclass(frozen=True, kw_only=True)
@wire_value
class FrameworkMessage:
    """One message a runner asks the session to store.

    ``framework_item`` is the framework's native JSON, replayed unchanged; the
    other fields are a display projection for snapshots and UIs.
    """

    role: MessageRole
    """Who the message is from."""
    framework_item: str
    """Framework-native JSON text, the replay truth; opaque to the session."""
    text: str | None = None
    """Display text; ``None`` for a message without text (a bare tool request)."""
    tool_call_id: str | None = None
    """The tool call a tool request or result belongs to; ``None`` otherwise."""
    tool_name: str | None = None
    """The tool of a tool request or result; ``None`` otherwise."""
    tool_arguments: str | None = None
    """The arguments JSON of a tool request; ``None`` otherwise."""
    tool_output: str | None = None
    """The model-visible output of a tool result; ``None`` otherwise."""
    images: tuple[AgentImageReference, ...] = ()
    """References to images the message shows; empty for none. Never bytes."""


@dataclass(frozen=True, kw_only=True)
@wire_value
class AgentMessage:
    """One stored message of the session, with its sequence (from 1)."""

    sequence: int
    """Position in the session, starting at 1; never reused."""
    turn_id: str
    """The turn that stored it (``"turn-<n>"``)."""
    role: MessageRole
    """Who the message is from."""
    framework_item: str
    """Framework-native JSON text that the runner replays."""
    text: str | None = None
    """Display text; ``None`` when the message has none."""
    tool_call_id: str | None = None
    """The tool call of a tool request or result; ``None`` otherwise."""
    tool_name: str | None = None
    """The tool of a tool request or result; ``None`` otherwise."""
    tool_arguments: str | None = None
    """The arguments JSON of a tool request; ``None`` otherwise."""
    tool_output: str | None = None
    """The output of a tool result; ``None`` otherwise."""
    images: tuple[AgentImageReference, ...] = ()
    """Image references; empty for none."""
    created_at: datetime = field(default_factory=utc_now)
    """When the session stored it (the host's clock)."""

    @staticmethod
    def from_framework(
        message: FrameworkMessage, *, sequence: int, turn_id: str, created_at: datetime
    ) -> AgentMessage:
        """The stored form of ``message`` at ``sequence``."""
        return AgentMessage(
            sequence=sequence,
            turn_id=turn_id,
            role=message.role,
            framework_item=message.framework_item,
            text=message.text,
            tool_call_id=message.tool_call_id,
            tool_name=message.tool_name,
            tool_arguments=message.tool_arguments,
            tool_output=message.tool_output,
            images=message.images,
            created_at=created_at,
        )


@dataclass(frozen=True, kw_only=True)
@wire_value
class AgentMessageChunk:
    """Consecutive older messages moved out of the window; never changed again."""

    first_sequence: int
    """Sequence of the first message."""
    last_sequence: int
    """Sequence of the last message."""
    messages: tuple[AgentMessage, ...]
    """The messages, in sequence order."""
    schema_version: int = STATE_SCHEMA_VERSION
    """The stored format's version."""

    def __post_init__(self) -> None:
        check_schema_version("AgentMessageChunk", self.schema_version)


@dataclass(frozen=True, kw_only=True)
class AgentMessageChunkInfo:
    """Where one kept chunk is, as the index lists it."""

    first_sequence: int
    """Sequence of the chunk's first message (its ``AgentMessageChunks`` key)."""
    last_sequence: int
    """Sequence of the chunk's last message."""
    encoded_bytes: int
    """Size of the chunk's encoded JSON."""


@dataclass(frozen=True, kw_only=True)
@wire_value
class AgentMessageIndex:
    """Where the stored messages are: the kept chunks and the window."""

    chunks: tuple[AgentMessageChunkInfo, ...] = ()
    """Every kept chunk, oldest first."""
    window_first_sequence: int = 1
    """Sequence of the first message in the ``AgentMessages`` window."""
    first_sequence: int = 1
    """Sequence of the oldest message still stored."""
    deleted_before_sequence: int | None = None
    """Retention deleted every message before this sequence; ``None`` while
    nothing was deleted."""
    schema_version: int = STATE_SCHEMA_VERSION
    """The stored format's version."""

    def __post_init__(self) -> None:
        check_schema_version("AgentMessageIndex", self.schema_version)


@dataclass(frozen=True, kw_only=True)
class TurnReplySequence:
    """Where the latest turn's replies start."""

    turn_id: str
    """The turn."""
    first_sequence: int
    """Sequence of the turn's first message after its user message(s)."""


@dataclass(frozen=True, kw_only=True)
@wire_value
class AgentUserMessage:
    """A user message, queued on ``QueuedUserMessages`` by ``send_user_message``."""

    text: str
    """The message text; must not be blank."""
    images: tuple[AgentImageReference, ...] = ()
    """Image references; empty for none. Needs an ``ImageUserMessageBuilder`` runner."""
    plan_mode: bool = False
    """Start a planning turn (plan mode must be enabled)."""


@dataclass(frozen=True, kw_only=True)
@wire_value
class ContextSummary:
    """The summary of older messages that context compaction wrote."""

    generation: int
    """Starts at 1; each compaction adds 1."""
    first_sequence: int
    """Sequence of the first summarized message (1)."""
    last_sequence: int
    """Sequence of the last summarized message."""
    text: str
    """The summary."""
    created_at: datetime = field(default_factory=utc_now)
    """When it was written."""


# Every Step of a session reads these back (the message window in each model
# call): the engine decodes each stored JSON text once per process.
share_decoded_values(AgentMessage, AgentMessageChunk, AgentMessageIndex)
