"""Stored messages as Pydantic AI's own history, and back.

Each stored ``framework_item`` is Pydantic AI's serialized history
(``ModelMessagesTypeAdapter`` JSON): a list holding one ``ModelRequest`` part
group or one ``ModelResponse``. A request with several tool results is stored
as one message per result (Pydantic AI merges adjacent requests again), so the
session shows each result with its tool call ID.

The system prompt parts Pydantic AI writes into a conversation's first request
are stored with the first response (the session stored the prompt itself
before the model call) and are moved back to the front of the first request
when the history is rebuilt, where Pydantic AI keeps them.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic_ai import messages as pai

from dex_agents_ray.session import (
    CONTEXT_SUMMARY_NOTE_HEADER,
    OUTCOME_UNKNOWN_TEXT,
    AgentMessage,
    AgentToolCall,
    AgentToolCallStatus,
    AgentTurnContext,
    FrameworkMessage,
    MessageRole,
    describe_tool_call_outcome,
)

__all__ = [
    "MODEL_RETRY_ERROR_PREFIX",
    "History",
    "decode_item",
    "encode_messages",
    "framework_messages",
    "rebuild_history",
    "record_result",
    "user_message",
]

MODEL_RETRY_ERROR_PREFIX = "ModelRetry: "
"""How a tool's ``ModelRetry`` is recorded (``failed``, the error starts with it), so
the next model call shows it as Pydantic AI does (a retry prompt), not as a failure."""


def encode_messages(messages: Sequence[pai.ModelMessage]) -> str:
    """``ModelMessagesTypeAdapter`` JSON of ``messages``."""
    return pai.ModelMessagesTypeAdapter.dump_json(list(messages)).decode()


_DECODED: OrderedDict[str, tuple[pai.ModelMessage, ...]] = OrderedDict()
"""The messages of recently decoded items, by the item's JSON: a session's
``RunModel`` Steps decode the same stored history again and again. Runs never
change the history they are given (they build new messages with ``replace``)."""
_DECODED_LIMIT = 8192
_DECODED_LOCK = threading.Lock()


def decode_item(message: AgentMessage) -> list[pai.ModelMessage]:
    """The Pydantic AI messages of one stored message.

    A user message another runner stored (such as a note) becomes a user prompt.

    Raises:
        ValueError: The item is neither Pydantic AI history nor user text.
    """
    item = message.framework_item
    with _DECODED_LOCK:
        cached = _DECODED.get(item)
        if cached is not None:
            _DECODED.move_to_end(item)
            return list(cached)
    try:
        decoded = tuple(pai.ModelMessagesTypeAdapter.validate_json(item))
    except ValueError:
        if message.role is MessageRole.USER and message.text is not None:
            return [pai.ModelRequest(parts=[pai.UserPromptPart(message.text)])]
        raise ValueError(f"stored message {message.sequence} is not Pydantic AI history") from None
    with _DECODED_LOCK:
        _DECODED[item] = decoded
        if len(_DECODED) > _DECODED_LIMIT:
            _DECODED.popitem(last=False)
    return list(decoded)


def user_message(content: str | Sequence[pai.UserContent], text: str) -> FrameworkMessage:
    """A ``user`` message holding one user prompt request."""
    request = pai.ModelRequest(parts=[pai.UserPromptPart(content)])
    return FrameworkMessage(
        role=MessageRole.USER, framework_item=encode_messages([request]), text=text
    )


def _tool_result_text(part: pai.ToolReturnPart | pai.RetryPromptPart) -> str:
    if isinstance(part, pai.ToolReturnPart):
        return part.model_response_str()
    return part.model_response()


def _response_message(
    response: pai.ModelResponse,
    preamble: Sequence[pai.ModelMessage],
    display: str | None,
    session_ids: Mapping[str, str],
) -> FrameworkMessage:
    calls = response.tool_calls
    text = display if display is not None else (response.text or None)
    single = calls[0] if len(calls) == 1 else None
    return FrameworkMessage(
        role=MessageRole.ASSISTANT,
        framework_item=encode_messages([*preamble, response]),
        text=text,
        tool_call_id=session_ids.get(single.tool_call_id, single.tool_call_id)
        if single is not None
        else None,
        tool_name=single.tool_name if single is not None else None,
        tool_arguments=single.args_as_json_str() if single is not None else None,
    )


def _request_messages(
    request: pai.ModelRequest, session_ids: Mapping[str, str]
) -> list[FrameworkMessage]:
    stored: list[FrameworkMessage] = []
    for part in request.parts:
        one = replace(request, parts=[part])
        item = encode_messages([one])
        if isinstance(part, pai.ToolReturnPart | pai.RetryPromptPart) and part.tool_name:
            stored.append(
                FrameworkMessage(
                    role=MessageRole.TOOL,
                    framework_item=item,
                    tool_call_id=session_ids.get(part.tool_call_id, part.tool_call_id),
                    tool_name=part.tool_name,
                    tool_output=_tool_result_text(part),
                    text=_tool_result_text(part),
                )
            )
        elif isinstance(part, pai.UserPromptPart):
            text = part.content if isinstance(part.content, str) else _text_of(part.content)
            stored.append(FrameworkMessage(role=MessageRole.USER, framework_item=item, text=text))
        else:  # a retry prompt or feedback for the model, or any other request part
            shown = _part_text(part)
            stored.append(FrameworkMessage(role=MessageRole.USER, framework_item=item, text=shown))
    return stored


def _part_text(part: pai.ModelRequestPart) -> str | None:
    render = getattr(part, "model_response", None)
    if callable(render):
        rendered = render()
        if isinstance(rendered, str):
            return rendered
    content = getattr(part, "content", None)
    return content if isinstance(content, str) else None


def _text_of(content: Sequence[pai.UserContent]) -> str:
    return "\n".join(item for item in content if isinstance(item, str))


def framework_messages(
    messages: Sequence[pai.ModelMessage],
    *,
    system_parts: Sequence[pai.SystemPromptPart] = (),
    final_text: str | None = None,
    session_ids: Mapping[str, str] | None = None,
    response_ids: Mapping[str, str] | None = None,
) -> list[FrameworkMessage]:
    """The messages to store for ``messages`` (new history of one model call).

    ``system_parts`` ride with the first response (see the module); ``final_text``
    is the display text of the last response (a structured output as JSON);
    ``session_ids`` maps the framework's tool call IDs to the session's where they
    differ, for the messages' ``tool_call_id`` (the items keep the framework's);
    ``response_ids`` does the same for the calls of new responses (a framework ID
    repeated in the turn names a new session call there).
    """
    ids = session_ids or {}
    new_ids = {**ids, **(response_ids or {})}
    stored: list[FrameworkMessage] = []
    preamble: list[pai.ModelMessage] = (
        [pai.ModelRequest(parts=list(system_parts))] if system_parts else []
    )
    responses = [m for m in messages if isinstance(m, pai.ModelResponse)]
    last = responses[-1] if responses else None
    for message in messages:
        if isinstance(message, pai.ModelResponse):
            display = final_text if message is last else None
            stored.append(_response_message(message, preamble, display, new_ids))
            preamble = []
        else:
            stored.extend(_request_messages(message, ids))
    return stored


@dataclass
class History:
    """A turn's Pydantic AI history, rebuilt from committed state only."""

    messages: list[pai.ModelMessage] = field(default_factory=list)
    """Every stored message, each tool call paired with a result (an orphaned call
    gets the outcome-unknown text), up to the turn's open calls."""
    open_calls: list[pai.ToolCallPart] = field(default_factory=list)
    """The last response's calls without a stored result: the tool Steps' calls when
    the turn resumes."""
    turn_prompt: pai.ModelRequest | None = None
    """The turn's own user prompt request when it ends the history (a first call)."""


