"""Compaction: a summary of older messages keeps the model input under the context
window (the spec's "Compaction"), and retention deletes summarized chunks.

``CompactionPolicy`` says when: before each model call ``RunModel`` asks the
runner (a ``ContextCompactionRunner``) for ``estimate_input_tokens(turn)``; at
``trigger_ratio`` of ``context_window_tokens`` it asks for
``select_compaction_cutoff(turn, retained_token_budget)``, and a cutoff past the
current summary moves the turn to ``CompactContext``, which calls
``summarize_context`` once and stores ``ContextSummary``. The helpers at the end
give framework adapters the shared rule (three UTF-8 bytes per token, cuts only
between turns).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from dex_agents_ray.session._api import CompactionPolicy
from dex_agents_ray.session._metadata import ModelCallMetadata
from dex_agents_ray.session._runner import AgentEventWriter, AgentTurnContext
from dex_agents_ray.session._values import AgentMessage, AgentUsage, ContextSummary, MessageRole

__all__ = [
    "CONTEXT_SUMMARY_INSTRUCTIONS",
    "CONTEXT_SUMMARY_NOTE_HEADER",
    "CONTEXT_SUMMARY_TRANSCRIPT_HEADER",
    "CompactContextInput",
    "CompactionPolicy",
    "ContextCompactionRunner",
    "ContextSummaryRequest",
    "ContextSummaryResult",
    "build_context_summary_omission_note",
    "build_context_summary_prompt",
    "estimate_stored_input_tokens",
    "estimate_text_tokens",
    "select_turn_boundary_cutoff",
]

CONTEXT_SUMMARY_NOTE_HEADER = "[Dex] Summary of the earlier conversation:"
"""How the built-in loop's model input starts once the session has a summary."""
CONTEXT_SUMMARY_INSTRUCTIONS = (
    "You write the summary that replaces the earlier part of a conversation between a "
    "user and an assistant that uses tools. Keep every fact, decision, open question, "
    "commitment and tool result the rest of the conversation may need, including IDs, "
    "names, numbers and which actions were already taken (never suggest repeating a "
    "write). Write plain text, no preamble."
)
"""The instructions of a summary call."""
CONTEXT_SUMMARY_TRANSCRIPT_HEADER = "[Dex] The conversation to summarize:"
"""How ``build_context_summary_prompt`` starts the transcript it writes."""
BYTES_PER_TOKEN = 3
"""``estimate_text_tokens``: three UTF-8 bytes per token, which errs high for English."""


def build_context_summary_omission_note(omitted_count: int) -> str:
    """The note a summary request carries when its oldest messages did not fit."""
    return f"[Dex] {omitted_count} earlier messages did not fit in this request and are left out."


@dataclass(frozen=True, kw_only=True)
class CompactContextInput:
    """``CompactContext``'s input: summarize through this sequence."""

    through_sequence: int
    """The last message the new summary covers."""


@dataclass(frozen=True, kw_only=True)
class ContextSummaryRequest:
    """What ``summarize_context`` sees: the summary so far and the messages after it
    through ``through_sequence``."""

    flow_id: str
    """The session ID."""
    turn_id: str
    """The turn that compacts."""
    attempt: int
    """The one-based ``CompactContext`` attempt."""
    previous_summary: ContextSummary | None
    """The summary the new one replaces; ``None`` for the first."""
    messages: Sequence[AgentMessage]
    """The messages after ``previous_summary`` through ``through_sequence``."""
    through_sequence: int
    """The last message the new summary covers."""
    input_token_budget: int
    """The policy's ``context_window_tokens``: the summary request must fit it."""
    session_settings: Mapping[str, Any] = field(default_factory=dict)
    """The turn's session settings (``resolve_model`` picks the summary's model)."""
    events: AgentEventWriter | None = None
    """Writes text deltas of the summary call, as ``RunModel`` does."""
    heartbeat: Callable[[], Awaitable[None]] | None = None
    """Reports progress during a long summary call."""


@dataclass(frozen=True, kw_only=True)
class ContextSummaryResult:
    """What ``summarize_context`` returns."""

    text: str
    """The summary: non-blank."""
    usage: AgentUsage = field(default_factory=AgentUsage)
    """The summary call's usage, added to the session's."""
    model_call_metadata: ModelCallMetadata | None = None
    """Names the summary call's ``chat`` span; ``None`` when unknown."""


@runtime_checkable
class ContextCompactionRunner(Protocol):
    """A runner that compacts (needed for ``AgentSessionOptions.compaction``)."""

    def estimate_input_tokens(self, turn: AgentTurnContext) -> int | Awaitable[int]:
        """The input tokens of the turn's next model call."""
        ...

    def select_compaction_cutoff(
        self, turn: AgentTurnContext, retained_token_budget: int
    ) -> int | None:
        """The last message to summarize so that about ``retained_token_budget`` tokens
        stay after it, or ``None`` when no cut is possible now."""
        ...

    async def summarize_context(self, request: ContextSummaryRequest) -> ContextSummaryResult:
        """One summary call."""
        ...


