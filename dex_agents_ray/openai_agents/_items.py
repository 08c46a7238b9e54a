"""Stored messages as the Agents SDK's input items, and back.

Each stored ``framework_item`` is JSON ``{"agent": <name>, "item": <input item>}``:
one Responses-format input item (``TResponseInputItem``: a user message, an
assistant message, a ``function_call``, a ``function_call_output``, a reasoning
item…) and the agent that produced it, so the agent that answered last starts
the next turn. A user message another runner stored (a note) is read as user text.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dex_agents_ray.session import (
    CONTEXT_SUMMARY_NOTE_HEADER,
    OUTCOME_UNKNOWN_TEXT,
    AgentTurnContext,
    FrameworkMessage,
    MessageRole,
)

__all__ = ["History", "framework_messages", "jsonable", "rebuild_history", "user_item"]


def jsonable(items: Iterable[Any]) -> list[dict[str, Any]]:
    """Input items as plain JSON data (the SDK mixes dicts and pydantic models)."""

    def dump(value: Any) -> Any:
        model_dump = getattr(value, "model_dump", None)
        if callable(model_dump):
            return model_dump(exclude_unset=True)
        raise TypeError(f"an input item of type {type(value).__name__} is not JSON data")

    loaded: list[dict[str, Any]] = json.loads(json.dumps(list(items), default=dump))
    return loaded


def user_item(text: str) -> dict[str, Any]:
    """The input item of a user message."""
    return {"role": "user", "content": text}


def _text(item: Mapping[str, Any]) -> str | None:
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [
            str(part["text"])
            for part in content
            if isinstance(part, Mapping) and isinstance(part.get("text"), str)
        ]
        return "".join(texts) if texts else None
    return None


def _message(
    item: dict[str, Any], agent: str | None, names: Mapping[str, str], ids: Mapping[str, str]
) -> FrameworkMessage:
    encoded = json.dumps({"agent": agent, "item": item}, separators=(",", ":"))
    kind = item.get("type")
    if kind == "function_call":
        call_id = str(item.get("call_id", ""))
        return FrameworkMessage(
            role=MessageRole.ASSISTANT,
            framework_item=encoded,
            tool_call_id=ids.get(call_id, call_id),
            tool_name=item.get("name"),
            tool_arguments=item.get("arguments"),
        )
    if kind == "function_call_output":
        call_id = str(item.get("call_id", ""))
        output = item.get("output")
        shown = output if isinstance(output, str) else json.dumps(output)
        return FrameworkMessage(
            role=MessageRole.TOOL,
            framework_item=encoded,
            text=shown,
            tool_call_id=ids.get(call_id, call_id),
            tool_name=names.get(call_id),
            tool_output=shown,
        )
    role = MessageRole.USER if item.get("role") in ("user", "system", "developer") else None
    return FrameworkMessage(
        role=role or MessageRole.ASSISTANT, framework_item=encoded, text=_text(item)
    )


def framework_messages(
    items: Sequence[dict[str, Any]],
    agents: Sequence[str | None],
    *,
    known_names: Mapping[str, str] | None = None,
    session_ids: Mapping[str, str] | None = None,
) -> list[FrameworkMessage]:
    """The messages to store for ``items`` (each with the agent that produced it).

    ``session_ids`` maps framework call IDs to the session's where they differ, for
    the messages' ``tool_call_id``; the items keep the framework's.
    """
    names = dict(known_names or {})
    ids = session_ids or {}
    stored: list[FrameworkMessage] = []
    for item, agent in zip(items, agents, strict=True):
        if item.get("type") == "function_call":
            names[str(item.get("call_id"))] = str(item.get("name"))
        stored.append(_message(item, agent, names, ids))
    return stored


@dataclass
class History:
    """The model input rebuilt from committed messages."""

    items: list[dict[str, Any]] = field(default_factory=list)
    """Every stored item; each call without a stored output gets the outcome-unknown
    text (the Responses format refuses a call without one)."""
    agent: str | None = None
    """The agent that produced the last stored item with one; ``None`` for the root."""
    tool_names: dict[str, str] = field(default_factory=dict)
    """Tool name by framework call ID."""


def _decode(
    framework_item: str, role: MessageRole, text: str | None
) -> tuple[dict[str, Any], str | None]:
    try:
        value = json.loads(framework_item)
        item = value["item"]
        if not isinstance(item, dict):
            raise TypeError
        agent = value.get("agent")
        return item, agent if isinstance(agent, str) else None
    except (ValueError, KeyError, TypeError):
        if role is MessageRole.USER and text is not None:
            return user_item(text), None
        raise ValueError("a stored message is not an Agents SDK item") from None


def _unknown_output(call_id: str) -> dict[str, Any]:
    return {"call_id": call_id, "output": OUTCOME_UNKNOWN_TEXT, "type": "function_call_output"}


def rebuild_history(turn: AgentTurnContext) -> History:
    """The stored messages of ``turn`` (and its summary) as one input list."""
    history = History()
    if turn.context_summary is not None:
        note = f"{CONTEXT_SUMMARY_NOTE_HEADER}\n{turn.context_summary.text}"
        history.items.append(user_item(note))
    pending: list[str] = []
    for stored in turn.messages:
        item, agent = _decode(stored.framework_item, stored.role, stored.text)
        if agent is not None:
            history.agent = agent
        if item is None:
            continue
        kind = item.get("type")
        if kind == "function_call":
            call_id = str(item.get("call_id"))
            history.tool_names[call_id] = str(item.get("name"))
            pending.append(call_id)
        elif kind == "function_call_output":
            call_id = str(item.get("call_id"))
            if call_id in pending:
                pending.remove(call_id)
        elif pending and item.get("role") == "user":
            history.items.extend(_unknown_output(call_id) for call_id in pending)
            pending.clear()
        history.items.append(item)
    history.items.extend(_unknown_output(call_id) for call_id in pending)
    return history
