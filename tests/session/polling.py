"""Waiting for observable session state: poll with a deadline, never sleep for timing."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from dex_agents_ray import AgentEvent, AgentSessionClient, AgentSnapshot

T = TypeVar("T")


async def eventually(
    probe: Callable[[], Awaitable[T]],
    until: Callable[[T], Any] = bool,
    *,
    timeout: float = 60.0,
    description: str = "condition",
) -> T:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = await probe()
        if until(value):
            return value
        if loop.time() > deadline:
            raise AssertionError(f"{description} not reached within {timeout} s; last: {value!r}")
        await asyncio.sleep(0.05)


async def snapshot_when(
    sessions: AgentSessionClient,
    session_id: str,
    until: Callable[[AgentSnapshot], Any],
    *,
    description: str = "snapshot",
    timeout: float = 60.0,
) -> AgentSnapshot:
    return await eventually(
        lambda: sessions.get_agent_snapshot(session_id),
        until,
        timeout=timeout,
        description=description,
    )


def turn_done(turns: int) -> Callable[[AgentSnapshot], bool]:
    """The session finished ``turns`` turns and waits for a user message."""

    def check(snapshot: AgentSnapshot) -> bool:
        state = snapshot.state
        return state is not None and state.turn_count >= turns and state.active_turn_id is None

    return check


def has_interrupt(snapshot: AgentSnapshot) -> bool:
    return bool(snapshot.pending_interrupts)


async def read_events(
    sessions: AgentSessionClient, session_id: str, *, until_type: str, timeout: float = 30.0
) -> list[AgentEvent]:
    """Every event from the start of the stream through the first of ``until_type``."""
    events: list[AgentEvent] = []
    token = ""
    while True:
        message = await sessions.read_event(session_id, token, timeout=timeout)
        events.append(message.value)
        token = message.resume_token
        if message.value.type == until_type:
            return events
