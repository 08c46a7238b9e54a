"""The PostgreSQL store's schema, statements and transaction bodies.

The store's roles run them (``_postgres_runs``, ``_postgres_streams`` and the
smaller ones in ``_postgres``) over ``_postgres_db``'s pool and retries; they
are here so that those modules hold the operations and this one what each
operation writes and reads.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from dex_agents_ray.engine import _clock as clock
from dex_agents_ray.engine.store._postgres_conn import Connections
from dex_agents_ray.engine.store._records import (
    Commit,
    CompletionRecord,
    ExecStatus,
    PruneRequest,
    StreamAppend,
    StreamRecord,
    compact_json,
)

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg.rows import TupleRow

    Connection = AsyncConnection[TupleRow]

# Serializes schema creation across processes (hosts open stores at once, and
# concurrent CREATE TABLE IF NOT EXISTS of one table can fail in PostgreSQL).
_SCHEMA_LOCK_KEY = 0x646578_5354_4F52  # "dex" "STOR"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS flow_definitions (
    flow_type TEXT NOT NULL, flow_hash TEXT NOT NULL, blob BYTEA NOT NULL,
    created_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (flow_type, flow_hash));
CREATE TABLE IF NOT EXISTS epochs (flow_id TEXT PRIMARY KEY, epoch BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    flow_id TEXT PRIMARY KEY, run_id TEXT NOT NULL, flow_type TEXT NOT NULL,
    flow_hash TEXT NOT NULL, status TEXT NOT NULL, started_at DOUBLE PRECISION NOT NULL,
    closed_at DOUBLE PRECISION, error_type TEXT NOT NULL, error_message TEXT NOT NULL,
    active_step_types TEXT NOT NULL, search_attributes TEXT NOT NULL, extra TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS attributes (
    flow_id TEXT NOT NULL, key TEXT NOT NULL, value BYTEA NOT NULL,
    PRIMARY KEY (flow_id, key));
CREATE TABLE IF NOT EXISTS messages (
    flow_id TEXT NOT NULL, channel TEXT NOT NULL, seq BIGINT NOT NULL,
    message_id TEXT NOT NULL, value BYTEA NOT NULL, PRIMARY KEY (flow_id, seq));
CREATE INDEX IF NOT EXISTS messages_by_id ON messages (flow_id, channel, message_id);
CREATE SEQUENCE IF NOT EXISTS executions_written;
CREATE TABLE IF NOT EXISTS executions (
    flow_id TEXT NOT NULL, exec_id TEXT NOT NULL, status TEXT NOT NULL,
    wake_at DOUBLE PRECISION, doc TEXT NOT NULL, written BIGINT NOT NULL,
    PRIMARY KEY (flow_id, exec_id));
CREATE INDEX IF NOT EXISTS executions_active ON executions (status, wake_at);
CREATE TABLE IF NOT EXISTS completions (
    flow_id TEXT NOT NULL, seq BIGINT NOT NULL, step_type TEXT NOT NULL,
    exec_id TEXT NOT NULL, output BYTEA NOT NULL, PRIMARY KEY (flow_id, seq));
CREATE TABLE IF NOT EXISTS history (
    flow_id TEXT NOT NULL, seq BIGINT NOT NULL, at DOUBLE PRECISION NOT NULL,
    exec_id TEXT NOT NULL, event TEXT NOT NULL, detail TEXT NOT NULL,
    PRIMARY KEY (flow_id, seq));
CREATE TABLE IF NOT EXISTS rpc_requests (
    flow_id TEXT NOT NULL, request_id TEXT NOT NULL, response BYTEA NOT NULL,
    PRIMARY KEY (flow_id, request_id));
CREATE TABLE IF NOT EXISTS passivated (flow_id TEXT PRIMARY KEY, wake_at DOUBLE PRECISION);
CREATE INDEX IF NOT EXISTS passivated_wake ON passivated (wake_at);
CREATE TABLE IF NOT EXISTS stream_heads (
    flow_id TEXT NOT NULL, stream TEXT NOT NULL, last_offset BIGINT NOT NULL,
    PRIMARY KEY (flow_id, stream));
CREATE TABLE IF NOT EXISTS streams (
    flow_id TEXT NOT NULL, stream TEXT NOT NULL, "offset" BIGINT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL, source TEXT NOT NULL, value BYTEA NOT NULL,
    PRIMARY KEY (flow_id, stream, "offset"));
CREATE OR REPLACE FUNCTION dex_fence(run TEXT, expected BIGINT) RETURNS VOID
LANGUAGE plpgsql AS $$
DECLARE
    held BIGINT;
BEGIN
    SELECT epoch INTO held FROM epochs WHERE flow_id = run FOR UPDATE;
    IF held IS DISTINCT FROM expected THEN
        RAISE EXCEPTION USING MESSAGE = 'dex: stale ownership epoch',
            DETAIL = COALESCE(held::TEXT, '');
    END IF;
END
$$;
"""
_STALE_MESSAGE = "dex: stale ownership epoch"

