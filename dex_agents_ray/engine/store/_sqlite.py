"""The embedded SQLite ``FlowStore`` (WAL, one file, any number of processes)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from dex_agents_ray.engine.store._records import (
    SCHEMA_VERSION,
    ChannelMessageRecord,
    Commit,
    CompletionRecord,
    ExecRecord,
    ExecStatus,
    HistoryRecord,
    LoadedRun,
    PruneRequest,
    RunRecord,
    RunStatus,
    StreamAppend,
    StreamRecord,
    compact_json,
)
from dex_agents_ray.engine.store._run_rows import PER_RUN_TABLES, run_from_row, runs_query
from dex_agents_ray.engine.store._sqlite_files import (
    SCHEMA,
    UPSERT_RUN,
    begin_at_once,
    create_owner_only,
    index_active_steps,
    take_flock,
    transient,
    try_flock,
)
from dex_agents_ray.engine.store._sqlite_streams import StreamRows, list_rows, read_rows
from dex_agents_ray.engine.store._store import SqliteStoreConfig, StaleEpochError
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


class SqliteFlowStore:
    """``FlowStore`` on one SQLite file in WAL mode.

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
        self._streams = StreamRows()
        self.commits_written = 0
        """Commits applied so far (with ``transactions_written``: commits per fsync)."""
        self.transactions_written = 0
        self.transient_faults = 0
        """Transient faults (a locked file, a full disk) retried so far."""

    def __repr__(self) -> str:
        return f"SqliteFlowStore({self._config.path!r})"

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
    def _writing(self) -> Iterator[sqlite3.Connection]:
        """The connection, for one write transaction, holding the writers' ``flock``
        (see the class docstring). A writer that cannot have it within SQLite's busy
        wait (its holder hangs) writes without it: SQLite's lock and the store's
        retry deadline then decide, as they do for writers of other programs."""
        db = self._db()
        lock = self._writer_lock
        if lock is None or not take_flock(lock, self._busy_wait):
            yield db  # SQLite's own lock (and its busy timeout) decides
            return
        try:
            yield db
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
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

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RuntimeError("the store is not open")
        return self._conn

    # -- flow definitions -------------------------------------------------------------

    async def put_flow_definition(self, flow_type: str, flow_hash: str, blob: bytes) -> None:
        def put() -> None:
            self._db().execute(
                "INSERT OR IGNORE INTO flow_definitions VALUES (?, ?, ?, ?)",
                (flow_type, flow_hash, blob, time.time()),
            )

        await self._run(put)

    async def get_flow_definition(self, flow_type: str, flow_hash: str) -> bytes | None:
        def get() -> bytes | None:
            row = (
                self._db()
                .execute(
                    "SELECT blob FROM flow_definitions WHERE flow_type=? AND flow_hash=?",
                    (flow_type, flow_hash),
                )
                .fetchone()
            )
            return None if row is None else bytes(row[0])

        return await self._run(get)

    # -- runs -------------------------------------------------------------------------

    async def activate(self, flow_id: str) -> tuple[int, LoadedRun | None]:
        return await self._run(self._activate_sync, flow_id)

    def _activate_sync(self, flow_id: str) -> tuple[int, LoadedRun | None]:
        with self._writing() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute(
                    "INSERT INTO epochs VALUES (?, 1) "
                    "ON CONFLICT (flow_id) DO UPDATE SET epoch = epoch + 1",
                    (flow_id,),
                )
                epoch = int(
                    db.execute("SELECT epoch FROM epochs WHERE flow_id=?", (flow_id,)).fetchone()[0]
                )
                db.execute("DELETE FROM passivated WHERE flow_id=?", (flow_id,))
                loaded = self._load_sync(flow_id)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        return epoch, loaded

    def _load_sync(self, flow_id: str) -> LoadedRun | None:
        db = self._db()
        run = self._get_run_sync(flow_id)
        if run is None:
            return None
        attributes = {
            key: bytes(value)
            for key, value in db.execute(
                "SELECT key, value FROM attributes WHERE flow_id=?", (flow_id,)
            )
        }
        messages = [
            ChannelMessageRecord(channel=c, seq=s, message_id=m, value=bytes(v))
            for c, s, m, v in db.execute(
                "SELECT channel, seq, message_id, value FROM messages WHERE flow_id=? ORDER BY seq",
                (flow_id,),
            )
        ]
        executions = [
            ExecRecord.from_json(doc)
            for (doc,) in db.execute(
                "SELECT doc FROM executions WHERE flow_id=? ORDER BY rowid", (flow_id,)
            )
        ]
        return LoadedRun(
            run=run,
            attributes=attributes,
            messages=messages,
            executions=executions,
            completions=self._completions_sync(flow_id),
        )

    async def commit(self, commit: Commit, *, replace_run: bool = False) -> list[int]:
        """Apply ``commit``, sharing one transaction and one fsync with the
        commits queued at the same time (group commit); returns once the
        transaction that covers it is durable."""
        # A group transaction that failed applied none of its commits (SQLite rolls
        # back a failed COMMIT in this process), so a retry cannot apply twice.
        return await self._retry(
            "commit", lambda: self._grouped(lambda db: self._commit_body(db, commit, replace_run))
        )

    async def _grouped(self, write: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``write`` in the next group transaction; its result once durable."""
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
                db = self._db()
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
                with self._writing() as db:
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

    def _commit_body(self, db: sqlite3.Connection, commit: Commit, replace_run: bool) -> list[int]:
        row = db.execute("SELECT epoch FROM epochs WHERE flow_id=?", (commit.flow_id,)).fetchone()
        current = None if row is None else int(row[0])
        if current != commit.epoch:
            raise StaleEpochError(commit.flow_id, commit.epoch, current)
        if replace_run:
            for table in PER_RUN_TABLES:
                db.execute(f"DELETE FROM {table} WHERE flow_id=?", (commit.flow_id,))
        return self._apply(db, commit)

    def _apply(self, db: sqlite3.Connection, c: Commit) -> list[int]:
        fid = c.flow_id
        if c.run is not None:
            db.execute(UPSERT_RUN, c.run.row())
        if c.run is not None and c.active_steps_changed:
            db.execute("DELETE FROM active_steps WHERE flow_id=?", (fid,))
            db.executemany(
                "INSERT INTO active_steps VALUES (?,?,?)",
                [(t, c.run.started_at, fid) for t in dict.fromkeys(c.run.active_step_types)],
            )
        # Each statement only when it has rows: a commit touches few of the tables.
        for key in c.attribute_deletes:
            db.execute("DELETE FROM attributes WHERE flow_id=? AND key=?", (fid, key))
        if c.attribute_upserts:
            db.executemany(
                "INSERT INTO attributes VALUES (?,?,?) "
                "ON CONFLICT (flow_id, key) DO UPDATE SET value=excluded.value",
                [(fid, k, v) for k, v in c.attribute_upserts.items()],
            )
        for channel, message_id in c.message_deletes:
            db.execute(
                "DELETE FROM messages WHERE flow_id=? AND channel=? AND message_id=?",
                (fid, channel, message_id),
            )
        if c.message_appends:
            db.executemany(
                "INSERT INTO messages VALUES (?,?,?,?,?)",
                [(fid, m.channel, m.seq, m.message_id, m.value) for m in c.message_appends],
            )
        if c.executions:
            db.executemany(
                "INSERT OR REPLACE INTO executions VALUES (?,?,?,?,?)",
                [(fid, e.exec_id, e.status.value, e.wake_at, e.to_json()) for e in c.executions],
            )
        if c.completions:
            base = db.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM completions WHERE flow_id=?", (fid,)
            ).fetchone()[0]
            db.executemany(
                "INSERT INTO completions VALUES (?,?,?,?,?)",
                [
                    (fid, base + i + 1, x.step_type, x.exec_id, x.output)
                    for i, x in enumerate(c.completions)
                ],
            )
        if c.history:
            base = db.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM history WHERE flow_id=?", (fid,)
            ).fetchone()[0]
            db.executemany(
                "INSERT INTO history VALUES (?,?,?,?,?,?)",
                [
                    (fid, base + i + 1, h.at, h.exec_id, h.event, compact_json(h.detail))
                    for i, h in enumerate(c.history)
                ],
            )
        if c.rpc_request is not None:
            db.execute(
                "INSERT OR REPLACE INTO rpc_requests VALUES (?,?,?)",
                (fid, c.rpc_request[0], c.rpc_request[1]),
            )
        if c.prune is not None:
            self._prune(db, fid, c.prune)
        return self._streams.append(db, fid, c.stream_appends) if c.stream_appends else []

    @staticmethod
    def _prune(db: sqlite3.Connection, fid: str, prune: PruneRequest) -> None:
        """Delete the run's older finished executions with their history, and its
        older remembered RPC responses (``RetentionOptions``); rowids order them
        by when they were last written."""
        if prune.keep_finished_executions is not None:
            old = (
                "SELECT exec_id FROM executions WHERE flow_id=?1 AND status IN "
                "('completed','failed','canceled') ORDER BY rowid DESC LIMIT -1 OFFSET ?2"
            )
            keep = (fid, prune.keep_finished_executions)
            db.execute(f"DELETE FROM history WHERE flow_id=?1 AND exec_id IN ({old})", keep)
            db.execute(f"DELETE FROM executions WHERE flow_id=?1 AND exec_id IN ({old})", keep)
        if prune.keep_rpc_requests is not None:
            keep = (fid, prune.keep_rpc_requests)
            db.execute(
                "DELETE FROM rpc_requests WHERE flow_id=?1 AND rowid IN (SELECT rowid FROM "
                "rpc_requests WHERE flow_id=?1 ORDER BY rowid DESC LIMIT -1 OFFSET ?2)",
                keep,
            )
            # History of no kept execution (RPCs, run events): the newest as many.
            loose = (
                "SELECT seq FROM history WHERE flow_id=?1 AND exec_id NOT IN "
                "(SELECT exec_id FROM executions WHERE flow_id=?1)"
            )
            db.execute(
                f"DELETE FROM history WHERE flow_id=?1 AND seq IN ({loose} "
                "ORDER BY seq DESC LIMIT -1 OFFSET ?2)",
                keep,
            )

    async def get_run(self, flow_id: str) -> RunRecord | None:
        return await self._run(self._get_run_sync, flow_id)

    def _get_run_sync(self, flow_id: str) -> RunRecord | None:
        db = self._db()
        row = db.execute("SELECT * FROM runs WHERE flow_id=?", (flow_id,)).fetchone()
        if row is None:
            return None
        epoch_row = db.execute("SELECT epoch FROM epochs WHERE flow_id=?", (flow_id,)).fetchone()
        return run_from_row(row, 0 if epoch_row is None else int(epoch_row[0]))

    async def list_runs(
        self,
        *,
        flow_type: str | None = None,
        active_step_type: str | None = None,
        limit: int | None = None,
    ) -> list[RunRecord]:
        sql, params = runs_query(flow_type, active_step_type, limit, "?")

        def list_some() -> list[RunRecord]:
            return [run_from_row(row, 0) for row in self._db().execute(sql, params)]

        return await self._run(list_some)

    async def completions(self, flow_id: str) -> list[CompletionRecord]:
        return await self._run(self._completions_sync, flow_id)

    def _completions_sync(self, flow_id: str) -> list[CompletionRecord]:
        return [
            CompletionRecord(step_type=t, exec_id=e, output=bytes(o))
            for t, e, o in self._db().execute(
                "SELECT step_type, exec_id, output FROM completions WHERE flow_id=? ORDER BY seq",
                (flow_id,),
            )
        ]

    async def history(self, flow_id: str) -> list[HistoryRecord]:
        def read() -> list[HistoryRecord]:
            return [
                HistoryRecord(at=at, exec_id=e, event=ev, detail=json.loads(d))
                for at, e, ev, d in self._db().execute(
                    "SELECT at, exec_id, event, detail FROM history WHERE flow_id=? ORDER BY seq",
                    (flow_id,),
                )
            ]

        return await self._run(read)

    async def rpc_response(self, flow_id: str, request_id: str) -> bytes | None:
        def read() -> bytes | None:
            row = (
                self._db()
                .execute(
                    "SELECT response FROM rpc_requests WHERE flow_id=? AND request_id=?",
                    (flow_id, request_id),
                )
                .fetchone()
            )
            return None if row is None else bytes(row[0])

        return await self._run(read)

    async def runs_with_work(self) -> list[str]:
        def read() -> list[str]:
            rows = self._db().execute(
                "SELECT DISTINCT e.flow_id FROM executions e JOIN runs r ON r.flow_id = e.flow_id "
                "WHERE r.status = ? AND e.status IN (?, ?, ?) "
                "AND e.flow_id NOT IN (SELECT flow_id FROM passivated)",
                (
                    RunStatus.RUNNING.value,
                    ExecStatus.WAIT_FOR.value,
                    ExecStatus.WAITING.value,
                    ExecStatus.READY.value,
                ),
            )
            return [row[0] for row in rows]

        return await self._run(read)

    # -- passivation -------------------------------------------------------------------

    async def passivate(self, flow_id: str, epoch: int, wake_at: float | None) -> None:
        def write() -> None:
            with self._writing() as db:
                db.execute("BEGIN IMMEDIATE")
                try:
                    row = db.execute(
                        "SELECT epoch FROM epochs WHERE flow_id=?", (flow_id,)
                    ).fetchone()
                    current = None if row is None else int(row[0])
                    if current != epoch:
                        raise StaleEpochError(flow_id, epoch, current)
                    db.execute(
                        "INSERT OR REPLACE INTO passivated VALUES (?, ?)", (flow_id, wake_at)
                    )
                    db.execute("COMMIT")
                except BaseException:
                    db.execute("ROLLBACK")
                    raise

        await self._run(write)

    async def due_passivated(self, now: float) -> list[str]:
        def read() -> list[str]:
            rows = self._db().execute(
                "SELECT flow_id FROM passivated WHERE wake_at IS NOT NULL AND wake_at <= ? "
                "ORDER BY wake_at",
                (now,),
            )
            return [row[0] for row in rows]

        return await self._run(read)

    async def next_passivated_wake(self) -> float | None:
        def read() -> float | None:
            row = self._db().execute("SELECT MIN(wake_at) FROM passivated").fetchone()
            return None if row is None or row[0] is None else float(row[0])

        return await self._run(read)

    async def passivated_count(self) -> int:
        def read() -> int:
            return int(self._db().execute("SELECT COUNT(*) FROM passivated").fetchone()[0])

        return await self._run(read)

    async def clock_offset(self) -> float:
        def read() -> float:
            row = self._db().execute("SELECT value FROM meta WHERE key='clock_offset'").fetchone()
            return 0.0 if row is None else float(row[0])

        return await self._run(read)

    async def set_clock_offset(self, seconds: float) -> None:
        def write(db: sqlite3.Connection) -> None:
            db.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('clock_offset', ?)",
                (repr(float(seconds)),),
            )

        await self._retry("set_clock_offset", lambda: self._grouped(write))

    # -- streams ----------------------------------------------------------------------

    async def append_stream(
        self, flow_id: str, stream: str, source: str, value: bytes, capacity_bytes: int
    ) -> int:
        appended = StreamAppend(
            stream=stream, source=source, value=value, capacity_bytes=capacity_bytes
        )
        (offset,) = await self.append_streams(flow_id, (appended,))
        return offset

    async def append_streams(self, flow_id: str, appends: Sequence[StreamAppend]) -> list[int]:
        def append(db: sqlite3.Connection) -> list[int]:
            return self._streams.append(db, flow_id, appends)

        # Streams ride in the group transactions of the commits around them.
        return await self._retry("append_streams", lambda: self._grouped(append))

    async def read_stream(
        self, flow_id: str, stream: str, after_offset: int, limit: int
    ) -> list[StreamRecord]:
        return await self._run(lambda: read_rows(self._db(), flow_id, stream, after_offset, limit))

    async def list_stream(
        self, flow_id: str, stream: str, before_offset: int | None, limit: int
    ) -> list[StreamRecord]:
        return await self._run(lambda: list_rows(self._db(), flow_id, stream, before_offset, limit))
