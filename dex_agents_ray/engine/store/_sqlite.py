"""The embedded SQLite ``FlowStore`` (WAL, one file, any number of processes).

``SqliteFlowStore`` is one object per role over one ``SqliteDatabase`` (its
connection, thread and group transactions, in ``_sqlite_db``): the runs
(``_sqlite_runs``), the Streams (``_sqlite_streams``), and here the Flow
definitions, the passivated runs and the clock's offset.
"""

from __future__ import annotations

import sqlite3
import time

from dex_agents_ray.engine.store._sqlite_db import SqliteDatabase
from dex_agents_ray.engine.store._sqlite_runs import SqliteRuns
from dex_agents_ray.engine.store._sqlite_streams import SqliteStreams, StreamRows
from dex_agents_ray.engine.store._store import SqliteStoreConfig, StaleEpochError


class SqliteFlowStore:
    """``FlowStore`` on one SQLite file in WAL mode; see ``SqliteDatabase`` for
    how its writers share the file and its transactions."""

    def __init__(self, config: SqliteStoreConfig) -> None:
        self.database = SqliteDatabase(config)
        """The connection every role reads and writes through."""
        rows = StreamRows()  # a commit's Stream appends and the Streams' own count bytes alike
        self.definitions = SqliteDefinitions(self.database)
        self.runs = SqliteRuns(self.database, rows)
        self.passivation = SqlitePassivation(self.database)
        self.clock = SqliteClock(self.database)
        self.streams = SqliteStreams(self.database, rows)

    def __repr__(self) -> str:
        return f"SqliteFlowStore({self.database.path!r})"

    async def open(self) -> None:
        await self.database.open()

    async def close(self) -> None:
        await self.database.close()


class SqliteDefinitions:
    """``DefinitionStore`` on a ``SqliteDatabase``."""

    def __init__(self, database: SqliteDatabase) -> None:
        self._database = database

    async def put(self, flow_type: str, flow_hash: str, blob: bytes) -> None:
        def put() -> None:
            self._database.connection().execute(
                "INSERT OR IGNORE INTO flow_definitions VALUES (?, ?, ?, ?)",
                (flow_type, flow_hash, blob, time.time()),
            )

        await self._database.run(put)

    async def get(self, flow_type: str, flow_hash: str) -> bytes | None:
        def get() -> bytes | None:
            row = (
                self._database.connection()
                .execute(
                    "SELECT blob FROM flow_definitions WHERE flow_type=? AND flow_hash=?",
                    (flow_type, flow_hash),
                )
                .fetchone()
            )
            return None if row is None else bytes(row[0])

        return await self._database.run(get)


class SqlitePassivation:
    """``PassivationStore`` on a ``SqliteDatabase``."""

    def __init__(self, database: SqliteDatabase) -> None:
        self._database = database

    async def passivate(self, flow_id: str, epoch: int, wake_at: float | None) -> None:
        def write() -> None:
            with self._database.transaction() as db:
                row = db.execute("SELECT epoch FROM epochs WHERE flow_id=?", (flow_id,)).fetchone()
                current = None if row is None else int(row[0])
                if current != epoch:
                    raise StaleEpochError(flow_id, epoch, current)
                db.execute("INSERT OR REPLACE INTO passivated VALUES (?, ?)", (flow_id, wake_at))

        await self._database.run(write)

    async def due_passivated(self, now: float) -> list[str]:
        def read() -> list[str]:
            rows = self._database.connection().execute(
                "SELECT flow_id FROM passivated WHERE wake_at IS NOT NULL AND wake_at <= ? "
                "ORDER BY wake_at",
                (now,),
            )
            return [row[0] for row in rows]

        return await self._database.run(read)

    async def next_passivated_wake(self) -> float | None:
        def read() -> float | None:
            row = self._database.connection().execute("SELECT MIN(wake_at) FROM passivated")
            first = row.fetchone()
            return None if first is None or first[0] is None else float(first[0])

        return await self._database.run(read)

    async def passivated_count(self) -> int:
        def read() -> int:
            row = self._database.connection().execute("SELECT COUNT(*) FROM passivated")
            return int(row.fetchone()[0])

        return await self._database.run(read)


class SqliteClock:
    """``ClockStore`` on a ``SqliteDatabase`` (a row of its ``meta`` table)."""

    def __init__(self, database: SqliteDatabase) -> None:
        self._database = database

    async def offset(self) -> float:
        def read() -> float:
            row = (
                self._database.connection()
                .execute("SELECT value FROM meta WHERE key='clock_offset'")
                .fetchone()
            )
            return 0.0 if row is None else float(row[0])

        return await self._database.run(read)

    async def set_offset(self, seconds: float) -> None:
        def write(db: sqlite3.Connection) -> None:
            db.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('clock_offset', ?)",
                (repr(float(seconds)),),
            )

        await self._database.grouped("set_clock_offset", write)