# -- the adapters' shared rule -----------------------------------------------------------


def estimate_text_tokens(text: str) -> int:
    """Tokens of ``text``: its UTF-8 bytes over three, rounded up."""
    return -(-len(text.encode("utf-8")) // BYTES_PER_TOKEN)


def estimate_stored_input_tokens(turn: AgentTurnContext, *, fixed_input_tokens: int = 0) -> int:
    """Each stored ``framework_item`` (and the summary) counted with
    ``estimate_text_tokens``, plus ``fixed_input_tokens``."""
    total = fixed_input_tokens
    if turn.context_summary is not None:
        total += estimate_text_tokens(turn.context_summary.text)
    return total + sum(estimate_text_tokens(m.framework_item) for m in turn.messages)


def select_turn_boundary_cutoff(turn: AgentTurnContext, retained_token_budget: int) -> int | None:
    """The last message of the newest earlier turn such that the messages after it
    fit ``retained_token_budget``, cutting only between turns and never inside the
    running turn; ``None`` while ``turn.framework_run_state`` is set (a resumed call
    continues from that state) or when no earlier turn can go."""
    if turn.framework_run_state is not None:
        return None
    earlier = [m for m in turn.messages if m.turn_id != turn.turn_id]
    if not earlier:
        return None
    kept = sum(estimate_text_tokens(m.framework_item) for m in turn.messages)
    cutoff: int | None = None
    for index, message in enumerate(earlier):
        kept -= estimate_text_tokens(message.framework_item)
        boundary = index + 1 == len(earlier) or earlier[index + 1].turn_id != message.turn_id
        if boundary:
            cutoff = message.sequence
            if kept <= retained_token_budget:
                break
    return cutoff


def build_context_summary_prompt(request: ContextSummaryRequest) -> str:
    """One plain-text prompt for a summary call that fits ``input_token_budget``:
    the transcript header, the previous summary, then the messages, leaving out the
    oldest (with the omission note) when they do not fit.

    Everything counts against the budget (header, note and the blank lines between
    parts), so ``estimate_text_tokens`` of the prompt never exceeds it. Messages
    stay whole; a previous summary too long for the budget is cut at its end, as
    the note and the newest message matter more than its last lines.

    Raises:
        ValueError: ``input_token_budget`` cannot hold the header, plus the
            omission note when messages must be left out.
    """
    limit = request.input_token_budget * BYTES_PER_TOKEN  # tokens <= budget iff bytes <= this
    rendered = [_render(message) for message in request.messages]
    summary = None
    if request.previous_summary is not None:
        summary = f"{CONTEXT_SUMMARY_NOTE_HEADER}\n{request.previous_summary.text}"
    everything = [CONTEXT_SUMMARY_TRANSCRIPT_HEADER, *([summary] if summary else []), *rendered]
    whole = _SEPARATOR.join(everything)
    if _size(whole) <= limit:
        return whole
    # Room for the note with the most digits it can have: the real one is no longer.
    note = _SEPARATOR_BYTES + _size(build_context_summary_omission_note(len(rendered)))
    used = _size(CONTEXT_SUMMARY_TRANSCRIPT_HEADER) + (note if rendered else 0)
    if used > limit:
        raise ValueError(
            f"ContextSummaryRequest.input_token_budget is {request.input_token_budget} "
            f"tokens; the summary prompt needs at least {-(-used // BYTES_PER_TOKEN)} for "
            "its header and omission note"
        )
    lines = [CONTEXT_SUMMARY_TRANSCRIPT_HEADER]
    if summary is not None:
        cut = _cut(summary, limit - used - _SEPARATOR_BYTES)
        if len(cut) > len(CONTEXT_SUMMARY_NOTE_HEADER) + 1:  # more than the header
            lines.append(cut)
            used += _SEPARATOR_BYTES + _size(cut)
    kept: list[str] = []
    for text in reversed(rendered):
        cost = _SEPARATOR_BYTES + _size(text)
        if used + cost > limit:
            break
        kept.append(text)
        used += cost
    omitted = len(rendered) - len(kept)
    if omitted:
        lines.append(build_context_summary_omission_note(omitted))
    lines.extend(reversed(kept))
    return _SEPARATOR.join(lines)


_SEPARATOR = "\n\n"
_SEPARATOR_BYTES = len(_SEPARATOR)


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def _cut(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes, never inside a character."""
    if limit <= 0:
        return ""
    return text.encode("utf-8")[:limit].decode("utf-8", errors="ignore")


def _render(message: AgentMessage) -> str:
    role = message.role.value
    if message.role is MessageRole.TOOL:
        return f"{role} {message.tool_name or ''}: {message.tool_output or ''}"
    if message.tool_name and message.role is MessageRole.ASSISTANT and not message.text:
        return f"{role}: (calls {message.tool_name})"
    return f"{role}: {message.text or message.framework_item}"
