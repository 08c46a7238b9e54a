"""The SQLite store's database: its one connection, the thread that serves it,
the writers' lock, retries, and the group transactions that writes share.

Every role of ``SqliteFlowStore`` (runs, Streams, passivation ...) reads and
writes through one ``SqliteDatabase``, so a commit and the Stream appends
queued beside it share one transaction and one fsync.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import threading
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from dex_agents_ray.engine.store._records import SCHEMA_VERSION
from dex_agents_ray.engine.store._sqlite_files import (
    SCHEMA,
    begin_at_once,
    create_owner_only,
    index_active_steps,
    take_flock,
    transient,
    try_flock,
)
from dex_agents_ray.engine.store._store import SqliteStoreConfig
from dex_agents_ray.engine.store._store_retry import retrying

try:
    import fcntl
except ImportError:  # pragma: no cover - not on Windows
    fcntl = None  # type: ignore[assignment]

T = TypeVar("T")

_BUSY_WAIT_SECONDS = 5.0

_LOOP_LOCK_RETRY = 0.0005
"""How often a group transaction waiting on the event loop tries the writers' flock."""
_LOOP_LOCK_TRIES = 20
"""Tries on the loop before the store's thread waits for the flock instead."""


@dataclass
class _Pending:
    """A write waiting for the transaction that will carry it."""

    write: Callable[[sqlite3.Connection], Any]
    done: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop


def _settle_all(batch: list[_Pending], outcomes: list[tuple[Any, BaseException | None]]) -> None:
    """Hand each write's outcome to its caller's loop (directly on that loop)."""
    try:
        running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    for item, (result, outcome) in zip(batch, outcomes, strict=True):
        if item.loop is running:
            _settle(item.done, result, outcome)
        else:
            item.loop.call_soon_threadsafe(_settle, item.done, result, outcome)


