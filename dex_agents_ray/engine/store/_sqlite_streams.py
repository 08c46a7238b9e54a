"""The SQLite store's Streams: appends with their offsets and the trimming to
each Stream's capacity (``StreamRows``, inside a group transaction of the
store's database, a commit's or their own), and the reads of a Stream
(``SqliteStreams``, the store's ``StreamStore``)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

from dex_agents_ray.engine import _clock as clock
from dex_agents_ray.engine.store._records import StreamAppend, StreamRecord
from dex_agents_ray.engine.store._sqlite_db import SqliteDatabase

_STREAM_SIZES_KEPT = 100_000
"""Streams whose sizes a store remembers (then it forgets them all and rescans)."""


class StreamRows:
    """Appends to the ``streams`` table of one store connection."""

    def __init__(self) -> None:
        self._bytes: dict[tuple[str, str], int] = {}
        """Bytes each Stream holds, as this process saw its appends: a trim scan runs
        only when an append takes one past its capacity (not on every append)."""

    def append(
        self, db: sqlite3.Connection, flow_id: str, items: Sequence[StreamAppend]
    ) -> list[int]:
        """Append ``items`` in order; their offsets. Each stream's last offset is read
        once and the rows go in one statement; a stream is trimmed once, after its
        rows (the same rows stay as trimming after each: the newest that fit)."""
        last: dict[str, int] = {}
        added: dict[str, int] = {}
        capacity: dict[str, int] = {}
        offsets: list[int] = []
        rows: list[tuple[Any, ...]] = []
        now = clock.now()
        for item in items:
            offset = last.get(item.stream)
            if offset is None:
                offset = _last_offset(db, flow_id, item.stream)
            last[item.stream] = offset = offset + 1
            added[item.stream] = added.get(item.stream, 0) + len(item.value)
            capacity[item.stream] = max(capacity.get(item.stream, 0), item.capacity_bytes)
            offsets.append(offset)
            rows.append((flow_id, item.stream, offset, now, item.source, item.value))
        db.executemany("INSERT INTO streams VALUES (?,?,?,?,?,?)", rows)
        for stream, limit in capacity.items():
            self._account(db, flow_id, stream, limit, added[stream])
        return offsets

    def _account(
        self, db: sqlite3.Connection, flow_id: str, stream: str, capacity: int, added: int
    ) -> None:
        """Count ``added`` bytes to a stream just appended to; trim it past ``capacity``."""
        if capacity <= 0:
            return
        key = (flow_id, stream)
        held = self._bytes.get(key)
        if held is None:
            held = _stream_size(db, flow_id, stream)
        else:
            held += added
        if held > capacity:
            _trim_stream(db, flow_id, stream, capacity)
            held = _stream_size(db, flow_id, stream)
        if len(self._bytes) >= _STREAM_SIZES_KEPT and key not in self._bytes:
            self._bytes.clear()
        self._bytes[key] = held


class SqliteStreams:
    """``StreamStore`` on a ``SqliteDatabase``: appends ride in the group
    transactions of the commits around them; reads run on the store's thread."""

    def __init__(self, database: SqliteDatabase, rows: StreamRows) -> None:
        self._database = database
        self._rows = rows

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
            return self._rows.append(db, flow_id, appends)

        return await self._database.grouped("append_streams", append)

    async def read_stream(
        self, flow_id: str, stream: str, after_offset: int, limit: int
    ) -> list[StreamRecord]:
        database = self._database
        return await database.run(
            lambda: read_rows(database.connection(), flow_id, stream, after_offset, limit)
        )

    async def list_stream(
        self, flow_id: str, stream: str, before_offset: int | None, limit: int
    ) -> list[StreamRecord]:
        database = self._database
        return await database.run(
            lambda: list_rows(database.connection(), flow_id, stream, before_offset, limit)
        )


def read_rows(
    db: sqlite3.Connection, flow_id: str, stream: str, after_offset: int, limit: int
) -> list[StreamRecord]:
    """Up to ``limit`` records past ``after_offset``, oldest first."""
    return _records(
        db.execute(
            f"{_SELECT} AND offset > ? ORDER BY offset LIMIT ?",
            (flow_id, stream, after_offset, limit),
        )
    )


def list_rows(
    db: sqlite3.Connection, flow_id: str, stream: str, before_offset: int | None, limit: int
) -> list[StreamRecord]:
    """Up to ``limit`` records before ``before_offset`` (``None``: the newest), newest first."""
    bound = before_offset if before_offset is not None else 2**62
    return _records(
        db.execute(
            f"{_SELECT} AND offset < ? ORDER BY offset DESC LIMIT ?",
            (flow_id, stream, bound, limit),
        )
    )


_SELECT = "SELECT offset, created_at, source, value FROM streams WHERE flow_id=? AND stream=?"


def _records(rows: Iterable[tuple[int, float, str, bytes]]) -> list[StreamRecord]:
    return [StreamRecord(offset=o, created_at=t, source=s, value=bytes(v)) for o, t, s, v in rows]


def _last_offset(db: sqlite3.Connection, flow_id: str, stream: str) -> int:
    row = db.execute(
        "SELECT COALESCE(MAX(offset), 0) FROM streams WHERE flow_id=? AND stream=?",
        (flow_id, stream),
    ).fetchone()
    return int(row[0])


def _stream_size(db: sqlite3.Connection, flow_id: str, stream: str) -> int:
    row = db.execute(
        "SELECT COALESCE(SUM(LENGTH(value)), 0) FROM streams WHERE flow_id=? AND stream=?",
        (flow_id, stream),
    ).fetchone()
    return int(row[0])


def _trim_stream(db: sqlite3.Connection, flow_id: str, stream: str, capacity: int) -> None:
    total = 0
    keep_from: int | None = None
    for offset, size in db.execute(
        "SELECT offset, LENGTH(value) FROM streams WHERE flow_id=? AND stream=? "
        "ORDER BY offset DESC",
        (flow_id, stream),
    ):
        total += int(size)
        if total > capacity and keep_from is not None:
            break
        keep_from = int(offset)
    if keep_from is not None:
        db.execute(
            "DELETE FROM streams WHERE flow_id=? AND stream=? AND offset < ?",
            (flow_id, stream, keep_from),
        )
