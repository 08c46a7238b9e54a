"""The PostgreSQL store's Streams: appends, each taking its offset from a
per-stream head row (locked as the epoch row is for a commit), trimming to each
Stream's capacity, and the reads of a Stream."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from dex_agents_ray.engine.store._postgres_conn import Connections
from dex_agents_ray.engine.store._postgres_db import PostgresDatabase
from dex_agents_ray.engine.store._postgres_sql import (
    _SET_MARK,
    StreamSizes,
    _append_stream,
    _appended_offsets,
    _fetch_all,
    _mark_of,
    _returned,
    _stream_records,
)
from dex_agents_ray.engine.store._records import StreamAppend, StreamRecord


class PostgresStreams:
    """``StreamStore`` on a ``PostgresDatabase`` (``sizes``: the Streams' byte
    counts, shared with the store's ``PostgresRuns``)."""

    def __init__(self, database: PostgresDatabase, sizes: StreamSizes) -> None:
        self._database = database
        self._stream_sizes = sizes

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
        pool = self._database.connections

        async def attempt(tries: int) -> list[int]:
            if tries > 1 and await _mark_of(pool, flow_id, "streams") == mark:
                return await _appended_offsets(pool, flow_id, batch)
            return await self._append_streams(pool, flow_id, batch, mark, self._stream_sizes)

        return await self._database.retry("append_streams", attempt)

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
        rows = await self._database.run(
            _fetch_all,
            'SELECT "offset", created_at, source, value FROM streams '
            'WHERE flow_id = %s AND stream = %s AND "offset" > %s ORDER BY "offset" LIMIT %s',
            (flow_id, stream, after_offset, limit),
        )
        return _stream_records(rows)

    async def list_stream(
        self, flow_id: str, stream: str, before_offset: int | None, limit: int
    ) -> list[StreamRecord]:
        rows = await self._database.run(
            _fetch_all,
            'SELECT "offset", created_at, source, value FROM streams '
            'WHERE flow_id = %s AND stream = %s AND "offset" < %s '
            'ORDER BY "offset" DESC LIMIT %s',
            (flow_id, stream, before_offset if before_offset is not None else 2**62, limit),
        )
        return _stream_records(rows)