# The last write of each kind ("commit", "streams") of each run, by a unique ID
# written in the write's own transaction: after a connection lost before the
# server's answer to COMMIT, a retry reads it to learn whether the write applied.
# Commits of one run are serialized (the epoch row lock, and one owner), so the
# latest mark is the only one a retry can ask about.
_MARKS_SCHEMA = """
CREATE TABLE IF NOT EXISTS write_marks (
    flow_id TEXT NOT NULL, kind TEXT NOT NULL, mark TEXT NOT NULL,
    PRIMARY KEY (flow_id, kind));
"""
# Searches by ActiveStepTypes and FlowType read an index, not every run. A store
# made before the index existed gets it, filled from its runs, when opened.
_SEARCH_SCHEMA = """
CREATE TABLE IF NOT EXISTS active_steps (
    step_type TEXT NOT NULL, started_at DOUBLE PRECISION NOT NULL, flow_id TEXT NOT NULL,
    PRIMARY KEY (step_type, started_at, flow_id));
CREATE INDEX IF NOT EXISTS active_steps_by_run ON active_steps (flow_id);
CREATE INDEX IF NOT EXISTS runs_by_type ON runs (flow_type, started_at, flow_id);
INSERT INTO active_steps (step_type, started_at, flow_id)
    SELECT DISTINCT t, started_at, flow_id FROM runs,
        LATERAL jsonb_array_elements_text(active_step_types::jsonb) AS t
    ON CONFLICT DO NOTHING;
"""
_SET_MARK = (
    "INSERT INTO write_marks (flow_id, kind, mark) VALUES (%s, %s, %s) "
    "ON CONFLICT (flow_id, kind) DO UPDATE SET mark = EXCLUDED.mark"
)
_GET_MARK = "SELECT mark FROM write_marks WHERE flow_id = %s AND kind = %s"
_RUN_COLUMNS = (
    "flow_id, run_id, flow_type, flow_hash, status, started_at, closed_at, error_type, "
    "error_message, active_step_types, search_attributes, extra"
)
_UPSERT_RUN = (
    f"INSERT INTO runs ({_RUN_COLUMNS}) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s) "
    "ON CONFLICT (flow_id) DO UPDATE SET "
    + ", ".join(f"{c} = EXCLUDED.{c}" for c in _RUN_COLUMNS.split(", ")[1:])
)
# Executions load in the order they were last written (as SQLite's INSERT OR
# REPLACE orders rowids), whatever process wrote them.
_UPSERT_EXECUTION = (
    "INSERT INTO executions (flow_id, exec_id, status, wake_at, doc, written) "
    "VALUES (%s,%s,%s,%s,%s, nextval('executions_written')) "
    "ON CONFLICT (flow_id, exec_id) DO UPDATE SET status = EXCLUDED.status, "
    "wake_at = EXCLUDED.wake_at, doc = EXCLUDED.doc, written = EXCLUDED.written"
)
# Sequence numbers come from the rows already there: the epoch row lock makes
# the commits of one run serial, and each statement sees the ones before it.
_APPEND_COMPLETION = (
    "INSERT INTO completions (flow_id, seq, step_type, exec_id, output) "
    "SELECT %(f)s, COALESCE(MAX(seq), 0) + 1, %(t)s, %(e)s, %(o)s "
    "FROM completions WHERE flow_id = %(f)s"
)
_APPEND_HISTORY = (
    "INSERT INTO history (flow_id, seq, at, exec_id, event, detail) "
    "SELECT %(f)s, COALESCE(MAX(seq), 0) + 1, %(a)s, %(e)s, %(v)s, %(d)s "
    "FROM history WHERE flow_id = %(f)s"
)
_APPEND_STREAM = (
    "WITH head AS ("
    "INSERT INTO stream_heads (flow_id, stream, last_offset) VALUES (%(f)s, %(s)s, 1) "
    "ON CONFLICT (flow_id, stream) DO UPDATE SET last_offset = stream_heads.last_offset + 1 "
    "RETURNING last_offset) "
    'INSERT INTO streams (flow_id, stream, "offset", created_at, source, value) '
    "SELECT %(f)s, %(s)s, last_offset, %(t)s, %(src)s, %(v)s FROM head "
    'RETURNING "offset"'
)
# Keep the newest message always, and older ones while the bytes kept, counted
# from the newest, stay within the capacity (the SQLite store's rule).
_TRIM_STREAM = (
    'DELETE FROM streams WHERE flow_id = %(f)s AND stream = %(s)s AND "offset" < ('
    'SELECT COALESCE(MIN("offset") FILTER (WHERE kept <= %(cap)s), MAX("offset")) FROM ('
    'SELECT "offset", SUM(octet_length(value)) OVER (ORDER BY "offset" DESC) AS kept '
    "FROM streams WHERE flow_id = %(f)s AND stream = %(s)s) AS sized)"
)
_STREAM_BYTES = (
    "SELECT COALESCE(SUM(octet_length(value)), 0) FROM streams "
    "WHERE flow_id = %(f)s AND stream = %(s)s"
)
_ACTIVE_STATUSES = (ExecStatus.WAIT_FOR.value, ExecStatus.WAITING.value, ExecStatus.READY.value)


