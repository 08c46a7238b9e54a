"""Plain asyncio, no durability: the floor (the coroutine cost of the loop itself)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from .workload import TURNS, Message, ToolCall, run_tool, scripted_model, user_message

# Distributions whose versions a job reports.
PACKAGES: tuple[str, ...] = ()


async def _model(messages: list[Message]) -> Message:
    return scripted_model(messages)


async def _tool(call: ToolCall) -> Message:
    return run_tool(call)


class PlainLoop:
    """One step is a coroutine call."""

    async def session(self, session_id: str) -> None:
        messages: list[Message] = []
        for turn in range(TURNS):
            messages.append(user_message(turn))
            reply = await _model(messages)
            messages.append(reply)
            messages += await asyncio.gather(*(_tool(c) for c in reply.get("tool_calls", [])))
            messages.append(await _model(messages))


@asynccontextmanager
async def open_system(workdir: Path, variant: str) -> AsyncIterator[PlainLoop]:
    yield PlainLoop()
