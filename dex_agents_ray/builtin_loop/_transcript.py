"""The model input of a ``RunModel``, rebuilt from committed state only.

Every stored tool call is paired with a result: the results of the previous
model response come from the turn's final records, and a call without a
result anywhere gets the outcome-unknown text, so an orphaned call never
reaches a provider.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from dex_agents_ray.builtin_loop._items import decode_item
from dex_agents_ray.builtin_loop._model import (
    ModelInputItem,
    ModelOutputItem,
    ModelToolCall,
    ToolResultItem,
    UserTextItem,
)
from dex_agents_ray.session import (
    OUTCOME_UNKNOWN_TEXT,
    AgentMessage,
    AgentTurnContext,
    MessageRole,
    describe_tool_call_outcome,
)

__all__ = ["Transcript", "build_transcript", "without_images"]


@dataclass
class Transcript:
    """The model input so far and what the previous model response left open."""

    items: list[ModelInputItem] = field(default_factory=list)
    """Every stored item, paired with results, then the new results."""
    new_results: list[ToolResultItem] = field(default_factory=list)
    """Results of the previous response's calls, from the records; not stored yet."""
    previous_output: list[ModelOutputItem] = field(default_factory=list)
    turn_start: int | None = None
    """Where the turn's own items start in ``items`` (the plan note goes there)."""
    """The previous response's output items, when ``new_results`` answer them."""


def _unknown_result(call: ModelToolCall) -> ToolResultItem:
    return ToolResultItem(
        tool_call_id=call.tool_call_id, tool_name=call.tool_name, output=OUTCOME_UNKNOWN_TEXT
    )


def _decode_message(message: AgentMessage) -> ModelInputItem:
    try:
        return decode_item(message.framework_item)
    except ValueError:
        # A user message stored by another runner, such as a note: its text is enough.
        if message.role is MessageRole.USER and message.text is not None:
            return UserTextItem(text=message.text)
        raise ValueError(f"stored message {message.sequence} is not a built-in loop item") from None


def build_transcript(turn: AgentTurnContext) -> Transcript:
    """Rebuild the model input from ``turn.messages`` and, when resuming, its records."""
    transcript = Transcript()
    pending: dict[str, ModelToolCall] = {}
    response: list[ModelOutputItem] = []
    previous: ModelInputItem | None = None
    for message in turn.messages:
        item = _decode_message(message)
        if transcript.turn_start is None and message.turn_id == turn.turn_id:
            if pending and isinstance(item, UserTextItem):
                transcript.items.extend(_unknown_result(call) for call in pending.values())
                pending.clear()
            transcript.turn_start = len(transcript.items)
        if isinstance(item, ToolResultItem):
            if pending.pop(item.tool_call_id, None) is not None:
                transcript.items.append(item)
            previous = item
            continue
        new_response = isinstance(item, ModelOutputItem) and not isinstance(
            previous, ModelOutputItem
        )
        if pending and (isinstance(item, UserTextItem) or new_response):
            transcript.items.extend(_unknown_result(call) for call in pending.values())
            pending.clear()
        if isinstance(item, ModelOutputItem):
            if new_response:
                response = []
            response.append(item)
            for call in item.tool_calls:
                pending[call.tool_call_id] = call
        transcript.items.append(item)
        previous = item
    if pending:
        transcript.new_results = [_record_result(turn, call) for call in pending.values()]
        transcript.previous_output = response
        transcript.items.extend(transcript.new_results)
    return transcript


def _record_result(turn: AgentTurnContext, call: ModelToolCall) -> ToolResultItem:
    record = turn.recorded_tool_call(call.tool_call_id) if turn.is_resuming else None
    if record is None or record.tool_name != call.tool_name:
        return _unknown_result(call)
    return ToolResultItem(
        tool_call_id=call.tool_call_id,
        tool_name=call.tool_name,
        output=describe_tool_call_outcome(record),
        images=record.images,
    )


def without_images(items: Sequence[ModelInputItem]) -> list[ModelInputItem]:
    """``items`` with every image reference dropped, for a runner without a media store."""
    stripped: list[ModelInputItem] = []
    for item in items:
        if isinstance(item, UserTextItem) and item.images:
            stripped.append(UserTextItem(text=item.text))
        elif isinstance(item, ToolResultItem) and item.images:
            stripped.append(
                ToolResultItem(
                    tool_call_id=item.tool_call_id, tool_name=item.tool_name, output=item.output
                )
            )
        else:
            stripped.append(item)
    return stripped