_COMPLETIONS = "SELECT step_type, exec_id, output FROM completions WHERE flow_id = %s ORDER BY seq"


async def _add_column(conn: Connection, table: str, column: str, ddl: str) -> None:
    """Add ``column`` to ``table`` unless it exists, under the schema lock."""
    cur = await conn.execute(
        "SELECT 1 FROM information_schema.columns WHERE table_name = %s AND column_name = %s",
        (table, column),
    )
    if await cur.fetchone() is None:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK_KEY,))
            await conn.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} {ddl}")


async def _add_table(conn: Connection, table: str, ddl: str) -> None:
    """Run ``ddl`` (which creates ``table``) unless ``table`` exists, under the schema lock."""
    cur = await conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,))
    row = await cur.fetchone()
    if row is not None and not row[0]:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK_KEY,))
            await conn.execute("SET LOCAL client_min_messages = warning")
            await conn.execute(ddl)


async def _mark_of(pool: Connections, flow_id: str, kind: str) -> str | None:
    row = await _fetch_one(pool, _GET_MARK, (flow_id, kind))
    return None if row is None else str(row[0])


async def _appended_offsets(
    pool: Connections, flow_id: str, appends: tuple[StreamAppend, ...]
) -> list[int]:
    """The offsets an applied append gave its messages (the newest of each Stream)."""
    wanted: dict[str, int] = {}
    for item in appends:
        wanted[item.stream] = wanted.get(item.stream, 0) + 1
    head: dict[str, list[int]] = {}
    for stream, count in wanted.items():
        row = await _fetch_one(
            pool,
            "SELECT last_offset FROM stream_heads WHERE flow_id = %s AND stream = %s",
            (flow_id, stream),
        )
        last = -1 if row is None else int(row[0])
        head[stream] = list(range(last - count + 1, last + 1))
    return [head[item.stream].pop(0) for item in appends]


