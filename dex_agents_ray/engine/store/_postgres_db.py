"""The PostgreSQL store's database: its event loop thread, its connection pool,
the schema it creates or checks, and retries of transient faults.

Every role of ``PostgresFlowStore`` (runs, Streams, passivation ...) runs its
statements through one ``PostgresDatabase``: on the store's own event loop, in
a dedicated thread, over a small connection pool. Callers on any loop or thread
(a host's loop, ``SyncEngineClient``'s private loop) await it, and a busy
caller loop never delays a commit already sent.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from dex_agents_ray.engine.store._postgres_conn import Connections, IdleProbe, LoopThread
from dex_agents_ray.engine.store._postgres_sql import (
    _MARKS_SCHEMA,
    _SCHEMA,
    _SCHEMA_LOCK_KEY,
    _SEARCH_SCHEMA,
    _add_column,
    _add_table,
)
from dex_agents_ray.engine.store._records import SCHEMA_VERSION
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


class PostgresDatabase:
    """One PostgreSQL database, for the roles of one ``PostgresFlowStore``.

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

    @property
    def location(self) -> str:
        """Where the database is, safe to print (no password)."""
        return self._config.location

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

    async def run(self, fn: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> T:
        """Run ``fn(pool, *args)`` on the store's loop, retrying transient faults.

        Only for operations that are safe to repeat whole: reads, and writes
        that apply the same whatever they find (an epoch bump, an upsert).
        """
        name = fn.__name__.strip("_")
        operation = "read" if name.startswith("fetch") else name
        return await self.retry(operation, lambda _: fn(self._connections, *args))

    async def retry(self, operation: str, attempt: Callable[[int], Coroutine[Any, Any, T]]) -> T:
        """``attempt(tries)`` on the store's loop until it succeeds, a fault is not
        transient, or the retry deadline has passed; the attempt itself keeps a
        write from applying twice (a ``write_marks`` row tells it what applied)."""
        runner = self._runner
        if runner is None or self._connections is None:
            raise RuntimeError("the store is not open")

        async def one(tries: int) -> T:
            return await runner.run(attempt(tries))

        config = self._config
        return await retrying(config.location, operation, config.retry_deadline, _transient, one)

    @property
    def connections(self) -> Connections:
        """Where an attempt gets its connection (the pool, or one of its own)."""
        if self._connections is None:
            raise RuntimeError("the store is not open")
        return self._connections
