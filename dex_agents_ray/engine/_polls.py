"""A client's Stream long polls, shared by the readers waiting on the same host.

Each ``read_stream`` that finds nothing to return waits on its run's host. Done
one Ray call per reader, 50 agent sessions read by one client cost about four
host calls a turn each, and an actor call costs more CPU than a Step's commit
(``benchmarks/session_floor.py``). Here the readers of one client that wait on
the same host share a call (``FlowHost.wait_streams``): it carries every
reader's position and answers with the records of each position that has some,
so a burst of several sessions' events comes back in one call.

A reader that arrives while no poll of its host is in flight starts one at once
(a lone reader waits as long as it did with a call of its own). One that
arrives while a poll is in flight joins the next: that starts when the poll in
flight answers, or ``newcomer_delay`` after the reader arrived, whichever comes
first, so a reader never waits behind idle sessions for longer than that. A
reader whose position got nothing when a poll answered joins the next poll
until its own deadline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from dex_agents_ray.engine.store._records import StreamRecord

__all__ = ["NEWCOMER_DELAY_SECONDS", "SharedPolls"]

NEWCOMER_DELAY_SECONDS = 0.02
"""How long a reader that arrives while its host's poll is in flight waits for
that poll to answer before a poll of its own starts."""

Position = tuple[str, str, int]
"""(flow ID, Stream name, offset the reader is past)."""
HostCall = Callable[[str, list[Position], int, float], Awaitable[Any]]
"""``(flow ID that routes the call, positions, limit, timeout) -> [(index, records)]``."""


@dataclass(eq=False)
class _Reader:
    position: Position
    deadline: float
    answer: asyncio.Future[list[StreamRecord]] = field(repr=False)


class _HostPolls:
    """The shared polls of one host, on one event loop."""

    def __init__(self, call: HostCall, limit: int, newcomer_delay: float) -> None:
        self._call = call
        self._limit = limit
        self._newcomer_delay = newcomer_delay
        self._queued: list[_Reader] = []
        self._in_flight = 0
        self._launch_handle: asyncio.Handle | None = None
        self._polls: set[asyncio.Task[None]] = set()

    async def wait(self, position: Position, timeout: float) -> list[StreamRecord]:
        loop = asyncio.get_running_loop()
        reader = _Reader(position, loop.time() + timeout, loop.create_future())
        self._queued.append(reader)
        self._schedule(loop)
        try:
            return await reader.answer
        finally:
            if not reader.answer.done():  # cancelled while waiting
                reader.answer.cancel()

    def _schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._launch_handle is not None:
            return
        if self._in_flight == 0:  # next loop turn: readers arriving together share it
            self._launch_handle = loop.call_soon(self._launch)
        else:
            self._launch_handle = loop.call_later(self._newcomer_delay, self._launch)

    def _launch(self) -> None:
        self._launch_handle = None
        readers = [r for r in self._queued if not r.answer.done()]
        self._queued.clear()
        if not readers:
            return
        self._in_flight += 1
        task = asyncio.get_running_loop().create_task(self._poll(readers))
        self._polls.add(task)
        task.add_done_callback(self._polls.discard)

    async def _poll(self, readers: list[_Reader]) -> None:
        loop = asyncio.get_running_loop()
        positions = list(dict.fromkeys(r.position for r in readers))  # readers may share one
        timeout = max(0.0, min(r.deadline for r in readers) - loop.time())
        try:
            answered = await self._call(positions[0][0], positions, self._limit, timeout)
        except asyncio.CancelledError:
            for reader in readers:
                reader.answer.cancel()
            raise
        except Exception as exc:
            for reader in readers:
                if not reader.answer.done():
                    reader.answer.set_exception(exc)
            answered = []
            readers = []
        finally:
            self._in_flight -= 1
        records_at = {positions[index]: records for index, records in answered}
        now = loop.time()
        for reader in readers:
            if reader.answer.done():
                continue
            records = records_at.get(reader.position)
            if records:
                reader.answer.set_result(records)
            elif reader.deadline <= now:
                reader.answer.set_result([])
            else:
                self._queued.append(reader)
        if self._queued:  # the readers left and those that came meanwhile: now
            if self._launch_handle is not None:
                self._launch_handle.cancel()
            self._launch_handle = loop.call_soon(self._launch)


class SharedPolls:
    """One client's shared long polls, one set per host and event loop."""

    def __init__(
        self,
        call: HostCall,
        host_name: Callable[[str], str],
        limit: int,
        newcomer_delay: float = NEWCOMER_DELAY_SECONDS,
    ) -> None:
        self._call = call
        self._host_name = host_name
        self._limit = limit
        self._newcomer_delay = newcomer_delay
        self._hosts: dict[tuple[asyncio.AbstractEventLoop, str], _HostPolls] = {}

    async def wait(
        self, flow_id: str, stream: str, after: int, timeout: float
    ) -> list[StreamRecord]:
        """Up to the limit of records past ``after`` on ``stream`` of ``flow_id``,
        waiting up to ``timeout`` seconds for the first; ``[]`` when none came."""
        key = (asyncio.get_running_loop(), self._host_name(flow_id))
        polls = self._hosts.get(key)
        if polls is None:
            polls = self._hosts[key] = _HostPolls(self._call, self._limit, self._newcomer_delay)
            for other in [k for k in self._hosts if k[0].is_closed()]:
                del self._hosts[other]
        return await polls.wait((flow_id, stream, after), timeout)