async def _fetch_one(
    pool: Connections, query: str, params: tuple[Any, ...]
) -> tuple[Any, ...] | None:
    async with pool.connection() as conn:
        cur = await conn.execute(query, params)
        return await cur.fetchone()


async def _fetch_all(
    pool: Connections, query: str, params: tuple[Any, ...]
) -> list[tuple[Any, ...]]:
    async with pool.connection() as conn:
        cur = await conn.execute(query, params)
        return await cur.fetchall()


class StreamSizes:
    """Bytes each Stream holds, as this process saw its appends, so the trim query
    (a scan of the Stream) runs only when an append takes it past its capacity."""

    KEPT = 100_000
    """Streams remembered; past that all are forgotten (and scanned again)."""

    def __init__(self) -> None:
        self._bytes: dict[tuple[str, str], int] = {}

    def must_trim(self, flow_id: str, item: StreamAppend) -> bool:
        held = self._bytes.get((flow_id, item.stream))
        if held is None or held + len(item.value) > item.capacity_bytes:
            return True
        self._bytes[(flow_id, item.stream)] = held + len(item.value)
        return False

    def set(self, flow_id: str, stream: str, held: int) -> None:
        if len(self._bytes) >= self.KEPT and (flow_id, stream) not in self._bytes:
            self._bytes.clear()
        self._bytes[(flow_id, stream)] = held


async def _append_stream(
    conn: Connection, flow_id: str, item: StreamAppend, sizes: StreamSizes | None = None
) -> Any:
    """Queue one Stream append (and its trim when it may be due); the cursor returns
    the offset."""
    params = {"f": flow_id, "s": item.stream, "t": clock.now(), "src": item.source, "v": item.value}
    cursor = await conn.execute(_APPEND_STREAM, params)
    if item.capacity_bytes > 0 and (sizes is None or sizes.must_trim(flow_id, item)):
        trim = {"f": flow_id, "s": item.stream, "cap": item.capacity_bytes}
        await conn.execute(_TRIM_STREAM, trim)
        if sizes is not None:
            held = await conn.execute(_STREAM_BYTES, {"f": flow_id, "s": item.stream})
            row = await held.fetchone()
            sizes.set(flow_id, item.stream, 0 if row is None else int(row[0]))
    return cursor