def _unknown_returns(calls: Sequence[pai.ToolCallPart]) -> pai.ModelRequest:
    return pai.ModelRequest(
        parts=[
            pai.ToolReturnPart(
                tool_name=call.tool_name,
                content=OUTCOME_UNKNOWN_TEXT,
                tool_call_id=call.tool_call_id,
            )
            for call in calls
        ]
    )


def _hoist_system_parts(messages: list[pai.ModelMessage]) -> list[pai.ModelMessage]:
    system: list[pai.ModelRequestPart] = []
    kept: list[pai.ModelMessage] = []
    for message in messages:
        if (
            isinstance(message, pai.ModelRequest)
            and message.parts
            and all(isinstance(p, pai.SystemPromptPart) for p in message.parts)
            and kept
        ):
            system.extend(message.parts)
            continue
        kept.append(message)
    if system:
        for index, message in enumerate(kept):
            if isinstance(message, pai.ModelRequest):
                kept[index] = replace(message, parts=[*system, *message.parts])
                break
    return kept


def _with_images(
    messages: list[pai.ModelMessage], images: Sequence[pai.BinaryContent]
) -> list[pai.ModelMessage]:
    """A stored user message's request with its images' bytes after its text."""
    shown: list[pai.ModelMessage] = []
    for message in messages:
        if isinstance(message, pai.ModelRequest):
            parts = [
                replace(p, content=[p.content, *images])
                if isinstance(p, pai.UserPromptPart) and isinstance(p.content, str)
                else p
                for p in message.parts
            ]
            message = replace(message, parts=parts)
        shown.append(message)
    return shown


