"""The ``FlowStore`` interface every durable backend implements.

Everything above this interface (hosts, clients, the scheduler) is written
against it, so a backend is a drop-in: SQLite is the embedded default, and a
PostgreSQL store implements the same roles. A store is one object per role
(definitions, runs, passivation, the clock, Streams) over one shared
connection: each caller holds the role it uses (a run's driver the runs, a
host's Stream buffer the Streams, the scheduler the passivated runs).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Protocol

from dex_agents_ray.engine.store._records import (
    Commit,
    CompletionRecord,
    HistoryRecord,
    LoadedRun,
    RunRecord,
    StreamAppend,
    StreamRecord,
)
from dex_agents_ray.errors import DexAgentsError

__all__ = [
    "ClockStore",
    "DefinitionStore",
    "FlowStore",
    "PassivationStore",
    "PostgresStoreConfig",
    "RunStore",
    "SqliteStoreConfig",
    "StaleEpochError",
    "StoreConfig",
    "StreamStore",
]


class StaleEpochError(DexAgentsError, RuntimeError):
    """A commit came from an incarnation that no longer owns the run."""

    def __init__(self, flow_id: str, epoch: int, current: int | None) -> None:
        super().__init__(
            f"run {flow_id!r}: commit from ownership epoch {epoch} refused; "
            f"the current epoch is {current}"
        )
        self.flow_id = flow_id
        self.epoch = epoch
        self.current = current


class DefinitionStore(Protocol):
    """The pickled Flow definitions runs are made of, by Flow type and hash."""

    async def put(self, flow_type: str, flow_hash: str, blob: bytes) -> None:
        """Keep a pickled Flow definition (idempotent)."""

    async def get(self, flow_type: str, flow_hash: str) -> bytes | None:
        """The pickled definition, or ``None`` when none was kept."""


class RunStore(Protocol):
    """Runs: ownership, the commits that change them and the reads of what they hold.

    A run's writes are fenced by its ownership epoch (:meth:`activate`): a
    commit of an older incarnation raises ``StaleEpochError``. A commit also
    carries the run's channel messages, its retention prune and any Stream
    appends, in its one transaction.
    """

    async def activate(self, flow_id: str) -> tuple[int, LoadedRun | None]:
        """Take ownership of a run: bump and return its epoch, and load it."""

    async def commit(self, commit: Commit, *, replace_run: bool = False) -> list[int]:
        """Apply ``commit`` in one transaction if ``commit.epoch`` is current.

        ``replace_run`` first drops the per-run state of an earlier run of the
        same flow ID (a re-start of a closed flow). Returns the offsets of
        ``commit.stream_appends`` in order, or ``[]`` where a retry cannot tell
        them. Raises ``StaleEpochError``.
        """

    async def get_run(self, flow_id: str) -> RunRecord | None: ...

    async def list_runs(
        self,
        *,
        flow_type: str | None = None,
        active_step_type: str | None = None,
        limit: int | None = None,
    ) -> list[RunRecord]:
        """Runs oldest first (``started_at``, then flow ID); with ``flow_type``,
        only runs of that type; with ``active_step_type``, only runs with an
        active execution of that Step type; at most ``limit`` of them. Indexes
        serve both filters, so their cost follows the matches, not the store."""

    async def completions(self, flow_id: str) -> list[CompletionRecord]: ...

    async def history(self, flow_id: str) -> list[HistoryRecord]: ...

    async def rpc_response(self, flow_id: str, request_id: str) -> bytes | None: ...

    async def runs_with_work(self) -> list[str]:
        """Running runs with an execution that needs a host (not only waiting)."""


class PassivationStore(Protocol):
    """Runs no host holds, and when their timers need them back."""

    async def passivate(self, flow_id: str, epoch: int, wake_at: float | None) -> None:
        """Record that no host holds the run (fenced by ``epoch``, like a commit);
        ``wake_at`` is when a timer needs it back (``None``: only a client call).
        The next :meth:`RunStore.activate` clears the record."""

    async def due_passivated(self, now: float) -> list[str]:
        """Passivated runs whose ``wake_at`` has come."""

    async def next_passivated_wake(self) -> float | None:
        """The earliest ``wake_at`` of a passivated run, if any."""

    async def passivated_count(self) -> int:
        """How many runs are passivated (no host holds them)."""


class ClockStore(Protocol):
    """The engine clock's offset, shared by every process of the store."""

    async def offset(self) -> float:
        """Seconds ahead of real time (0 unless a test engine moved the clock)."""

    async def set_offset(self, seconds: float) -> None:
        """Store the offset (see ``FlowEngine.advance_clock``)."""


class StreamStore(Protocol):
    """Append-only Streams per run, trimmed to a capacity in bytes."""

    async def append_stream(
        self, flow_id: str, stream: str, source: str, value: bytes, capacity_bytes: int
    ) -> int:
        """Append a message, trim the oldest past ``capacity_bytes``; return its offset."""

    async def append_streams(self, flow_id: str, appends: Sequence[StreamAppend]) -> list[int]:
        """Append messages in order, in one transaction; return their offsets."""

    async def read_stream(
        self, flow_id: str, stream: str, after_offset: int, limit: int
    ) -> list[StreamRecord]:
        """Messages with an offset greater than ``after_offset``, oldest first."""

    async def list_stream(
        self, flow_id: str, stream: str, before_offset: int | None, limit: int
    ) -> list[StreamRecord]:
        """Messages older than ``before_offset`` (or the newest), newest first."""


