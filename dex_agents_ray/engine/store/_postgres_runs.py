"""The PostgreSQL store's runs: activation, commits, and the reads of a run.

Every commit locks its run's epoch row (``SELECT ... FOR UPDATE``, in the
``dex_fence`` function) inside its transaction, so commits of one run, and its
activations, run one after another while other runs commit in parallel. A
commit pipelines BEGIN, the fence, every write (``_postgres_sql._apply``) and
COMMIT in one round trip, and the fence aborts the transaction when the epoch
is stale.
"""

from __future__ import annotations

import json
import uuid

from dex_agents_ray.engine.store._postgres_conn import Connections
from dex_agents_ray.engine.store._postgres_db import PostgresDatabase
from dex_agents_ray.engine.store._postgres_sql import (
    _ACTIVE_STATUSES,
    _COMPLETIONS,
    _RUN_COLUMNS,
    _SET_MARK,
    _STALE_MESSAGE,
    StreamSizes,
    _apply,
    _completions_from,
    _fetch_all,
    _fetch_one,
    _mark_of,
    _returned,
)
from dex_agents_ray.engine.store._records import (
    ChannelMessageRecord,
    Commit,
    CompletionRecord,
    ExecRecord,
    HistoryRecord,
    LoadedRun,
    RunRecord,
    RunStatus,
)

# The per-run table list and the run-row decoding are shared with the SQLite
# store, so both agree on what a replaced run drops and how a run row reads.
from dex_agents_ray.engine.store._run_rows import PER_RUN_TABLES, run_from_row, runs_query
from dex_agents_ray.engine.store._store import StaleEpochError


class PostgresRuns:
    """``RunStore`` on a ``PostgresDatabase`` (``sizes``: the Streams' byte counts,
    shared with the store's ``PostgresStreams``)."""

    def __init__(self, database: PostgresDatabase, sizes: StreamSizes) -> None:
        self._database = database
        self._stream_sizes = sizes

    async def activate(self, flow_id: str) -> tuple[int, LoadedRun | None]:
        return await self._database.run(self._activate, flow_id)

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
        pool = self._database.connections

        async def attempt(tries: int) -> list[int]:
            # A retry may follow a connection lost after COMMIT was sent: ask first
            # (the offsets of its Stream appends are then not known: ``[]``).
            if tries > 1 and await _mark_of(pool, commit.flow_id, "commit") == mark:
                return []
            return await self._commit(pool, commit, replace_run, mark, self._stream_sizes)

        return await self._database.retry("commit", attempt)

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
        row = await self._database.run(
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
        rows = await self._database.run(_fetch_all, sql, params)
        return [run_from_row(row, 0) for row in rows]

    async def completions(self, flow_id: str) -> list[CompletionRecord]:
        return _completions_from(await self._database.run(_fetch_all, _COMPLETIONS, (flow_id,)))

    async def history(self, flow_id: str) -> list[HistoryRecord]:
        rows = await self._database.run(
            _fetch_all,
            "SELECT at, exec_id, event, detail FROM history WHERE flow_id = %s ORDER BY seq",
            (flow_id,),
        )
        return [
            HistoryRecord(at=at, exec_id=e, event=ev, detail=json.loads(d)) for at, e, ev, d in rows
        ]

    async def rpc_response(self, flow_id: str, request_id: str) -> bytes | None:
        row = await self._database.run(
            _fetch_one,
            "SELECT response FROM rpc_requests WHERE flow_id = %s AND request_id = %s",
            (flow_id, request_id),
        )
        return None if row is None else bytes(row[0])

    async def runs_with_work(self) -> list[str]:
        rows = await self._database.run(
            _fetch_all,
            "SELECT DISTINCT e.flow_id FROM executions e JOIN runs r ON r.flow_id = e.flow_id "
            "WHERE r.status = %s AND e.status = ANY(%s) "
            "AND e.flow_id NOT IN (SELECT flow_id FROM passivated) ORDER BY e.flow_id",
            (RunStatus.RUNNING.value, list(_ACTIVE_STATUSES)),
        )
        return [row[0] for row in rows]
