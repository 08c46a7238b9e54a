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

``PostgresFlowStore`` is one object per role over one ``PostgresDatabase`` (its
loop thread, pool, schema and retries, in ``_postgres_db``): the runs
(``_postgres_runs``), the Streams (``_postgres_streams``), and here the Flow
definitions, the passivated runs and the clock's offset.
"""

from __future__ import annotations

import time

from dex_agents_ray.engine.store._postgres_conn import Connections
from dex_agents_ray.engine.store._postgres_db import PostgresDatabase
from dex_agents_ray.engine.store._postgres_runs import PostgresRuns
from dex_agents_ray.engine.store._postgres_sql import (
    _STALE_MESSAGE,
    StreamSizes,
    _fetch_all,
    _fetch_one,
)
from dex_agents_ray.engine.store._postgres_streams import PostgresStreams
from dex_agents_ray.engine.store._store import PostgresStoreConfig, StaleEpochError


class PostgresFlowStore:
    """``FlowStore`` on a PostgreSQL database; see the module docstring.

    ``open`` connects once (a bad DSN, password or server fails there, with
    the driver's error), creates or checks the schema, then opens the pool.
    """

    def __init__(self, config: PostgresStoreConfig) -> None:
        self.database = PostgresDatabase(config)
        """The loop and pool every role runs its statements on."""
        sizes = StreamSizes()  # a commit's Stream appends and the Streams' own count bytes alike
        self.definitions = PostgresDefinitions(self.database)
        self.runs = PostgresRuns(self.database, sizes)
        self.passivation = PostgresPassivation(self.database)
        self.clock = PostgresClock(self.database)
        self.streams = PostgresStreams(self.database, sizes)

    def __repr__(self) -> str:
        return f"PostgresFlowStore({self.database.location!r})"

    async def open(self) -> None:
        await self.database.open()

    async def close(self) -> None:
        await self.database.close()


class PostgresDefinitions:
    """``DefinitionStore`` on a ``PostgresDatabase``."""

    def __init__(self, database: PostgresDatabase) -> None:
        self._database = database

    async def put(self, flow_type: str, flow_hash: str, blob: bytes) -> None:
        await self._database.run(self._put_flow_definition, flow_type, flow_hash, blob)

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

    async def get(self, flow_type: str, flow_hash: str) -> bytes | None:
        row = await self._database.run(
            _fetch_one,
            "SELECT blob FROM flow_definitions WHERE flow_type = %s AND flow_hash = %s",
            (flow_type, flow_hash),
        )
        return None if row is None else bytes(row[0])


class PostgresPassivation:
    """``PassivationStore`` on a ``PostgresDatabase``."""

    def __init__(self, database: PostgresDatabase) -> None:
        self._database = database

    async def passivate(self, flow_id: str, epoch: int, wake_at: float | None) -> None:
        await self._database.run(self._passivate, flow_id, epoch, wake_at)

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
        rows = await self._database.run(
            _fetch_all,
            "SELECT flow_id FROM passivated WHERE wake_at IS NOT NULL AND wake_at <= %s "
            "ORDER BY wake_at",
            (now,),
        )
        return [row[0] for row in rows]

    async def next_passivated_wake(self) -> float | None:
        row = await self._database.run(_fetch_one, "SELECT MIN(wake_at) FROM passivated", ())
        return None if row is None or row[0] is None else float(row[0])

    async def passivated_count(self) -> int:
        row = await self._database.run(_fetch_one, "SELECT COUNT(*) FROM passivated", ())
        return 0 if row is None else int(row[0])


class PostgresClock:
    """``ClockStore`` on a ``PostgresDatabase`` (a row of its ``meta`` table)."""

    def __init__(self, database: PostgresDatabase) -> None:
        self._database = database

    async def offset(self) -> float:
        row = await self._database.run(
            _fetch_one, "SELECT value FROM meta WHERE key = 'clock_offset'", ()
        )
        return 0.0 if row is None else float(row[0])

    async def set_offset(self, seconds: float) -> None:
        pool = self._database.connections

        async def attempt(tries: int) -> None:
            async with pool.connection() as conn:
                await conn.execute(
                    "INSERT INTO meta (key, value) VALUES ('clock_offset', %s) "
                    "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                    (repr(float(seconds)),),
                )

        await self._database.retry("set_clock_offset", attempt)
