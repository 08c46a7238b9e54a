"""A Step's background heartbeats (``session/_config.py`` ``Heartbeats.running``)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any, cast

import pytest

from dex_agents_ray.session import _config
from dex_agents_ray.session._config import Heartbeats


class _Context:
    """The one method ``Heartbeats`` calls on a Step's context."""

    def __init__(self, wanted: int) -> None:
        self.beats: list[str | None] = []
        self._wanted = wanted
        self.enough = asyncio.Event()

    async def heartbeat(self, checkpoint: str | None = None) -> None:
        self.beats.append(checkpoint)
        if len(self.beats) >= self._wanted:
            self.enough.set()


def _beating_tasks() -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if "beating" in repr(t.get_coro())]


async def test_a_block_shorter_than_the_interval_beats_never_and_starts_no_task() -> None:
    context = _Context(wanted=1)
    before = asyncio.all_tasks()
    async with Heartbeats(cast(Any, context), None).running():
        assert asyncio.all_tasks() == before  # only a timer until the first beat
    assert context.beats == []
    assert _beating_tasks() == []


async def test_a_long_block_beats_every_interval_with_its_checkpoint_and_stops_at_its_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_config, "HEARTBEAT_INTERVAL", timedelta(milliseconds=5))
    context = _Context(wanted=3)
    beats = Heartbeats(cast(Any, context), "cp-1")
    async with beats.running():
        await asyncio.wait_for(context.enough.wait(), timeout=30)
        assert len(_beating_tasks()) == 1
    assert context.beats[:3] == ["cp-1", "cp-1", "cp-1"]
    assert _beating_tasks() == []  # cancelled and awaited when the block ended