def _settle(done: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if done.done():
        return
    if error is None:
        done.set_result(result)
    else:
        done.set_exception(error)


class SqliteDatabase:
    """One SQLite file in WAL mode, for the roles of one ``SqliteFlowStore``.

    One connection per store object. Reads and single writes run on a dedicated
    thread; a group transaction runs on the event loop's own thread when the
    connection and the writers' locks are free at once (it then blocks the loop
    for its statements and its fsync only), else on that thread, which may wait
    for them (see ``_flush_here``). Processes share the
    file; SQLite serializes their writers. Their write transactions first take an
    exclusive ``flock`` on ``<file>-writer.lock`` (where ``fcntl`` exists): a
    writer that waits for SQLite's own lock polls it with sleeps of 1, 2, 5, 10
    ... 100 ms, and with four shared hosts committing at once in
    ``benchmarks/agent_loop.py`` each transaction waited about 8 ms that way (up
    to half a second) while the disk work took 2; a waiter on the ``flock`` tries
    again within a millisecond. A process that dies lets go of it with its files.
    """

    def __init__(self, config: SqliteStoreConfig) -> None:
        self._config = config
        self._executor: ThreadPoolExecutor | None = None
        self._conn: sqlite3.Connection | None = None
        self._writer_lock: int | None = None
        self._busy_wait = _BUSY_WAIT_SECONDS
        self._pending: list[_Pending] = []
        self._pending_lock = threading.Lock()
        self._conn_lock = threading.Lock()
        self._flush_scheduled = False
        self.commits_written = 0
        """Commits applied so far (with ``transactions_written``: commits per fsync)."""
        self.transactions_written = 0
        self.transient_faults = 0
        """Transient faults (a locked file, a full disk) retried so far."""

    @property
    def path(self) -> str:
        """The database file."""
        return self._config.path

    async def open(self) -> None:
        if self._executor is not None:
            return
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dex-sqlite")
        await self._once(self._open_sync)

    def _open_sync(self) -> None:
        create_owner_only(Path(self._config.path))
        if fcntl is not None:
            self._writer_lock = os.open(
                f"{self._config.path}-writer.lock", os.O_RDWR | os.O_CREAT, 0o600
            )
        conn = sqlite3.connect(self._config.path, isolation_level=None, check_same_thread=False)
        # One try waits this long for another writer; the retry loop goes on to the deadline.
        busy = min(_BUSY_WAIT_SECONDS, self._config.retry_deadline.total_seconds())
        self._busy_wait = busy
        conn.execute(f"PRAGMA busy_timeout={int(busy * 1000)}")
        conn.execute("PRAGMA journal_mode=WAL")
        sync = "FULL" if self._config.durability == "full" else "NORMAL"
        conn.execute(f"PRAGMA synchronous={sync}")
        conn.executescript(SCHEMA)
        conn.execute("BEGIN IMMEDIATE")
        row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if row is None:
            conn.execute(
                "INSERT INTO meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
            )
        elif int(row[0]) > SCHEMA_VERSION:
            conn.execute("ROLLBACK")
            raise RuntimeError(
                f"store {self._config.path} has schema version {row[0]}; this release "
                f"reads versions up to {SCHEMA_VERSION}"
            )
        index_active_steps(conn)
        conn.execute("COMMIT")
        self._conn = conn

    async def close(self) -> None:
        if self._executor is None:
            return
        await self._once(self._close_sync)
        self._executor.shutdown(wait=True)
        self._executor = None

    def _close_sync(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._writer_lock is not None:
            os.close(self._writer_lock)
            self._writer_lock = None

    @contextlib.contextmanager
    def writing(self) -> Iterator[sqlite3.Connection]:
        """The connection, for one write transaction, holding the writers' ``flock``
        (see the class docstring). A writer that cannot have it within SQLite's busy
        wait (its holder hangs) writes without it: SQLite's lock and the store's
        retry deadline then decide, as they do for writers of other programs."""
        db = self.connection()
        lock = self._writer_lock
        if lock is None or not take_flock(lock, self._busy_wait):
            yield db  # SQLite's own lock (and its busy timeout) decides
            return
        try:
            yield db
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """The connection in one ``BEGIN IMMEDIATE`` transaction of its own (not a
        group's), under the writers' ``flock``: committed when the body returns,
        rolled back when it raises."""
        with self.writing() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on the store's thread, retrying transient faults (every
        such ``fn`` is one transaction, or none: a failed try applied nothing)."""
        return await self._retry(
            getattr(fn, "__name__", "operation").strip("_"), lambda: self._once(fn, *args)
        )

    async def _once(self, fn: Callable[..., T], *args: Any) -> T:
        if self._executor is None:
            raise RuntimeError("the store is not open")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._locked, fn, *args)

    def _locked(self, fn: Callable[..., T], *args: Any) -> T:
        with self._conn_lock:
            return fn(*args)

    async def _retry(self, operation: str, call: Callable[[], Awaitable[T]]) -> T:
        def counted(error: BaseException) -> bool:
            if not transient(error):
                return False
            self.transient_faults += 1
            return True

        config = self._config
        return await retrying(
            config.location, operation, config.retry_deadline, counted, lambda _: call()
        )

    def connection(self) -> sqlite3.Connection:
        """The open connection, for a function that :meth:`run` runs (or a group
        write) to use."""
        if self._conn is None:
            raise RuntimeError("the store is not open")
        return self._conn

    async def grouped(self, operation: str, write: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``write`` in the next group transaction; its result once durable.

        A group transaction that failed applied none of its writes (SQLite rolls
        back a failed COMMIT in this process), so a retry cannot apply one twice:
        ``write`` is tried again, in a later group, until the retry deadline.
        """
        return await self._retry(operation, lambda: self._queued(write))

    async def _queued(self, write: Callable[[sqlite3.Connection], T]) -> T:
        if self._executor is None:
            raise RuntimeError("the store is not open")
        loop = asyncio.get_running_loop()
        done: asyncio.Future[T] = loop.create_future()
        with self._pending_lock:
            self._pending.append(_Pending(write, done, loop))
            schedule = not self._flush_scheduled
            self._flush_scheduled = True
        if schedule:
            # Written two loop iterations on: the commits that the callbacks of the
            # next iteration make (tool results, RPCs that arrived meanwhile) join
            # the group (at C=50, 789 against 751 steps/s in 8 paired runs).
            loop.call_soon(self._flush_next_iteration)
        return await done

    def _flush_next_iteration(self) -> None:
        asyncio.get_running_loop().call_soon(self._flush_here)

    def _flush_here(self, tries: int = 0) -> None:
        """Write the queued writes on the event loop's own thread when the
        connection and the writers' ``flock`` are free at once, and SQLite's write
        lock is too; else hand them to the store's thread, which waits its turn.
        While another process holds the ``flock`` the loop tries again every
        ``_LOOP_LOCK_RETRY`` seconds (commits queued meanwhile join the group), up
        to ``_LOOP_LOCK_TRIES`` times, then hands over.

        A transaction on the store's thread needs the GIL back after every
        statement and after its ``COMMIT``, while a loaded host's event loop holds
        it: at 50 sessions a ``COMMIT`` took 1.9 ms of wall time for 0.36 ms of
        CPU, and the ``flock`` stayed taken all along, so the other hosts' writes
        waited too. Here the loop pays the statements' CPU it would have paid
        anyway and waits only for the fsync, never for a lock."""
        if self._conn is None or not self._conn_lock.acquire(blocking=False):
            self._hand_over()
            return
        try:
            lock = self._writer_lock
            if lock is not None and not try_flock(lock):
                if tries < _LOOP_LOCK_TRIES:
                    loop = asyncio.get_running_loop()
                    loop.call_later(_LOOP_LOCK_RETRY, self._flush_here, tries + 1)
                else:
                    self._hand_over()
                return
            try:
                db = self.connection()
                try:
                    began = begin_at_once(db, self._busy_wait)
                except sqlite3.Error:
                    if db.in_transaction:
                        with contextlib.suppress(sqlite3.Error):
                            db.execute("ROLLBACK")
                    began = False
                if not began:  # another program writes without the flock
                    self._hand_over()
                    return
                outcomes: list[tuple[Any, BaseException | None]] = []
                batch = self._write_queued(db, outcomes, begun=True)
            finally:
                if lock is not None:
                    fcntl.flock(lock, fcntl.LOCK_UN)
        finally:
            self._conn_lock.release()
        _settle_all(batch, outcomes)

    def _hand_over(self) -> None:
        """Give the queued writes to the store's thread (or fail them: it is closed)."""
        executor = self._executor
        if executor is not None:
            try:
                executor.submit(self._flush)
                return
            except RuntimeError:  # shut down since
                pass
        batch = self._take_queued()
        _settle_all(batch, [(None, RuntimeError("the store is not open"))] * len(batch))

    def _flush(self) -> None:
        """Write every queued write in one transaction; one savepoint each when
        there are several, so a refused commit (a stale epoch) rolls back alone.
        The queue is taken once the transaction holds the write lock: writes
        queued while this store waited for another process's transaction ride in
        this one."""
        outcomes: list[tuple[Any, BaseException | None]] = []
        with self._conn_lock:
            if self._conn is None:
                batch = self._take_queued()
                outcomes = [(None, RuntimeError("the store is not open"))] * len(batch)
            else:
                with self.writing() as db:
                    batch = self._write_queued(db, outcomes)
        _settle_all(batch, outcomes)

    def _take_queued(self) -> list[_Pending]:
        with self._pending_lock:
            batch, self._pending = self._pending, []
            self._flush_scheduled = False
        return batch

    def _write_queued(
        self,
        db: sqlite3.Connection,
        outcomes: list[tuple[Any, BaseException | None]],
        *,
        begun: bool = False,
    ) -> list[_Pending]:
        try:
            if not begun:
                db.execute("BEGIN IMMEDIATE")
        except BaseException as error:
            batch = self._take_queued()
            outcomes[:] = [(None, error)] * len(batch)
            return batch
        batch = self._take_queued()
        try:
            if not batch:
                db.execute("ROLLBACK")
                return batch
            if len(batch) == 1:
                # One write: the transaction is its savepoint.
                try:
                    outcomes.append((batch[0].write(db), None))
                except Exception as error:
                    if db.in_transaction:
                        db.execute("ROLLBACK")
                    outcomes.append((None, error))
                    return batch
            else:
                for item in batch:
                    db.execute("SAVEPOINT one_write")
                    try:
                        result = item.write(db)
                    except Exception as error:
                        if not db.in_transaction:
                            # SQLite rolled the whole transaction back itself (a full
                            # disk, an I/O error): no write of the batch is applied.
                            raise error from None
                        db.execute("ROLLBACK TO one_write")
                        outcomes.append((None, error))
                    else:
                        outcomes.append((result, None))
                    db.execute("RELEASE one_write")
            db.execute("COMMIT")
            self.commits_written += len(batch)
            self.transactions_written += 1
        except BaseException as error:
            if db.in_transaction:
                with contextlib.suppress(sqlite3.Error):  # the batch is settled either way
                    db.execute("ROLLBACK")
            outcomes[:] = [(None, error)] * len(batch)
        return batch
