"""Waiting for observable engine state (poll with a deadline, never sleep for timing)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from dex_agents_ray.engine import EngineClient, StepHistoryEntry

T = TypeVar("T")

_POLL_SECONDS = 0.05


async def eventually(
    probe: Callable[[], Awaitable[T]],
    until: Callable[[T], bool] = bool,
    *,
    timeout: float = 30.0,
) -> T:
    """Call ``probe`` until ``until(value)`` holds; returns that value."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = await probe()
        if until(value):
            return value
        if loop.time() > deadline:
            raise AssertionError(f"not reached within {timeout} s; last value: {value!r}")
        await asyncio.sleep(_POLL_SECONDS)


async def events(client: EngineClient, flow_id: str) -> list[tuple[str, str]]:
    """The run's history as ``(step_execution_id, event)`` pairs, oldest first."""
    return [(h.step_execution_id, h.event) for h in await client.read_step_history(flow_id)]


async def wait_for_event(
    client: EngineClient, flow_id: str, exec_id: str, event: str, *, timeout: float = 30.0
) -> StepHistoryEntry:
    """Wait until the history holds ``event`` for ``exec_id``; returns the first one."""

    def find(history: list[StepHistoryEntry]) -> StepHistoryEntry | None:
        return next(
            (h for h in history if h.step_execution_id == exec_id and h.event == event), None
        )

    history = await eventually(
        lambda: client.read_step_history(flow_id),
        lambda h: find(h) is not None,
        timeout=timeout,
    )
    found = find(history)
    assert found is not None
    return found


def details(history: list[StepHistoryEntry], exec_id: str, event: str) -> list[dict[str, Any]]:
    """The detail dicts of every ``event`` of ``exec_id``, oldest first."""
    return [h.detail for h in history if h.step_execution_id == exec_id and h.event == event]


async def until(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 60) -> None:
    """Call ``check`` until it holds; fails naming ``what`` after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await check():
        assert loop.time() < deadline, f"{what} did not happen within {timeout} s"
        await asyncio.sleep(_POLL_SECONDS)


def named_actors(namespace: str) -> list[str]:
    """The named actors of ``namespace``, sorted."""
    import ray

    return sorted(
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["namespace"] == namespace
    )
