"""What every Step and RPC of one session Flow type shares: ``SessionConfig``
(the runner, the options and the event Stream, with the event writing on it),
and the background heartbeats of a Step attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from dex import AsyncContext, Context, Stream

from dex_agents_ray.session._api import AgentEvent, AgentEventType, AgentSessionOptions
from dex_agents_ray.session._runner import AgentEventWriter, AgentFrameworkRunner
from dex_agents_ray.session._values import json_ready

__all__ = ["HEARTBEAT_INTERVAL", "Heartbeats", "SessionConfig", "previous_checkpoint"]

HEARTBEAT_INTERVAL = timedelta(seconds=20)
"""How often long Steps heartbeat in the background."""


@dataclass
class SessionConfig:
    """What every Step and RPC of one session Flow type shares.

    It is pickled with the Flow (one graph), so ``events`` stays the very
    Stream object of the Flow's persistence schema on every worker.
    """

    flow_type: str
    runner: AgentFrameworkRunner[Any]
    options: AgentSessionOptions
    events: Stream[AgentEvent]

    def emit(
        self,
        context: Context,
        type: AgentEventType,
        payload: Mapping[str, Any],
        *,
        turn_id: str | None,
    ) -> None:
        """Write one event bound to ``context``'s Step execution and attempt."""
        event = AgentEvent(
            type=type,
            # ``json_ready`` copies a dict: a Mapping of another kind is copied first.
            payload=json_ready(payload if payload.__class__ is dict else dict(payload)),
            turn_id=turn_id,
            step_execution_id=context.step_execution_id,
            attempt=context.attempt,
        )
        self.events.write(context, event)

    def event_writer(self, context: Context, turn_id: str | None) -> AgentEventWriter:
        """An event writer bound to ``context`` for a runner call."""

        def write(event: AgentEvent) -> None:
            self.events.write(context, event)

        return AgentEventWriter(
            write,
            turn_id=turn_id,
            step_execution_id=context.step_execution_id,
            attempt=context.attempt,
        )


class Heartbeats:
    """Background heartbeats of one attempt, carrying its latest checkpoint.

    With ``marks_start`` every beat carries a value, ``None`` until a checkpoint
    is saved: the store keeps the last value for the Step's next attempt, so a
    tool Step's retry can tell that an earlier attempt started the tool even
    when that attempt saved no checkpoint.
    """

    def __init__(
        self, context: AsyncContext, checkpoint: str | None, *, marks_start: bool = False
    ) -> None:
        self._context = context
        self.checkpoint = checkpoint
        self._marks_start = marks_start

    async def beat(self) -> None:
        """One heartbeat now, with the checkpoint when there is one."""
        if self.checkpoint is None and not self._marks_start:
            await self._context.heartbeat()
        else:
            await self._context.heartbeat(self.checkpoint)

    async def save(self, checkpoint: str) -> None:
        """Record ``checkpoint``; this and every later heartbeat carries it."""
        if not isinstance(checkpoint, str):
            raise TypeError("save_heartbeat_checkpoint takes a str")
        self.checkpoint = checkpoint
        await self.beat()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Heartbeats]:
        """Heartbeat every 20 seconds until the block ends.

        The beating task starts at the first beat (a timer until then): most
        blocks end long before it, and a timer costs less than a task."""
        loop = asyncio.get_running_loop()
        interval = HEARTBEAT_INTERVAL.total_seconds()
        task: asyncio.Task[None] | None = None

        async def beating() -> None:
            while True:
                await self.beat()
                await asyncio.sleep(interval)

        def start() -> None:
            nonlocal task
            task = loop.create_task(beating())

        timer = loop.call_later(interval, start)
        try:
            yield self
        finally:
            timer.cancel()
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task


def previous_checkpoint(context: Context) -> str | None:
    """The checkpoint an earlier attempt saved, or ``None``."""
    if not context.has_last_heartbeat_value():
        return None
    value = context.get_last_heartbeat_value(str)
    return value if isinstance(value, str) else None
