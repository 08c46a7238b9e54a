"""Tool effects, policies, built-in tools, and the errors tools raise.

Errors, drawn::

    ToolExecutionError        a failure the model should see; recorded ``failed``, never retried
    ToolOutcomeUnknownError   a write was sent and may have taken effect; ``outcome_unknown``
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from dex_agents_ray.errors import DexAgentsError

__all__ = [
    "MISSING_TOOL_TASK_POLLER",
    "TOOL_CALL_NOT_RUN_ERROR_PREFIX",
    "TOOL_CALL_SKIPPED_AFTER_WRITE_DETAIL",
    "BuiltInTool",
    "ToolEffect",
    "ToolExecutionError",
    "ToolOutcomeUnknownError",
    "ToolPolicy",
    "is_approval_required",
]

TOOL_CALL_NOT_RUN_ERROR_PREFIX = "the tool did not run, so it is safe to call again"
TOOL_CALL_SKIPPED_AFTER_WRITE_DETAIL = "an earlier write of the same response did not succeed"
"""Why an ordered write was skipped (after ``TOOL_CALL_NOT_RUN_ERROR_PREFIX + ": "``)."""
"""Start of ``error`` on a call whose tool Step never started (``NOT_STARTED``)."""

MISSING_TOOL_TASK_POLLER = (
    "the tool started a task, but the runner cannot poll tool tasks (no poll_tool_task)"
)
"""``error`` of a call whose tool returned ``ToolTaskStarted`` to a runner without a poller."""


class ToolEffect(StrEnum):
    """What a tool call may do to the world; it picks the tool Step and retries."""

    READ = "read"
    """No effect: ``CallTool``, up to 3 attempts, then ``failed``."""
    IDEMPOTENT_WRITE = "idempotent_write"
    """Safe to repeat with the same idempotency key: ``CallTool``, up to 3 attempts,
    then ``outcome_unknown``."""
    NON_IDEMPOTENT_WRITE = "non_idempotent_write"
    """``CallSingleAttemptTool``: one attempt, then ``outcome_unknown``; approval by default."""
    UNCLASSIFIED = "unclassified"
    """Treated like a non-idempotent write; the default effect."""


class BuiltInTool(StrEnum):
    """Session features offered to the model as tools."""

    ASK_USER = "ask_user"
    DURABLE_WAIT = "durable_wait"
    WRITE_TODOS = "write_todos"


_APPROVAL_BY_DEFAULT = frozenset({ToolEffect.NON_IDEMPOTENT_WRITE, ToolEffect.UNCLASSIFIED})


def is_approval_required(effect: ToolEffect, requires_approval: bool | None = None) -> bool:
    """Whether a call needs approval: explicit setting, else the effect's default."""
    if requires_approval is not None:
        return requires_approval
    return effect in _APPROVAL_BY_DEFAULT


@dataclass(frozen=True, kw_only=True)
class ToolPolicy:
    """How the session treats calls of one tool."""

    effect: ToolEffect
    """The tool's effect class; picks ``CallTool`` or ``CallSingleAttemptTool``."""
    requires_approval: bool | None = None
    """``None`` uses the effect's default (writes that cannot be repeated need approval)."""

    def __init__(self, effect: ToolEffect, requires_approval: bool | None = None) -> None:
        object.__setattr__(self, "effect", ToolEffect(effect))
        object.__setattr__(self, "requires_approval", requires_approval)

    @property
    def approval_required(self) -> bool:
        return is_approval_required(self.effect, self.requires_approval)


class ToolExecutionError(DexAgentsError):
    """A tool failure the model should see: the call records ``failed``, no retry."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ToolOutcomeUnknownError(DexAgentsError):
    """The tool sent a write and cannot tell whether it took effect: ``outcome_unknown``.

    By default the model reads the outcome-unknown text followed by ``message``.
    ``show_detail=False`` is for an outcome the tool itself reported unknown (an
    MCP result with ``outcome: unknown``, a connector's uncertain branch): the
    model then reads exactly ``OUTCOME_UNKNOWN_TOOL_RESULT``, and ``message``,
    text the tool wrote, goes only to the record's ``error``.
    """

    def __init__(self, message: str, *, show_detail: bool = True) -> None:
        super().__init__(message)
        self.message = message
        self.show_detail = show_detail
        """Whether the model reads ``message`` after the outcome-unknown text."""

    def __reduce__(self) -> tuple[Any, ...]:
        # Keep ``show_detail`` across pickling (Ray errors), which replays only ``args``.
        return (_outcome_unknown_error, (type(self), self.message, self.show_detail))


def _outcome_unknown_error(
    cls: type[ToolOutcomeUnknownError], message: str, show_detail: bool
) -> ToolOutcomeUnknownError:
    return cls(message, show_detail=show_detail)
