"""A session's stored messages as Inspect chat messages, and reading them.

A stored tool request is an assistant message of its own; consecutive ones (and
the assistant text before them in the same turn) become one Inspect assistant
message with its ``tool_calls``, as a model returns them. A tool result becomes a
tool message. Assistant messages with neither text nor a tool call (reasoning
kept only in the framework's item) are left out, and so are images (a message's
text is carried, not its image references).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from dex_agents_ray.evals import CaseResult, EvalReport
from dex_agents_ray.session import (
    MAX_LIST_MESSAGES_LIMIT,
    AgentMessage,
    AgentSessionClient,
    MessageRole,
)

if TYPE_CHECKING:
    from inspect_ai.model import ChatMessage

__all__ = ["chat_messages", "read_transcripts"]

TRANSCRIPT_CONCURRENCY = 16
"""Sessions read at once by :func:`read_transcripts`."""


def chat_messages(
    turns: Sequence[str],
    answer: str,
    transcript: Sequence[AgentMessage] | None,
    model: str,
) -> list[ChatMessage]:
    """The Inspect messages of one case: its ``transcript`` converted, or (``None``)
    its ``turns`` as user messages and ``answer`` as the last assistant message."""
    from inspect_ai.model import ChatMessageAssistant, ChatMessageUser

    if transcript is None:
        messages: list[ChatMessage] = [
            ChatMessageUser(content=turn, source="input") for turn in turns
        ]
        if answer:
            messages.append(ChatMessageAssistant(content=answer, model=model, source="generate"))
        return messages
    return _converted(transcript, model)


def _converted(transcript: Iterable[AgentMessage], model: str) -> list[ChatMessage]:
    from inspect_ai.model import ChatMessageAssistant, ChatMessageTool, ChatMessageUser

    messages: list[ChatMessage] = []
    for stored in transcript:
        if stored.role is MessageRole.USER:
            messages.append(ChatMessageUser(content=stored.text or "", source="input"))
        elif stored.role is MessageRole.TOOL:
            messages.append(
                ChatMessageTool(
                    content=stored.tool_output if stored.tool_output is not None else "",
                    tool_call_id=stored.tool_call_id,
                    function=stored.tool_name,
                )
            )
        elif stored.tool_call_id is not None and stored.tool_name is not None:
            call = _tool_call(stored.tool_call_id, stored.tool_name, stored.tool_arguments)
            last = messages[-1] if messages else None
            if isinstance(last, ChatMessageAssistant):
                last.tool_calls = [*(last.tool_calls or []), call]
            else:
                messages.append(
                    ChatMessageAssistant(
                        content=stored.text or "", tool_calls=[call], model=model, source="generate"
                    )
                )
        elif stored.text:
            messages.append(
                ChatMessageAssistant(content=stored.text, model=model, source="generate")
            )
    return messages


def _tool_call(call_id: str, name: str, arguments_text: str | None) -> Any:
    from inspect_ai.tool import ToolCall

    text = arguments_text or "{}"
    try:
        arguments = json.loads(text)
    except json.JSONDecodeError as error:
        return ToolCall(
            id=call_id,
            function=name,
            arguments={},
            parse_error=f"arguments are not JSON ({error.msg}): {text[:200]}",
        )
    if not isinstance(arguments, dict):
        arguments = {"arguments": arguments}
    return ToolCall(id=call_id, function=name, arguments=arguments)


async def read_transcripts(
    sessions: AgentSessionClient, run: EvalReport | Sequence[CaseResult]
) -> dict[str, tuple[AgentMessage, ...]]:
    """Every stored message of each case's session, oldest first, by case ID
    (for :func:`write_inspect_log`'s ``transcripts``).

    Args:
        sessions: A client of the agent under test on the run's engine (its store
            and namespace).
        run: The run's report, or its rows.

    Messages that retention deleted are not there; a transcript then starts later.
    """
    rows = run.results if isinstance(run, EvalReport) else tuple(run)
    gate = asyncio.Semaphore(TRANSCRIPT_CONCURRENCY)

    async def read(row: CaseResult) -> tuple[str, tuple[AgentMessage, ...]]:
        async with gate:
            return row.case_id, await _all_messages(sessions, row.session_id)

    found = await asyncio.gather(*(read(row) for row in rows))
    return dict(found)


async def _all_messages(sessions: AgentSessionClient, session_id: str) -> tuple[AgentMessage, ...]:
    pages: list[tuple[AgentMessage, ...]] = []
    before: int | None = None
    while True:
        page = await sessions.list_agent_messages(
            session_id, before_sequence=before, limit=MAX_LIST_MESSAGES_LIMIT
        )
        pages.append(page.messages)
        if page.next_before_sequence is None:
            break
        before = page.next_before_sequence
    return tuple(message for page in reversed(pages) for message in page)