class FlowStore(Protocol):
    """Durable storage of flow definitions, runs, Step history and Streams: one
    object per role, all over the one connection (or pool) the store opens.

    Every method is safe to call from any process that can reach the store; a
    run's writes are fenced by its ownership epoch (:meth:`RunStore.activate`).
    Open the store before using a role and close it after the last use::

        store = open_store(SqliteStoreConfig(path="/tmp/runs.db"))
        await store.open()
        try:
            run = await store.runs.get_run("flow-1")
        finally:
            await store.close()
    """

    @property
    def definitions(self) -> DefinitionStore: ...

    @property
    def runs(self) -> RunStore: ...

    @property
    def passivation(self) -> PassivationStore: ...

    @property
    def clock(self) -> ClockStore: ...

    @property
    def streams(self) -> StreamStore: ...

    async def open(self) -> None: ...

    async def close(self) -> None: ...


DEFAULT_RETRY_DEADLINE = timedelta(seconds=60)
"""How long a store operation retries transient faults by default."""


def _check_deadline(owner: str, deadline: object) -> None:
    if not isinstance(deadline, timedelta) or deadline <= timedelta(0):
        raise ValueError(f"{owner}.retry_deadline must be a positive timedelta, got {deadline!r}")


@dataclass(frozen=True, kw_only=True)
class SqliteStoreConfig:
    """Where the embedded SQLite store lives, and how durable its commits are."""

    path: str
    """Absolute path of the database file."""
    durability: str = "full"
    """``full``: fsync each commit (power-loss safe). ``process``:
    ``synchronous=NORMAL``, survives process crashes only."""
    retry_deadline: timedelta = DEFAULT_RETRY_DEADLINE
    """How long an operation retries transient faults (the file locked by another
    writer, the disk full) before it raises ``StoreUnavailableError``."""

    def __post_init__(self) -> None:
        _check_deadline(type(self).__name__, self.retry_deadline)
        if not Path(self.path).is_absolute():
            raise ValueError(f"SqliteStoreConfig.path must be absolute, got {self.path!r}")
        if self.durability not in ("full", "process"):
            raise ValueError(
                f"SqliteStoreConfig.durability must be 'full' or 'process', got {self.durability!r}"
            )

    @property
    def location(self) -> str:
        """Where the store lives, safe to print: the database file."""
        return self.path


POSTGRES_URI_SCHEMES = ("postgresql://", "postgres://")
"""URI prefixes ``FlowEngine.start(store=...)`` reads as a PostgreSQL DSN."""


@dataclass(frozen=True, kw_only=True)
class PostgresStoreConfig:
    """A PostgreSQL store (the ``postgres`` extra), for clusters where a run may
    restart on any node. Plain data: hosts open the store themselves.

    The DSN's password never appears in ``repr``, ``str`` or :attr:`location`.
    """

    dsn: str = field(repr=False)
    """A libpq connection string: a ``postgresql://`` URI or ``key=value`` pairs."""
    pool_size: int = 4
    """The most connections one store object (one engine or host process) holds."""
    durability: str = "full"
    """``full``: each commit waits for the server's WAL flush. ``process``:
    ``synchronous_commit=off``: survives crashes of engine processes, while a
    crash of the database server may lose its last fraction of a second of commits."""
    retry_deadline: timedelta = DEFAULT_RETRY_DEADLINE
    """How long an operation retries transient faults (the server restarting,
    failing over or unreachable, a dropped connection) before it raises
    ``StoreUnavailableError``."""

    def __post_init__(self) -> None:
        _check_deadline(type(self).__name__, self.retry_deadline)
        if not self.dsn.strip():
            raise ValueError("PostgresStoreConfig.dsn must not be empty")
        if "://" in self.dsn and not self.dsn.startswith(POSTGRES_URI_SCHEMES):
            raise ValueError(
                "PostgresStoreConfig.dsn must be a postgresql:// URI or key=value pairs, "
                f"got {redact_dsn(self.dsn)!r}"
            )
        if self.pool_size < 1:
            raise ValueError(
                f"PostgresStoreConfig.pool_size must be at least 1, got {self.pool_size}"
            )
        if self.durability not in ("full", "process"):
            raise ValueError(
                "PostgresStoreConfig.durability must be 'full' or 'process', "
                f"got {self.durability!r}"
            )

    def __repr__(self) -> str:
        return (
            f"PostgresStoreConfig(dsn={self.location!r}, pool_size={self.pool_size}, "
            f"durability={self.durability!r}, retry_deadline={self.retry_deadline!r})"
        )

    @property
    def location(self) -> str:
        """Where the store lives, safe to print: the DSN without its password."""
        return redact_dsn(self.dsn)


# Greedy to the last "@" before the path: a stray "@" in a password hides more, not less.
_URI_PASSWORD = re.compile(r"^(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^:@/?#]*):[^/]*@")
_QUERY_PASSWORD = re.compile(r"(?P<head>[?&]password=)[^&#]*", re.IGNORECASE)
_KEYWORD_PASSWORD = re.compile(
    r"(?P<head>(?:^|\s)password\s*=\s*)(?:'(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE
)


def redact_dsn(dsn: str) -> str:
    """``dsn`` with any password replaced by ``***`` (URI, query and key=value forms)."""
    if "://" in dsn:
        dsn = _URI_PASSWORD.sub(r"\g<head>:***@", dsn)
        return _QUERY_PASSWORD.sub(r"\g<head>***", dsn)
    return _KEYWORD_PASSWORD.sub(r"\g<head>***", dsn)


StoreConfig = SqliteStoreConfig | PostgresStoreConfig
"""Any store config ``store._open.open_store`` accepts."""
