"""The ``FlowStore`` contract for search: ``list_runs`` filtered by indexes."""

from __future__ import annotations

import dataclasses
import sqlite3
from typing import Any

import psycopg

from dex_agents_ray.engine import FlowStore, SqliteStoreConfig
from dex_agents_ray.engine.store._records import Commit, RunRecord, RunStatus
from tests.stores.conftest import Backend
from tests.stores.records import opened, run


async def _put(store: FlowStore, flow_id: str, flow_type: str = "TestFlow", **fields: Any) -> None:
    epoch, _ = await store.runs.activate(flow_id)
    record = dataclasses.replace(run(flow_id, epoch=epoch, **fields), flow_type=flow_type)
    await store.runs.commit(Commit(flow_id=flow_id, epoch=epoch, run=record))


def _ids(runs: list[RunRecord]) -> list[str]:
    return [r.flow_id for r in runs]


async def test_list_runs_filters_by_active_step_and_type_oldest_first(backend: Backend) -> None:
    async with opened(backend.config) as store:
        await _put(store, "c", started_at=3.0, active_step_types=["Approve", "Work"])
        await _put(store, "a", started_at=1.0, active_step_types=["Approve"])
        await _put(store, "b", started_at=2.0, active_step_types=["Work"], flow_type="Other")
        await _put(store, "d", started_at=0.5)

        assert _ids(await store.runs.list_runs()) == ["d", "a", "b", "c"]
        assert _ids(await store.runs.list_runs(active_step_type="Approve")) == ["a", "c"]
        assert _ids(await store.runs.list_runs(active_step_type="Work")) == ["b", "c"]
        assert _ids(await store.runs.list_runs(flow_type="Other")) == ["b"]
        assert _ids(await store.runs.list_runs(flow_type="TestFlow", active_step_type="Work")) == [
            "c"
        ]
        assert _ids(await store.runs.list_runs(active_step_type="Approve", limit=1)) == ["a"]
        assert await store.runs.list_runs(active_step_type="Missing") == []

        # A run's index entries follow its commits: moved on, then closed.
        await _put(store, "a", started_at=1.0, active_step_types=["Work"])
        await _put(store, "c", started_at=3.0, status=RunStatus.COMPLETED, active_step_types=[])
        assert _ids(await store.runs.list_runs(active_step_type="Approve")) == []
        assert _ids(await store.runs.list_runs(active_step_type="Work")) == ["a", "b"]


async def test_a_store_made_before_the_index_gets_it_filled_when_opened(
    backend: Backend,
) -> None:
    async with opened(backend.config) as store:
        await _put(store, "a", started_at=1.0, active_step_types=["Approve"])
        await _put(store, "b", started_at=2.0, active_step_types=["Work"])
    # Take the index away, as a store written by an earlier release lacks it.
    if isinstance(backend.config, SqliteStoreConfig):
        db = sqlite3.connect(backend.config.path)
        with db:
            db.execute("DELETE FROM active_steps")
        db.close()
    else:
        with psycopg.connect(backend.config.dsn, autocommit=True) as conn:
            conn.execute("DROP TABLE active_steps")

    async with opened(backend.config) as store:
        assert _ids(await store.runs.list_runs(active_step_type="Approve")) == ["a"]
        assert _ids(await store.runs.list_runs(active_step_type="Work")) == ["b"]
