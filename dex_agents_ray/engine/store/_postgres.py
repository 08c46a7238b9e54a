"""The PostgreSQL ``FlowStore`` (the ``postgres`` extra: psycopg 3, async, pooled).

Same records and semantics as the SQLite store; the differences are how
writers are serialized. SQLite has one writer at a time; here every commit
locks its run's epoch row (``SELECT ... FOR UPDATE``, in the ``dex_fence``
function) inside its transaction, so commits of one run, and its activations,
run one after another while other runs commit in parallel. Stream appends take
their offset from a per-stream head row, locked the same way.

Round trips are what a remote database costs, so each operation is one: a
commit pipelines BEGIN, the fence, every write and COMMIT, and the fence
aborts the transaction when the epoch is stale.

Every statement of one store object runs on the store's own event loop, in a
dedicated thread, over a small connection pool. Callers on any loop or thread
(a host's loop, ``SyncEngineClient``'s private loop) await it, and a busy
caller loop never delays a commit already sent.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from dex_agents_ray.engine.store._postgres_conn import Connections, IdleProbe, LoopThread
from dex_agents_ray.engine.store._postgres_sql import (
    _ACTIVE_STATUSES,
    _COMPLETIONS,
    _MARKS_SCHEMA,
    _RUN_COLUMNS,
    _SCHEMA,
    _SCHEMA_LOCK_KEY,
    _SEARCH_SCHEMA,
    _SET_MARK,
    _STALE_MESSAGE,
    StreamSizes,
    _add_column,
    _add_table,
    _append_stream,
    _appended_offsets,
    _apply,
    _completions_from,
    _fetch_all,
    _fetch_one,
    _mark_of,
    _returned,
    _stream_records,
)
from dex_agents_ray.engine.store._records import (
    SCHEMA_VERSION,
    ChannelMessageRecord,
    Commit,
    CompletionRecord,
    ExecRecord,
    HistoryRecord,
    LoadedRun,
    RunRecord,
    RunStatus,
    StreamAppend,
    StreamRecord,
)

# The per-run table list and the run-row decoding are shared with the SQLite
# store, so both agree on what a replaced run drops and how a run row reads.
from dex_agents_ray.engine.store._run_rows import PER_RUN_TABLES, run_from_row, runs_query
from dex_agents_ray.engine.store._store import PostgresStoreConfig, StaleEpochError
from dex_agents_ray.engine.store._store_retry import retrying

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg.rows import TupleRow
    from psycopg_pool import AsyncConnectionPool

    Connection = AsyncConnection[TupleRow]

T = TypeVar("T")

_INSTALL_HINT = 'pip install "dex-agents-ray[postgres]"'

_POOL_WAIT_SECONDS = 2.0
"""The longest one try waits for a pooled connection before it opens its own."""


def _transient(error: BaseException) -> bool:
    """Faults of the server or the connection, which a later try can outlive."""
    import psycopg
    from psycopg_pool import PoolTimeout

    if isinstance(error, StaleEpochError):
        return False
    return isinstance(error, PoolTimeout | psycopg.OperationalError | psycopg.InterfaceError)


def _import_driver() -> None:
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError as error:
        raise ImportError(
            f"the PostgreSQL store needs psycopg 3 and psycopg-pool: {_INSTALL_HINT}"
        ) from error


class PostgresFlowStore:
    """``FlowStore`` on a PostgreSQL database; see the module docstring.

    ``open`` connects once (a bad DSN, password or server fails there, with
    the driver's error), creates or checks the schema, then opens the pool.
    """

    def __init__(self, config: PostgresStoreConfig) -> None:
        _import_driver()
        self._config = config
        self._runner: LoopThread | None = None
        self._pool: AsyncConnectionPool[Connection] | None = None
        self._connections: Connections | None = None
        self._probe = IdleProbe()
        self._stream_sizes = StreamSizes()

    def __repr__(self) -> str:
        return f"PostgresFlowStore({self._config.location!r})"

    async def open(self) -> None:
        if self._runner is not None:
            return
        runner = LoopThread("dex-postgres")
        try:
            await runner.run(self._open())
        except BaseException:
            runner.stop()
            raise
        self._runner = runner

    async def _open(self) -> None:
        from psycopg import AsyncConnection
        from psycopg_pool import AsyncConnectionPool

        conn = await AsyncConnection.connect(self._config.dsn, autocommit=True)
        try:
            await self._ensure_schema(conn)
        finally:
            await conn.close()
        pool: AsyncConnectionPool[Connection] = AsyncConnectionPool(
            self._config.dsn,
            min_size=1,
            max_size=self._config.pool_size,
            timeout=min(_POOL_WAIT_SECONDS, self._config.retry_deadline.total_seconds()),
            kwargs={"autocommit": True},
            configure=self._configure,
            check=self._probe.check,
            reset=self._probe.returned,
            name="dex-postgres",
            open=False,
        )
        await pool.open()
        self._pool = pool
        self._connections = Connections(pool, self._config.dsn, self._configure)

    async def _configure(self, conn: Connection) -> None:
        if self._config.durability == "process":
            await conn.execute("SET synchronous_commit = off")
        await self._probe.returned(conn)

    async def _ensure_schema(self, conn: Connection) -> None:
        version = await self._schema_version(conn)
        if version is None:
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK_KEY,))
                await conn.execute("SET LOCAL client_min_messages = warning")
                await conn.execute(_SCHEMA)
                await conn.execute(
                    "INSERT INTO meta (key, value) VALUES ('schema_version', %s) "
                    "ON CONFLICT (key) DO NOTHING",
                    (str(SCHEMA_VERSION),),
                )
            version = await self._schema_version(conn)
        # Tables added since schema version 1, for stores made before them.
        await _add_table(conn, "write_marks", _MARKS_SCHEMA)
        await _add_table(conn, "active_steps", _SEARCH_SCHEMA)
        # Columns added since: when an RPC response was remembered (retention keeps the newest).
        await _add_column(conn, "rpc_requests", "written", "DOUBLE PRECISION NOT NULL DEFAULT 0")
        if version is not None and version > SCHEMA_VERSION:
            raise RuntimeError(
                f"store {self._config.location} has schema version {version}; this release "
                f"reads versions up to {SCHEMA_VERSION}"
            )

    @staticmethod
    async def _schema_version(conn: Connection) -> int | None:
        cur = await conn.execute("SELECT to_regclass('meta') IS NOT NULL")
        row = await cur.fetchone()
        if row is None or not row[0]:
            return None
        cur = await conn.execute("SELECT value FROM meta WHERE key = 'schema_version'")
        row = await cur.fetchone()
        return None if row is None else int(row[0])

    async def close(self) -> None:
        runner, self._runner = self._runner, None
        if runner is None:
            return
        try:
            await runner.run(self._close())
        finally:
            runner.stop()

    async def _close(self) -> None:
        pool, self._pool = self._pool, None
        self._connections = None
        if pool is not None:
            await pool.close()

    async def _run(self, fn: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> T:
        """Run ``fn(pool, *args)`` on the store's loop, retrying transient faults.

        Only for operations that are safe to repeat whole: reads, and writes
        that apply the same whatever they find (an epoch bump, an upsert).
        """
        name = fn.__name__.strip("_")
        operation = "read" if name.startswith("fetch") else name
        return await self._retry(operation, lambda _: fn(self._connections, *args))

    async def _retry(self, operation: str, attempt: Callable[[int], Coroutine[Any, Any, T]]) -> T:
        runner = self._runner
        if runner is None or self._connections is None:
            raise RuntimeError("the store is not open")

        async def one(tries: int) -> T:
            return await runner.run(attempt(tries))

        config = self._config
        return await retrying(config.location, operation, config.retry_deadline, _transient, one)

    # -- flow definitions -------------------------------------------------------------

    async def put_flow_definition(self, flow_type: str, flow_hash: str, blob: bytes) -> None:
        await self._run(self._put_flow_definition, flow_type, flow_hash, blob)

    @staticmethod
    async def _put_flow_definition(
        pool: Connections, flow_type: str, flow_hash: str, blob: bytes
    ) -> None:
        async with pool.connection() as conn:
            await conn.execute(
                "INSERT INTO flow_definitions (flow_type, flow_hash, blob, created_at) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (flow_type, flow_hash, blob, time.time()),
            )

    async def get_flow_definition(self, flow_type: str, flow_hash: str) -> bytes | None:
        row = await self._run(
            _fetch_one,
            "SELECT blob FROM flow_definitions WHERE flow_type = %s AND flow_hash = %s",
            (flow_type, flow_hash),
        )
        return None if row is None else bytes(row[0])

    # -- runs -------------------------------------------------------------------------

    async def activate(self, flow_id: str) -> tuple[int, LoadedRun | None]:
        return await self._run(self._activate, flow_id)

    @staticmethod
    async def _activate(pool: Connections, flow_id: str) -> tuple[int, LoadedRun | None]:
        # One round trip: the epoch bump waits for any commit of the run in
        # progress (it holds the row lock), and the reads after it see that commit.
        async with pool.connection() as conn, conn.pipeline(), conn.transaction():
            bumped = await conn.execute(
                "INSERT INTO epochs (flow_id, epoch) VALUES (%s, 1) ON CONFLICT (flow_id) "
                "DO UPDATE SET epoch = epochs.epoch + 1 RETURNING epoch",
                (flow_id,),
            )
            await conn.execute("DELETE FROM passivated WHERE flow_id = %s", (flow_id,))
            run = await conn.execute(
                f"SELECT {_RUN_COLUMNS} FROM runs WHERE flow_id = %s", (flow_id,)
            )
            attributes = await conn.execute(
                "SELECT key, value FROM attributes WHERE flow_id = %s", (flow_id,)
            )
            messages = await conn.execute(
                "SELECT channel, seq, message_id, value FROM messages "
                "WHERE flow_id = %s ORDER BY seq",
                (flow_id,),
            )
            executions = await conn.execute(
                "SELECT doc FROM executions WHERE flow_id = %s ORDER BY written", (flow_id,)
            )
            completions = await conn.execute(_COMPLETIONS, (flow_id,))
            epoch = _returned(await bumped.fetchone())
            run_row = await run.fetchone()
            loaded = None
            if run_row is not None:
                loaded = LoadedRun(
                    run=run_from_row(run_row, epoch),
                    attributes={k: bytes(v) for k, v in await attributes.fetchall()},
                    messages=[
                        ChannelMessageRecord(channel=c, seq=s, message_id=m, value=bytes(v))
                        for c, s, m, v in await messages.fetchall()
                    ],
                    executions=[ExecRecord.from_json(d) for (d,) in await executions.fetchall()],
                    completions=_completions_from(await completions.fetchall()),
                )
        return epoch, loaded

    async def commit(self, commit: Commit, *, replace_run: bool = False) -> list[int]:
        mark = uuid.uuid4().hex
        pool = self._connections

        async def attempt(tries: int) -> list[int]:
            assert pool is not None
            # A retry may follow a connection lost after COMMIT was sent: ask first
            # (the offsets of its Stream appends are then not known: ``[]``).
            if tries > 1 and await _mark_of(pool, commit.flow_id, "commit") == mark:
                return []
            return await self._commit(pool, commit, replace_run, mark, self._stream_sizes)

        return await self._retry("commit", attempt)

    @staticmethod
    async def _commit(
        pool: Connections, commit: Commit, replace_run: bool, mark: str, sizes: StreamSizes
    ) -> list[int]:
        from psycopg.errors import RaiseException

        try:
            async with pool.connection() as conn, conn.pipeline(), conn.transaction():
                await conn.execute("SELECT dex_fence(%s, %s)", (commit.flow_id, commit.epoch))
                if replace_run:
                    for table in PER_RUN_TABLES:
                        await conn.execute(
                            f"DELETE FROM {table} WHERE flow_id = %s", (commit.flow_id,)
                        )
                cursors = await _apply(conn, commit, sizes)
                await conn.execute(_SET_MARK, (commit.flow_id, "commit", mark))
                return [_returned(await cursor.fetchone()) for cursor in cursors]
        except RaiseException as error:
            if error.diag.message_primary != _STALE_MESSAGE:
                raise
            held = error.diag.message_detail
            raise StaleEpochError(
                commit.flow_id, commit.epoch, int(held) if held else None
            ) from None

    async def get_run(self, flow_id: str) -> RunRecord | None:
        row = await self._run(
            _fetch_one,
            f"SELECT {_RUN_COLUMNS}, COALESCE((SELECT epoch FROM epochs e "
            "WHERE e.flow_id = runs.flow_id), 0) FROM runs WHERE flow_id = %s",
            (flow_id,),
        )
        return None if row is None else run_from_row(row[:-1], int(row[-1]))

    async def list_runs(
        self,
        *,
        flow_type: str | None = None,
        active_step_type: str | None = None,
        limit: int | None = None,
    ) -> list[RunRecord]:
        sql, params = runs_query(flow_type, active_step_type, limit, "%s")
        rows = await self._run(_fetch_all, sql, params)
        return [run_from_row(row, 0) for row in rows]

    async def completions(self, flow_id: str) -> list[CompletionRecord]:
        return _completions_from(await self._run(_fetch_all, _COMPLETIONS, (flow_id,)))

    async def history(self, flow_id: str) -> list[HistoryRecord]:
        rows = await self._run(
            _fetch_all,
            "SELECT at, exec_id, event, detail FROM history WHERE flow_id = %s ORDER BY seq",
            (flow_id,),
        )
        return [
            HistoryRecord(at=at, exec_id=e, event=ev, detail=json.loads(d)) for at, e, ev, d in rows
        ]

    async def rpc_response(self, flow_id: str, request_id: str) -> bytes | None:
        row = await self._run(
            _fetch_one,
            "SELECT response FROM rpc_requests WHERE flow_id = %s AND request_id = %s",
            (flow_id, request_id),
        )
        return None if row is None else bytes(row[0])

    async def runs_with_work(self) -> list[str]:
        rows = await self._run(
            _fetch_all,
            "SELECT DISTINCT e.flow_id FROM executions e JOIN runs r ON r.flow_id = e.flow_id "
            "WHERE r.status = %s AND e.status = ANY(%s) "
            "AND e.flow_id NOT IN (SELECT flow_id FROM passivated) ORDER BY e.flow_id",
            (RunStatus.RUNNING.value, list(_ACTIVE_STATUSES)),
        )
        return [row[0] for row in rows]

    # -- passivation -------------------------------------------------------------------

    async def passivate(self, flow_id: str, epoch: int, wake_at: float | None) -> None:
        await self._run(self._passivate, flow_id, epoch, wake_at)

    @staticmethod
    async def _passivate(
        pool: Connections, flow_id: str, epoch: int, wake_at: float | None
    ) -> None:
        from psycopg.errors import RaiseException

        try:
            async with pool.connection() as conn, conn.transaction():
                await conn.execute("SELECT dex_fence(%s, %s)", (flow_id, epoch))
                await conn.execute(
                    "INSERT INTO passivated (flow_id, wake_at) VALUES (%s, %s) "
                    "ON CONFLICT (flow_id) DO UPDATE SET wake_at = EXCLUDED.wake_at",
                    (flow_id, wake_at),
                )
        except RaiseException as error:
            if error.diag.message_primary != _STALE_MESSAGE:
                raise
            held = error.diag.message_detail
            raise StaleEpochError(flow_id, epoch, int(held) if held else None) from None

    async def due_passivated(self, now: float) -> list[str]:
        rows = await self._run(
            _fetch_all,
            "SELECT flow_id FROM passivated WHERE wake_at IS NOT NULL AND wake_at <= %s "
            "ORDER BY wake_at",
            (now,),
        )
        return [row[0] for row in rows]

    async def next_passivated_wake(self) -> float | None:
        row = await self._run(_fetch_one, "SELECT MIN(wake_at) FROM passivated", ())
        return None if row is None or row[0] is None else float(row[0])

    async def passivated_count(self) -> int:
        row = await self._run(_fetch_one, "SELECT COUNT(*) FROM passivated", ())
        return 0 if row is None else int(row[0])

    async def clock_offset(self) -> float:
        row = await self._run(_fetch_one, "SELECT value FROM meta WHERE key = 'clock_offset'", ())
        return 0.0 if row is None else float(row[0])

    async def set_clock_offset(self, seconds: float) -> None:
        pool = self._connections

        async def attempt(tries: int) -> None:
            assert pool is not None
            async with pool.connection() as conn:
                await conn.execute(
                    "INSERT INTO meta (key, value) VALUES ('clock_offset', %s) "
                    "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                    (repr(float(seconds)),),
                )

        await self._retry("set_clock_offset", attempt)

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
        """Append in one transaction. When a retry finds that an earlier try
        applied, the offsets are read back from the Stream heads."""
        batch = tuple(appends)
        mark = uuid.uuid4().hex
        pool = self._connections

        async def attempt(tries: int) -> list[int]:
            assert pool is not None
            if tries > 1 and await _mark_of(pool, flow_id, "streams") == mark:
                return await _appended_offsets(pool, flow_id, batch)
            return await self._append_streams(pool, flow_id, batch, mark, self._stream_sizes)

        return await self._retry("append_streams", attempt)

    @staticmethod
    async def _append_streams(
        pool: Connections,
        flow_id: str,
        appends: tuple[StreamAppend, ...],
        mark: str,
        sizes: StreamSizes,
    ) -> list[int]:
        cursors = []
        async with pool.connection() as conn, conn.pipeline(), conn.transaction():
            for item in appends:
                cursors.append(await _append_stream(conn, flow_id, item, sizes))
            await conn.execute(_SET_MARK, (flow_id, "streams", mark))
            rows = [await cur.fetchone() for cur in cursors]
        return [_returned(row) for row in rows]

    async def read_stream(
        self, flow_id: str, stream: str, after_offset: int, limit: int
    ) -> list[StreamRecord]:
        rows = await self._run(
            _fetch_all,
            'SELECT "offset", created_at, source, value FROM streams '
            'WHERE flow_id = %s AND stream = %s AND "offset" > %s ORDER BY "offset" LIMIT %s',
            (flow_id, stream, after_offset, limit),
        )
        return _stream_records(rows)

    async def list_stream(
        self, flow_id: str, stream: str, before_offset: int | None, limit: int
    ) -> list[StreamRecord]:
        rows = await self._run(
            _fetch_all,
            'SELECT "offset", created_at, source, value FROM streams '
            'WHERE flow_id = %s AND stream = %s AND "offset" < %s '
            'ORDER BY "offset" DESC LIMIT %s',
            (flow_id, stream, before_offset if before_offset is not None else 2**62, limit),
        )
        return _stream_records(rows)