def rebuild_history(
    turn: AgentTurnContext, image_bytes: Mapping[str, bytes] | None = None
) -> History:
    """The model input of ``turn`` from its stored messages (and summary).

    ``image_bytes`` (by SHA-256) gives user messages their images; without it
    the model sees their text only.
    """
    flat: list[pai.ModelMessage] = []
    if turn.context_summary is not None:
        note = f"{CONTEXT_SUMMARY_NOTE_HEADER}\n{turn.context_summary.text}"
        flat.append(pai.ModelRequest(parts=[pai.UserPromptPart(note)]))
    for stored in turn.messages:
        decoded = decode_item(stored)
        if image_bytes is not None and stored.images and stored.role is MessageRole.USER:
            images = [
                pai.BinaryContent(data=image_bytes[ref.sha256], media_type=ref.mime_type)
                for ref in stored.images
                if ref.sha256 in image_bytes
            ]
            decoded = _with_images(decoded, images)
        flat.extend(decoded)
    flat = _hoist_system_parts(flat)
    history = History()
    pending: dict[str, pai.ToolCallPart] = {}
    for message in flat:
        if isinstance(message, pai.ModelResponse):
            if pending:
                history.messages.append(_unknown_returns(list(pending.values())))
                pending.clear()
            pending.update({call.tool_call_id: call for call in message.tool_calls})
            history.messages.append(message)
            continue
        answered = [
            p
            for p in message.parts
            if isinstance(p, pai.ToolReturnPart | pai.RetryPromptPart) and p.tool_name
        ]
        for part in answered:
            pending.pop(part.tool_call_id, None)
        if pending and any(isinstance(p, pai.UserPromptPart) for p in message.parts):
            history.messages.append(_unknown_returns(list(pending.values())))
            pending.clear()
        history.messages.append(message)
    history.open_calls = list(pending.values())
    last = history.messages[-1] if history.messages else None
    if (
        not history.open_calls
        and isinstance(last, pai.ModelRequest)
        and all(isinstance(p, pai.UserPromptPart | pai.SystemPromptPart) for p in last.parts)
        and any(isinstance(p, pai.UserPromptPart) for p in last.parts)
    ):
        history.turn_prompt = last
    return history


def record_result(record: AgentToolCall | None, call: pai.ToolCallPart) -> Any:
    """The ``DeferredToolResults.calls`` value of a call's record: ``ToolReturn`` of
    the model-visible text, ``ModelRetry`` for a tool's retry, ``ToolFailed`` for a
    failure; the outcome-unknown text when the turn has no record of the call."""
    from pydantic_ai import ModelRetry, ToolFailed, ToolReturn

    if record is None or record.tool_name != call.tool_name:
        return ToolReturn(OUTCOME_UNKNOWN_TEXT)
    if record.status is AgentToolCallStatus.SUCCEEDED:
        return ToolReturn(record.output or "")
    if record.status is AgentToolCallStatus.FAILED:
        error = record.error or ""
        if error.startswith(MODEL_RETRY_ERROR_PREFIX):
            return ModelRetry(error.removeprefix(MODEL_RETRY_ERROR_PREFIX))
        return ToolFailed(error or describe_tool_call_outcome(record))
    return ToolReturn(describe_tool_call_outcome(record))
