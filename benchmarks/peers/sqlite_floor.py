"""Raw SQLite in WAL mode: one row per step, the durable floor.

Variants:
    full: synchronous=FULL, BEGIN/INSERT/COMMIT on the event-loop thread (a WAL
        fsync per step).
    normal: synchronous=NORMAL, the same (no fsync per commit: survives a process
        crash, not a power loss).
    group: synchronous=FULL, one writer thread commits every queued step in one
        transaction (group commit); each step still waits for an fsync covering it.
"""

from __future__ import annotations

import asyncio
import queue
import sqlite3
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Protocol

from .workload import TURNS, Message, encode, run_tool, scripted_model, user_message

# Distributions whose versions a job reports.
PACKAGES: tuple[str, ...] = ()

_SCHEMA = """CREATE TABLE IF NOT EXISTS steps (
    session TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL, payload TEXT NOT NULL,
    PRIMARY KEY (session, seq))"""
_INSERT = "INSERT INTO steps VALUES (?, ?, ?, ?)"

Row = tuple[str, int, str, str]


def _connect(path: Path, synchronous: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute(_SCHEMA)
    return conn


class _Writer(Protocol):
    async def write(self, row: Row) -> None: ...

    def close(self) -> None: ...


class _DirectWriter:
    """Each step commits its own transaction on the calling (event-loop) thread."""

    def __init__(self, path: Path, synchronous: str) -> None:
        self._conn = _connect(path, synchronous)

    async def write(self, row: Row) -> None:
        self._conn.execute("BEGIN")
        self._conn.execute(_INSERT, row)
        self._conn.execute("COMMIT")

    def close(self) -> None:
        self._conn.close()


_Pending = tuple[Row, asyncio.AbstractEventLoop, "asyncio.Future[None]"]


class _GroupWriter:
    """A writer thread drains the queue and commits all pending steps in one transaction."""

    def __init__(self, path: Path, synchronous: str) -> None:
        self._conn = _connect(path, synchronous)
        self._queue: queue.SimpleQueue[_Pending | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="sqlite-group-writer")
        self._thread.start()

    def _run(self) -> None:
        stop = False
        while not stop:
            batch: list[_Pending] = []
            item = self._queue.get()
            while True:
                if item is None:
                    stop = True
                else:
                    batch.append(item)
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            if not batch:
                continue
            try:
                self._conn.execute("BEGIN")
                self._conn.executemany(_INSERT, [row for row, _, _ in batch])
                self._conn.execute("COMMIT")
            except sqlite3.Error as exc:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                # Fail the waiting steps rather than leave them hanging.
                for _, loop, future in batch:
                    loop.call_soon_threadsafe(future.set_exception, exc)
                continue
            for _, loop, future in batch:
                loop.call_soon_threadsafe(future.set_result, None)

    async def write(self, row: Row) -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._queue.put((row, loop, future))
        await future

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()
        self._conn.close()


class SqliteFloor:
    """One step is one row: the step runs, then its result is committed."""

    def __init__(self, writer: _Writer) -> None:
        self._writer = writer

    async def _step(self, session_id: str, seq: int, kind: str, result: Message) -> Message:
        await self._writer.write((session_id, seq, kind, encode(result)))
        return result

    async def session(self, session_id: str) -> None:
        messages: list[Message] = []
        seq = 0
        for turn in range(TURNS):
            messages.append(user_message(turn))
            reply = await self._step(session_id, seq, "model", scripted_model(messages))
            messages.append(reply)
            calls = reply.get("tool_calls", [])
            messages += await asyncio.gather(
                *(
                    self._step(session_id, seq + 1 + i, "tool", run_tool(call))
                    for i, call in enumerate(calls)
                )
            )
            seq += 1 + len(calls)
            messages.append(await self._step(session_id, seq, "model", scripted_model(messages)))
            seq += 1


@asynccontextmanager
async def open_system(workdir: Path, variant: str) -> AsyncIterator[SqliteFloor]:
    path = workdir / "steps.sqlite"
    writer: _Writer
    if variant == "group":
        writer = _GroupWriter(path, "FULL")
    else:
        writer = _DirectWriter(path, variant.upper())
    try:
        yield SqliteFloor(writer)
    finally:
        writer.close()
