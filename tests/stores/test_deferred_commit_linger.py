"""A deferred commit (an effect-free Step's completion) lingers for the run's
next commit and shares its transaction; alone, it is written when its linger
ends or when something needs it durable.

A ``RunDriver`` in this process on a real SQLite store; ``_Counting`` only
records which commits each store write carried and can hold a write back.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from dex.dexpb import dex_pb2 as pb

from dex_agents_ray.engine import SqliteStoreConfig, StaleEpochError
from dex_agents_ray.engine.run._driver import RunDriver
from dex_agents_ray.engine.run._streams import StreamBuffer
from dex_agents_ray.engine.store._records import Commit, LoadedRun
from dex_agents_ray.engine.store._store import FlowStore, RunStore
from tests.stores.records import opened, run


class _Counting:
    """The store's runs, with each write's history events recorded as one group."""

    def __init__(self, store: RunStore) -> None:
        self._store = store
        self.writes: list[list[str]] = []
        self.wrote = asyncio.Event()

    async def commit(self, commit: Commit, *, replace_run: bool = False) -> list[int]:
        offsets = await self._store.commit(commit, replace_run=replace_run)
        self.writes.append([h.event for h in commit.history if h.event != "step_scheduled"])
        self.wrote.set()
        return offsets

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


async def _driver(store: FlowStore, flow_id: str) -> tuple[RunDriver, _Counting]:
    epoch, _ = await store.runs.activate(flow_id)
    record = run(flow_id, epoch=epoch)
    await store.runs.commit(Commit(flow_id=flow_id, epoch=epoch, run=record))
    counting = _Counting(store.runs)
    driver = RunDriver(
        store=counting,  # type: ignore[arg-type]
        flow_id=flow_id,
        epoch=epoch,
        definition=None,
        host_handle=None,
        streams=StreamBuffer(store.streams),
    )
    driver.load(LoadedRun(run=record, attributes={}, messages=[], executions=[], completions=[]))
    return driver, counting


async def _commit(driver: RunDriver, event: str, *, deferred: bool = False) -> None:
    """A commit that records ``event`` and starts a Step in this host, as an
    effect-free Step's completion does (a deferred commit that starts nothing is
    written at once). The Step's first try is an hour away: nothing runs it here."""
    tx = driver.tx()
    tx.history("Step-1", event, {})
    tx.commit.attribute_upserts[event] = event.encode()
    tx.create(pb.StepMovement(step_type="Later"), None, from_exec_id="", not_before=tx.now + 3600)
    async with driver.commit_lock:
        await driver.commit(tx, deferred=deferred)


async def _history(store: FlowStore, flow_id: str) -> list[str]:
    return [h.event for h in await store.runs.history(flow_id) if h.event != "step_scheduled"]


async def test_a_deferred_commit_rides_in_the_next_commits_transaction(tmp_path: Path) -> None:
    async with opened(SqliteStoreConfig(path=str(tmp_path / "s.db"))) as store:
        driver, counting = await _driver(store, "r")
        await _commit(driver, "first", deferred=True)
        assert driver.writing and counting.writes == []  # applied in memory, held
        assert driver.state.attributes["first"] == b"first"
        await _commit(driver, "second", deferred=True)  # joins the held commit
        await _commit(driver, "third")

        assert counting.writes == [["first", "second", "third"]]
        assert not driver.writing
        await driver.settle_deferred()
        assert await _history(store, "r") == ["first", "second", "third"]
        await driver.stop()


async def test_a_held_commit_is_written_alone_when_its_linger_ends(tmp_path: Path) -> None:
    async with opened(SqliteStoreConfig(path=str(tmp_path / "s.db"))) as store:
        driver, counting = await _driver(store, "r")
        await _commit(driver, "first", deferred=True)

        await asyncio.wait_for(counting.wrote.wait(), timeout=30)
        await driver.settle_deferred()
        assert counting.writes == [["first"]]
        assert await _history(store, "r") == ["first"]
        await driver.stop()


async def test_settling_a_held_commit_writes_it_at_once(tmp_path: Path) -> None:
    """An attempt whose start must be exact (a dispatch, a last attempt) settles
    the deferred commit first: it does not wait out the linger."""
    async with opened(SqliteStoreConfig(path=str(tmp_path / "s.db"))) as store:
        driver, counting = await _driver(store, "r")
        await _commit(driver, "first", deferred=True)
        assert driver.writing

        await driver.settle_deferred()

        assert counting.writes == [["first"]] and not driver.writing
        assert await _history(store, "r") == ["first"]
        await driver.stop()


async def test_a_refused_merged_write_fails_both_commits_and_makes_the_driver_stale(
    tmp_path: Path,
) -> None:
    async with opened(SqliteStoreConfig(path=str(tmp_path / "s.db"))) as store:
        driver, counting = await _driver(store, "r")
        await store.runs.activate("r")  # another host took the run over
        await _commit(driver, "first", deferred=True)  # held: nothing refuses it yet

        with pytest.raises(StaleEpochError):
            await _commit(driver, "second")

        assert driver.stale and counting.writes == []
        with pytest.raises(StaleEpochError):
            await driver.settle_deferred()
        assert await _history(store, "r") == []
        await driver.stop()


async def test_a_deferred_commit_that_starts_nothing_is_written_at_once(tmp_path: Path) -> None:
    async with opened(SqliteStoreConfig(path=str(tmp_path / "s.db"))) as store:
        driver, counting = await _driver(store, "r")
        tx = driver.tx()
        tx.history("Step-1", "alone", {})
        async with driver.commit_lock:
            await driver.commit(tx, deferred=True)

        assert counting.writes == [["alone"]] and not driver.writing
        await driver.stop()