async def _apply(conn: Connection, c: Commit, sizes: StreamSizes | None = None) -> list[Any]:
    """Queue every write of ``c`` (the caller's transaction commits them); the
    cursors that return the offsets of its Stream appends."""
    fid = c.flow_id
    if c.run is not None:
        await conn.execute(_UPSERT_RUN, c.run.row())
    if c.run is not None and c.active_steps_changed:
        await conn.execute("DELETE FROM active_steps WHERE flow_id = %s", (fid,))
        steps = list(dict.fromkeys(c.run.active_step_types))
        if steps:
            await conn.cursor().executemany(
                "INSERT INTO active_steps (step_type, started_at, flow_id) VALUES (%s, %s, %s)",
                [(t, c.run.started_at, fid) for t in steps],
            )
    cur = conn.cursor()
    if c.attribute_deletes:
        await conn.execute(
            "DELETE FROM attributes WHERE flow_id = %s AND key = ANY(%s)",
            (fid, sorted(c.attribute_deletes)),
        )
    if c.attribute_upserts:
        await cur.executemany(
            "INSERT INTO attributes (flow_id, key, value) VALUES (%s, %s, %s) "
            "ON CONFLICT (flow_id, key) DO UPDATE SET value = EXCLUDED.value",
            [(fid, k, v) for k, v in c.attribute_upserts.items()],
        )
    if c.message_deletes:
        await cur.executemany(
            "DELETE FROM messages WHERE flow_id = %s AND channel = %s AND message_id = %s",
            [(fid, channel, message_id) for channel, message_id in c.message_deletes],
        )
    if c.message_appends:
        await cur.executemany(
            "INSERT INTO messages (flow_id, channel, seq, message_id, value) "
            "VALUES (%s, %s, %s, %s, %s)",
            [(fid, m.channel, m.seq, m.message_id, m.value) for m in c.message_appends],
        )
    if c.executions:
        await cur.executemany(
            _UPSERT_EXECUTION,
            [(fid, e.exec_id, e.status.value, e.wake_at, e.to_json()) for e in c.executions],
        )
    if c.completions:
        await cur.executemany(
            _APPEND_COMPLETION,
            [{"f": fid, "t": x.step_type, "e": x.exec_id, "o": x.output} for x in c.completions],
        )
    if c.history:
        await cur.executemany(
            _APPEND_HISTORY,
            [
                {"f": fid, "a": h.at, "e": h.exec_id, "v": h.event, "d": compact_json(h.detail)}
                for h in c.history
            ],
        )
    if c.rpc_request is not None:
        await conn.execute(
            "INSERT INTO rpc_requests (flow_id, request_id, response, written) "
            "VALUES (%s, %s, %s, %s) ON CONFLICT (flow_id, request_id) DO UPDATE "
            "SET response = EXCLUDED.response, written = EXCLUDED.written",
            (fid, c.rpc_request[0], c.rpc_request[1], time.time()),  # the prune's order
        )
    if c.prune is not None:
        await _prune(conn, fid, c.prune)
    return [await _append_stream(conn, fid, item, sizes) for item in c.stream_appends]


_OLD_FINISHED = (
    "SELECT exec_id FROM executions WHERE flow_id = %(f)s "
    "AND status IN ('completed', 'failed', 'canceled') ORDER BY written DESC OFFSET %(k)s"
)


async def _prune(conn: Connection, fid: str, prune: PruneRequest) -> None:
    """Delete the run's older finished executions with their history, and its older
    remembered RPC responses (``RetentionOptions``)."""
    if prune.keep_finished_executions is not None:
        keep = {"f": fid, "k": prune.keep_finished_executions}
        await conn.execute(
            f"DELETE FROM history WHERE flow_id = %(f)s AND exec_id IN ({_OLD_FINISHED})", keep
        )
        await conn.execute(
            f"DELETE FROM executions WHERE flow_id = %(f)s AND exec_id IN ({_OLD_FINISHED})", keep
        )
    if prune.keep_rpc_requests is not None:
        keep = {"f": fid, "k": prune.keep_rpc_requests}
        await conn.execute(
            "DELETE FROM rpc_requests WHERE flow_id = %(f)s AND request_id IN ("
            "SELECT request_id FROM rpc_requests WHERE flow_id = %(f)s "
            "ORDER BY written DESC OFFSET %(k)s)",
            keep,
        )
        # History of no kept execution (RPCs, run events): the newest as many.
        await conn.execute(
            "DELETE FROM history WHERE flow_id = %(f)s AND seq IN ("
            "SELECT seq FROM history WHERE flow_id = %(f)s AND exec_id NOT IN "
            "(SELECT exec_id FROM executions WHERE flow_id = %(f)s) "
            "ORDER BY seq DESC OFFSET %(k)s)",
            keep,
        )


def _completions_from(rows: list[tuple[Any, ...]]) -> list[CompletionRecord]:
    return [CompletionRecord(step_type=t, exec_id=e, output=bytes(o)) for t, e, o in rows]


def _stream_records(rows: list[tuple[Any, ...]]) -> list[StreamRecord]:
    return [
        StreamRecord(offset=int(o), created_at=t, source=s, value=bytes(v)) for o, t, s, v in rows
    ]


def _returned(row: tuple[Any, ...] | None) -> int:
    """The integer a one-row ``RETURNING`` gave back."""
    if row is None:
        raise RuntimeError("the database returned no row for a one-row upsert")
    return int(row[0])
