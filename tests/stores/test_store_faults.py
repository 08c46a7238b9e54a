"""Store faults cost a wait, never a lost or doubled write: a connection lost after
COMMIT, a server that stays away past the deadline, a locked or full SQLite file."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import sqlite3
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from dex_agents_ray.engine import (
    FlowStore,
    PostgresStoreConfig,
    SqliteStoreConfig,
    StoreUnavailableError,
)
from dex_agents_ray.engine.store import _sqlite_db as sqlite_db
from dex_agents_ray.engine.store._records import ChannelMessageRecord, Commit, StreamAppend
from dex_agents_ray.engine.store._sqlite import SqliteFlowStore
from tests.stores.postgres_server import PostgresServer
from tests.stores.records import entry, opened, run
from tests.stores.tcp_proxy import fault_proxy


async def _started(store: FlowStore) -> int:
    """Run ``a`` activated and written once; returns its epoch."""
    epoch, _ = await store.runs.activate("a")
    await store.runs.commit(Commit(flow_id="a", epoch=epoch, run=run("a")))
    return epoch


def _through(proxy_port: int, server: PostgresServer, dsn: str) -> str:
    return dsn.replace(f"127.0.0.1:{server.port}/", f"127.0.0.1:{proxy_port}/")


async def test_a_commit_whose_answer_was_lost_is_applied_once(
    postgres_server: PostgresServer, postgres_dsn: str
) -> None:
    with fault_proxy(postgres_server.port) as proxy:
        config = PostgresStoreConfig(dsn=_through(proxy.port, postgres_server, postgres_dsn))
        async with opened(config) as store:
            epoch = await _started(store)
            proxy.cut_after_commit()

            await store.runs.commit(
                Commit(flow_id="a", epoch=epoch, history=[entry("X-1", "step_completed")])
            )

            assert proxy.cuts == 1
            assert [h.event for h in await store.runs.history("a")] == ["step_completed"]
            proxy.cut_after_commit()
            offsets = await store.streams.append_streams(
                "a", [StreamAppend(stream="s", source="#X-1", value=b"v", capacity_bytes=0)]
            )
            assert proxy.cuts == 2
            assert offsets == [1]
            assert [r.value for r in await store.streams.read_stream("a", "s", 0, 10)] == [b"v"]


async def test_a_server_away_past_the_deadline_raises_the_store_error_and_applies_nothing(
    postgres_server: PostgresServer, postgres_dsn: str
) -> None:
    with fault_proxy(postgres_server.port) as proxy:
        config = PostgresStoreConfig(
            dsn=_through(proxy.port, postgres_server, postgres_dsn),
            retry_deadline=timedelta(seconds=1),
        )
        async with opened(config) as store:
            epoch = await _started(store)
            proxy.down()

            with pytest.raises(StoreUnavailableError) as failed:
                await store.runs.commit(
                    Commit(flow_id="a", epoch=epoch, history=[entry("X-1", "lost")])
                )

            assert failed.value.store == config.location
            assert "***" in failed.value.store and postgres_server.password not in str(failed.value)
            assert failed.value.operation == "commit" and failed.value.attempts >= 2
            assert str(failed.value).startswith(f"store {config.location} unavailable")
            with pytest.raises(StoreUnavailableError):
                await store.runs.get_run("a")
            proxy.up()
            assert await store.runs.history("a") == []
            await store.runs.commit(
                Commit(flow_id="a", epoch=epoch, history=[entry("X-1", "kept")])
            )
            assert [h.event for h in await store.runs.history("a")] == ["kept"]


async def test_a_server_back_within_the_deadline_costs_only_a_wait(
    postgres_server: PostgresServer, postgres_dsn: str
) -> None:
    with fault_proxy(postgres_server.port) as proxy:
        config = PostgresStoreConfig(dsn=_through(proxy.port, postgres_server, postgres_dsn))
        async with opened(config) as store:
            epoch = await _started(store)
            proxy.down()
            pending = asyncio.ensure_future(
                store.runs.commit(Commit(flow_id="a", epoch=epoch, history=[entry("X-1", "late")]))
            )
            done, _ = await asyncio.wait({pending}, timeout=0.5)
            assert not done  # still retrying while the server is away
            proxy.up()
            await asyncio.wait_for(pending, timeout=30)
            assert [h.event for h in await store.runs.history("a")] == ["late"]


def _hold_write_lock(path: Path) -> sqlite3.Connection:
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    return other


async def test_a_locked_sqlite_file_is_waited_for_then_written(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    config = SqliteStoreConfig(path=str(path), retry_deadline=timedelta(minutes=2))
    async with opened(config) as store:
        epoch = await _started(store)
        other = _hold_write_lock(path)
        pending = asyncio.ensure_future(
            store.runs.commit(Commit(flow_id="a", epoch=epoch, history=[entry("X-1", "waited")]))
        )
        done, _ = await asyncio.wait({pending}, timeout=0.5)
        assert not done
        other.execute("ROLLBACK")
        other.close()
        await asyncio.wait_for(pending, timeout=60)
        assert [h.event for h in await store.runs.history("a")] == ["waited"]


def _hold_writer_flock(path: Path) -> int:
    """Another writer of the store's processes holding their writer lock."""
    fd = os.open(f"{path}-writer.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


async def test_commits_queued_while_a_store_waits_for_the_writer_lock_share_a_transaction(
    tmp_path: Path,
) -> None:
    path = tmp_path / "queued.db"
    async with opened(SqliteStoreConfig(path=str(path))) as store:
        epoch = await _started(store)
        assert isinstance(store, SqliteFlowStore)
        database = store.database
        transactions, commits = database.transactions_written, database.commits_written
        held = _hold_writer_flock(path)
        first = asyncio.ensure_future(
            store.runs.commit(Commit(flow_id="a", epoch=epoch, history=[entry("X-1", "first")]))
        )
        # Time for the store's thread to start waiting for the lock (the group is
        # the same whether it has or not: it takes the queue once it holds it).
        await asyncio.sleep(0.05)
        later = [
            asyncio.ensure_future(
                store.runs.commit(
                    Commit(flow_id="a", epoch=epoch, history=[entry(f"X-{i}", "later")])
                )
            )
            for i in (2, 3)
        ]
        # The later commits queued before the lock is let go: a store's thread that
        # takes the lock the moment it is free must find all three in its queue.
        while len(database._pending) < 3:  # noqa: ASYNC110 - a state the loop's own tasks reach
            await asyncio.sleep(0)
        fcntl.flock(held, fcntl.LOCK_UN)
        os.close(held)
        await asyncio.wait_for(asyncio.gather(first, *later), timeout=60)
        assert database.transactions_written == transactions + 1
        assert database.commits_written == commits + 3
        assert [h.event for h in await store.runs.history("a")] == ["first", "later", "later"]


@contextlib.asynccontextmanager
async def _store_thread_busy(store: SqliteFlowStore) -> AsyncIterator[None]:
    """The store's own thread kept busy with other work while the body runs."""
    release = asyncio.Event()
    loop = asyncio.get_running_loop()
    busy = loop.run_in_executor(
        store.database._executor,
        lambda: asyncio.run_coroutine_threadsafe(release.wait(), loop).result(),
    )
    try:
        yield
    finally:
        release.set()
        await busy


async def test_a_commit_with_the_locks_free_is_written_without_the_stores_thread(
    tmp_path: Path,
) -> None:
    """With the connection, the writers' flock and SQLite's lock free, the group
    transaction is written on the event loop's thread: it does not queue behind
    work the store's thread is busy with."""
    path = tmp_path / "inline.db"
    async with opened(SqliteStoreConfig(path=str(path))) as store:
        epoch = await _started(store)
        assert isinstance(store, SqliteFlowStore)
        async with _store_thread_busy(store):
            await asyncio.wait_for(
                store.runs.commit(Commit(flow_id="a", epoch=epoch, history=[entry("X-1", "here")])),
                timeout=30,
            )
        assert [h.event for h in await store.runs.history("a")] == ["here"]
    with sqlite3.connect(path) as other:  # durable for another connection
        assert other.execute("SELECT event FROM history").fetchall() == [("here",)]


async def test_a_lone_write_that_fails_partway_applies_none_of_its_rows(tmp_path: Path) -> None:
    """A transaction of one write has no savepoint: when the write fails after some
    of its rows went in, the whole transaction rolls back, and the store goes on."""
    async with opened(SqliteStoreConfig(path=str(tmp_path / "lone.db"))) as store:
        epoch = await _started(store)
        twice = [
            ChannelMessageRecord(channel="c", seq=1, message_id=f"m{i}", value=b"v") for i in (1, 2)
        ]
        failing = Commit(
            flow_id="a",
            epoch=epoch,
            attribute_upserts={"written-first": b"x"},
            history=[entry("X-1", "written-too")],
            message_appends=twice,  # the same seq twice: the messages' key refuses it
        )

        with pytest.raises(sqlite3.IntegrityError):
            await store.runs.commit(failing)

        await store.runs.commit(Commit(flow_id="a", epoch=epoch, attribute_upserts={"after": b"y"}))
        _, loaded = await store.runs.activate("a")
        assert loaded is not None
        assert set(loaded.attributes) == {"after"}
        assert loaded.messages == []
        assert await store.runs.history("a") == []


class _RefusingEnds:
    """A SQLite connection whose ``COMMIT`` and ``ROLLBACK`` fail, as on a broken one."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if sql in ("COMMIT", "ROLLBACK"):
            raise sqlite3.OperationalError("the connection broke")
        return self._conn.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


async def test_a_commit_whose_rollback_fails_too_raises_and_applies_nothing(
    tmp_path: Path,
) -> None:
    """A transaction whose ``COMMIT`` and then ``ROLLBACK`` fail still answers its
    callers with the error (none waits forever), and none of its rows is kept."""
    async with opened(SqliteStoreConfig(path=str(tmp_path / "broken.db"))) as store:
        epoch = await _started(store)
        assert isinstance(store, SqliteFlowStore)
        real = store.database._conn
        assert real is not None
        store.database._conn = _RefusingEnds(real)  # type: ignore[assignment]
        try:
            with pytest.raises(sqlite3.OperationalError, match="broke"):
                await asyncio.wait_for(
                    store.runs.commit(
                        Commit(flow_id="a", epoch=epoch, attribute_upserts={"k": b"v"})
                    ),
                    timeout=30,
                )
        finally:
            store.database._conn = real
        real.execute("ROLLBACK")
        await store.runs.commit(Commit(flow_id="a", epoch=epoch, attribute_upserts={"after": b"y"}))
        _, loaded = await store.runs.activate("a")
        assert loaded is not None and set(loaded.attributes) == {"after"}


async def test_a_group_waiting_for_another_writers_flock_is_written_by_the_loop_once_free(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loop tries the flock again while another process holds it (here without
    giving up, so the store's busy thread cannot be what writes the group)."""
    monkeypatch.setattr(sqlite_db, "_LOOP_LOCK_TRIES", 1_000_000)
    path = tmp_path / "retried.db"
    async with opened(SqliteStoreConfig(path=str(path))) as store:
        epoch = await _started(store)
        assert isinstance(store, SqliteFlowStore)
        async with _store_thread_busy(store):
            held = _hold_writer_flock(path)
            try:
                pending = asyncio.ensure_future(
                    store.runs.commit(Commit(flow_id="a", epoch=epoch, history=[entry("X-1", "x")]))
                )
                done, _ = await asyncio.wait({pending}, timeout=0.05)
                assert not done  # waits for the other writer
            finally:
                fcntl.flock(held, fcntl.LOCK_UN)
                os.close(held)
            await asyncio.wait_for(pending, timeout=30)
        assert [h.event for h in await store.runs.history("a")] == ["x"]


async def test_a_writer_lock_held_past_the_busy_wait_is_passed_by(tmp_path: Path) -> None:
    path = tmp_path / "hung.db"
    config = SqliteStoreConfig(path=str(path), retry_deadline=timedelta(milliseconds=300))
    async with opened(config) as store:
        epoch = await _started(store)
        held = _hold_writer_flock(path)  # a holder that hangs: never lets go here
        try:
            await asyncio.wait_for(
                store.runs.commit(Commit(flow_id="a", epoch=epoch, history=[entry("X-1", "x")])),
                timeout=60,
            )
        finally:
            os.close(held)
        assert [h.event for h in await store.runs.history("a")] == ["x"]


async def test_a_sqlite_file_locked_past_the_deadline_raises_and_applies_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "locked.db"
    config = SqliteStoreConfig(path=str(path), retry_deadline=timedelta(milliseconds=300))
    async with opened(config) as store:
        epoch = await _started(store)
        other = _hold_write_lock(path)
        try:
            with pytest.raises(StoreUnavailableError) as failed:
                await store.runs.commit(
                    Commit(flow_id="a", epoch=epoch, history=[entry("X-1", "x")])
                )
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert failed.value.store == str(path)
        assert "locked" in str(failed.value)
        assert await store.runs.history("a") == []


async def test_a_full_sqlite_disk_raises_the_store_error_and_applies_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "full.db"
    config = SqliteStoreConfig(path=str(path), retry_deadline=timedelta(milliseconds=300))
    async with opened(config) as store:
        epoch = await _started(store)
        # SQLite's own size cap gives the real SQLITE_FULL a full disk gives.
        assert isinstance(store, SqliteFlowStore)
        database = store.database
        pages = await database.run(
            lambda: database.connection().execute("PRAGMA page_count").fetchone()[0]
        )
        await database.run(lambda: database.connection().execute(f"PRAGMA max_page_count={pages}"))
        big = Commit(flow_id="a", epoch=epoch, attribute_upserts={"big": b"x" * 1_000_000})

        with pytest.raises(StoreUnavailableError) as failed:
            await store.runs.commit(big)

        assert "full" in str(failed.value)
        loaded = await store.runs.activate("a")
        assert loaded[1] is not None and "big" not in loaded[1].attributes
        await database.run(
            lambda: database.connection().execute("PRAGMA max_page_count=1073741823")
        )
        await store.runs.commit(
            Commit(flow_id="a", epoch=loaded[0], attribute_upserts={"big": b"y"})
        )
