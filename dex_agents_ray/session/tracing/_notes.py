"""What a Step's body tells its spans, and the stored trace context a root forgets.

``RunModel`` and ``CompactContext`` hand ``note_model_result`` what the runner
returned, and deferring the calls of a ``ToolCallsRequested`` tells
``note_tool_calls_created`` which records it made, so the ``chat`` span and the
metrics get them. With tracing and metrics off nobody listens and both do nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextvars import ContextVar
from typing import Any

from dex import Context

from dex_agents_ray.session._schema import AGENT_TRACE_CONTEXT

__all__ = [
    "MODEL_RESULT",
    "ModelResultNote",
    "forget_trace_context",
    "note_model_result",
    "note_tool_calls_created",
]


class ModelResultNote:
    """Where ``note_model_result`` leaves the runner's result for the ``chat`` span."""

    __slots__ = (
        "approvals_raised",
        "created_tool_calls",
        "records",
        "result",
        "summarized_through",
    )

    def __init__(self) -> None:
        self.result: object = None
        self.records: list[Any] = []
        """The tool call records the call saw (only when content is captured)."""
        self.summarized_through = 0
        """The summary's last sequence before the call (only when content is captured)."""
        self.created_tool_calls: list[str] = []
        """The IDs of the tool call records the call's result created."""
        self.approvals_raised = 0
        """How many of those wait for an approval."""


MODEL_RESULT: ContextVar[ModelResultNote | None] = ContextVar(
    "dex_agents_ray_model_result", default=None
)


def note_model_result(result: object) -> None:
    """Hand the runner's result of this attempt's model call to its ``chat`` span."""
    note = MODEL_RESULT.get()
    if note is not None:
        note.result = result


def note_tool_calls_created(tool_call_ids: Sequence[str], approvals: int) -> None:
    """Tell this attempt's ``chat`` span and metrics which tool call records its
    result created, and how many of them wait for an approval."""
    note = MODEL_RESULT.get()
    if note is not None:
        note.created_tool_calls.extend(tool_call_ids)
        note.approvals_raised += approvals


def forget_trace_context(context: Context) -> None:
    """An activation root without a valid span context deletes the stored one, so
    the activation's later spans do not join the previous activation's trace."""
    if AGENT_TRACE_CONTEXT.get(context) is not None:
        AGENT_TRACE_CONTEXT.delete(context)
