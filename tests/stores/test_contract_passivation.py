"""Passivation records on every backend: fenced by the epoch, cleared by activation."""

from __future__ import annotations

import pytest

from dex_agents_ray.engine import StaleEpochError
from dex_agents_ray.engine.store._records import Commit
from tests.stores.conftest import Backend
from tests.stores.records import opened, run


async def test_passivated_runs_are_found_when_due_and_cleared_by_activation(
    backend: Backend,
) -> None:
    async with opened(backend.config) as store:
        epoch_a, _ = await store.runs.activate("a")
        epoch_b, _ = await store.runs.activate("b")
        epoch_c, _ = await store.runs.activate("c")
        for flow_id, epoch in (("a", epoch_a), ("b", epoch_b), ("c", epoch_c)):
            await store.runs.commit(Commit(flow_id=flow_id, epoch=epoch, run=run(flow_id)))
        await store.passivation.passivate("a", epoch_a, 100.0)
        await store.passivation.passivate("b", epoch_b, 50.0)
        await store.passivation.passivate("c", epoch_c, None)  # waits for a client call only

        assert await store.passivation.passivated_count() == 3
        assert await store.passivation.next_passivated_wake() == 50.0
        assert await store.passivation.due_passivated(75.0) == ["b"]
        assert await store.passivation.due_passivated(1000.0) == ["b", "a"]
        assert "a" not in await store.runs.runs_with_work()

        await store.runs.activate("b")
        assert await store.passivation.passivated_count() == 2
        assert await store.passivation.due_passivated(1000.0) == ["a"]


async def test_a_superseded_owner_cannot_passivate(backend: Backend) -> None:
    async with opened(backend.config) as store:
        old, _ = await store.runs.activate("a")
        await store.runs.activate("a")
        with pytest.raises(StaleEpochError):
            await store.passivation.passivate("a", old, 10.0)
        assert await store.passivation.passivated_count() == 0
