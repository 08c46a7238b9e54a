"""The SQLite store's file: its schema, its locks and its error classes."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path

from dex_agents_ray.engine.store._run_rows import RUN_COLUMNS

try:
    import fcntl
except ImportError:  # pragma: no cover - not on Windows
    fcntl = None  # type: ignore[assignment]

_TRANSIENT_CODES = frozenset({5, 6, 10, 13})
"""SQLITE_BUSY, SQLITE_LOCKED, SQLITE_IOERR, SQLITE_FULL (primary result codes)."""


def transient(error: BaseException) -> bool:
    """A locked database, an I/O error or a full disk: a later try may succeed."""
    if not isinstance(error, sqlite3.OperationalError):
        return False
    code = getattr(error, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in _TRANSIENT_CODES
    text = str(error).lower()
    return "locked" in text or "busy" in text or "disk" in text


SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS flow_definitions (
    flow_type TEXT NOT NULL, flow_hash TEXT NOT NULL, blob BLOB NOT NULL,
    created_at REAL NOT NULL, PRIMARY KEY (flow_type, flow_hash));
CREATE TABLE IF NOT EXISTS epochs (flow_id TEXT PRIMARY KEY, epoch INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    flow_id TEXT PRIMARY KEY, run_id TEXT NOT NULL, flow_type TEXT NOT NULL,
    flow_hash TEXT NOT NULL, status TEXT NOT NULL, started_at REAL NOT NULL,
    closed_at REAL, error_type TEXT NOT NULL, error_message TEXT NOT NULL,
    active_step_types TEXT NOT NULL, search_attributes TEXT NOT NULL, extra TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS attributes (
    flow_id TEXT NOT NULL, key TEXT NOT NULL, value BLOB NOT NULL,
    PRIMARY KEY (flow_id, key));
CREATE TABLE IF NOT EXISTS messages (
    flow_id TEXT NOT NULL, channel TEXT NOT NULL, seq INTEGER NOT NULL,
    message_id TEXT NOT NULL, value BLOB NOT NULL, PRIMARY KEY (flow_id, seq));
CREATE INDEX IF NOT EXISTS messages_by_id ON messages (flow_id, channel, message_id);
CREATE TABLE IF NOT EXISTS executions (
    flow_id TEXT NOT NULL, exec_id TEXT NOT NULL, status TEXT NOT NULL,
    wake_at REAL, doc TEXT NOT NULL, PRIMARY KEY (flow_id, exec_id));
CREATE INDEX IF NOT EXISTS executions_active ON executions (status, wake_at);
CREATE TABLE IF NOT EXISTS completions (
    flow_id TEXT NOT NULL, seq INTEGER NOT NULL, step_type TEXT NOT NULL,
    exec_id TEXT NOT NULL, output BLOB NOT NULL, PRIMARY KEY (flow_id, seq));
CREATE TABLE IF NOT EXISTS history (
    flow_id TEXT NOT NULL, seq INTEGER NOT NULL, at REAL NOT NULL, exec_id TEXT NOT NULL,
    event TEXT NOT NULL, detail TEXT NOT NULL, PRIMARY KEY (flow_id, seq));
CREATE TABLE IF NOT EXISTS rpc_requests (
    flow_id TEXT NOT NULL, request_id TEXT NOT NULL, response BLOB NOT NULL,
    PRIMARY KEY (flow_id, request_id));
CREATE TABLE IF NOT EXISTS active_steps (
    step_type TEXT NOT NULL, started_at REAL NOT NULL, flow_id TEXT NOT NULL,
    PRIMARY KEY (step_type, started_at, flow_id));
CREATE INDEX IF NOT EXISTS active_steps_by_run ON active_steps (flow_id);
CREATE INDEX IF NOT EXISTS runs_by_type ON runs (flow_type, started_at, flow_id);
CREATE TABLE IF NOT EXISTS passivated (flow_id TEXT PRIMARY KEY, wake_at REAL);
CREATE INDEX IF NOT EXISTS passivated_wake ON passivated (wake_at);
CREATE TABLE IF NOT EXISTS streams (
    flow_id TEXT NOT NULL, stream TEXT NOT NULL, offset INTEGER NOT NULL,
    created_at REAL NOT NULL, source TEXT NOT NULL, value BLOB NOT NULL,
    PRIMARY KEY (flow_id, stream, offset));
"""


def index_active_steps(conn: sqlite3.Connection) -> None:
    """Fill ``active_steps`` for runs a store written before it existed had."""
    if conn.execute("SELECT 1 FROM active_steps LIMIT 1").fetchone() is not None:
        return
    rows = conn.execute(
        "SELECT flow_id, started_at, active_step_types FROM runs WHERE active_step_types != '[]'"
    ).fetchall()
    conn.executemany(
        "INSERT OR IGNORE INTO active_steps VALUES (?,?,?)",
        [(t, started, fid) for fid, started, types in rows for t in json.loads(types)],
    )


UPSERT_RUN = (
    f"INSERT INTO runs VALUES ({','.join('?' * len(RUN_COLUMNS))}) ON CONFLICT (flow_id) "
    f"DO UPDATE SET {', '.join(f'{c}=excluded.{c}' for c in RUN_COLUMNS[1:])}"
)
"""A run's row, written in place when it is there (``OR REPLACE`` would delete it
and insert it again, index entries and all)."""


def begin_at_once(db: sqlite3.Connection, busy_wait: float) -> bool:
    """``BEGIN IMMEDIATE`` without SQLite's busy wait: False if another connection
    holds the write lock."""
    db.execute("PRAGMA busy_timeout=0")
    try:
        db.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError:
        return False
    finally:
        db.execute(f"PRAGMA busy_timeout={int(busy_wait * 1000)}")
    return True


def try_flock(fd: int) -> bool:
    """Take the exclusive ``flock`` on ``fd`` if it is free now."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def take_flock(fd: int, wait: float) -> bool:
    """Take the exclusive ``flock`` on ``fd`` within ``wait`` seconds: tries every
    50 us at first, then every millisecond (a holder keeps it for a transaction,
    a few milliseconds). False when the time is up."""
    if try_flock(fd):
        return True
    deadline = time.monotonic() + wait
    delay = 0.00005
    while True:
        time.sleep(delay)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
        delay = min(delay * 2, 0.001)


def create_owner_only(path: Path) -> None:
    """Create the store file (and a missing directory) readable by its owner only.

    SQLite creates the ``-wal`` and ``-shm`` files with the database file's
    permissions, so they are owner-only too. An existing file keeps its mode.
    """
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    os.close(fd)
