"""The SQLite store's runs: activation, group commits, and the reads of a run.

A commit's rows (the run, its attributes, channel messages, executions,
completions, history, remembered RPC responses, the retention prune and its
Stream appends) are written by :func:`apply_commit` inside the group
transaction ``SqliteDatabase`` gives it.
"""

from __future__ import annotations

import json
import sqlite3

from dex_agents_ray.engine.store._records import (
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
    compact_json,
)
from dex_agents_ray.engine.store._run_rows import PER_RUN_TABLES, run_from_row, runs_query
from dex_agents_ray.engine.store._sqlite_db import SqliteDatabase
from dex_agents_ray.engine.store._sqlite_files import UPSERT_RUN
from dex_agents_ray.engine.store._sqlite_streams import StreamRows
from dex_agents_ray.engine.store._store import StaleEpochError


class SqliteRuns:
    """``RunStore`` on a ``SqliteDatabase``; commits share its group transactions
    (and ``streams``' byte counts with the store's ``SqliteStreams``)."""

    def __init__(self, database: SqliteDatabase, streams: StreamRows) -> None:
        self._database = database
        self._streams = streams

    def _db(self) -> sqlite3.Connection:
        return self._database.connection()

    async def activate(self, flow_id: str) -> tuple[int, LoadedRun | None]:
        return await self._database.run(self._activate_sync, flow_id)

    def _activate_sync(self, flow_id: str) -> tuple[int, LoadedRun | None]:
        with self._database.transaction() as db:
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
        return await self._database.grouped(
            "commit", lambda db: self._commit_body(db, commit, replace_run)
        )

    def _commit_body(self, db: sqlite3.Connection, commit: Commit, replace_run: bool) -> list[int]:
        row = db.execute("SELECT epoch FROM epochs WHERE flow_id=?", (commit.flow_id,)).fetchone()
        current = None if row is None else int(row[0])
        if current != commit.epoch:
            raise StaleEpochError(commit.flow_id, commit.epoch, current)
        if replace_run:
            for table in PER_RUN_TABLES:
                db.execute(f"DELETE FROM {table} WHERE flow_id=?", (commit.flow_id,))
        return apply_commit(db, commit, self._streams)

    async def get_run(self, flow_id: str) -> RunRecord | None:
        return await self._database.run(self._get_run_sync, flow_id)

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

        return await self._database.run(list_some)

    async def completions(self, flow_id: str) -> list[CompletionRecord]:
        return await self._database.run(self._completions_sync, flow_id)

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

        return await self._database.run(read)

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

        return await self._database.run(read)

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

        return await self._database.run(read)


def apply_commit(db: sqlite3.Connection, c: Commit, streams: StreamRows) -> list[int]:
    """Write every row of ``c`` in the caller's transaction; the offsets of its Stream appends."""
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
        _prune(db, fid, c.prune)
    return streams.append(db, fid, c.stream_appends) if c.stream_appends else []


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
