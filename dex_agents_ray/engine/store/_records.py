"""The durable records of a flow run, as the store keeps them.

Values stay in the SDK's wire encoding (serialized ``dex.Value`` protobufs), so
what a Step wrote is exactly what the next Step reads, whatever codec wrote it.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any

import orjson

SCHEMA_VERSION = 1
"""Version of the persisted format; readers refuse newer versions."""


class RunStatus(StrEnum):
    """Lifecycle of a run (the values of ``dex.FlowStatus``)."""

    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"
    TERMINATED = "terminated"


class ExecStatus(StrEnum):
    """Lifecycle of one Step execution."""

    WAIT_FOR = "wait_for"
    """``wait_for`` has not completed yet."""
    WAITING = "waiting"
    """Waiting for its Conditions."""
    READY = "ready"
    """``execute`` attempts are pending or running."""
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"

    @property
    def is_active(self) -> bool:
        return self in _ACTIVE


_ACTIVE = frozenset({ExecStatus.WAIT_FOR, ExecStatus.WAITING, ExecStatus.READY})


def compact_json(data: Any, *, sort_keys: bool = False) -> str:
    """Compact JSON text of a record's plain data (dicts, lists, strings, numbers):
    ``orjson``'s, or ``json``'s for a value ``orjson`` refuses (a NaN is written as
    ``null``). Only this engine reads it back (with ``json.loads``)."""
    try:
        return orjson.dumps(data, option=orjson.OPT_SORT_KEYS if sort_keys else 0).decode()
    except TypeError:
        return json.dumps(data, separators=(",", ":"), sort_keys=sort_keys)


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


@dataclass(kw_only=True)
class RecoveryRecord:
    """The failure that sent an execution down its failure route."""

    detail: str
    error_type: str
    progress: str
    """A ``StepAttemptProgress`` value."""


@dataclass(kw_only=True)
class ExecRecord:
    """One Step execution and every durable fact about its attempts."""

    exec_id: str
    step_type: str
    number: int
    input: bytes
    """Serialized ``dex.Value`` of the Step input."""
    options: bytes
    """Serialized ``dex.StepOptions`` in force for this execution."""
    from_exec_id: str
    status: ExecStatus
    created_at: float
    remote: str | None = None
    """``RayTaskOptions`` JSON when the execution runs as a Ray task."""
    failure_remote: str | None = None
    """``RayTaskOptions`` JSON for the failure route's execution."""
    wait: bytes | None = None
    """Serialized ``dex.WaitingCondition`` while ``WAITING``."""
    wait_started_at: float | None = None
    condition_results: bytes | None = None
    taken: tuple[str, ...] = ()
    """The IDs of the Channel messages the satisfied wait took, in the order of
    the values in ``condition_results`` (RPCs still show them until ``execute``
    commits: ``RunState.taken_messages``); empty for none."""
    wait_for_failed: bool = False
    wait_for_failures: int = 0
    locals: dict[str, bytes] = field(default_factory=dict)
    heartbeat: bytes | None = None
    """Serialized ``dex.Value`` of the last heartbeat checkpoint; ``None`` = absent."""
    attempts_started: int = 0
    """Attempts whose start was recorded before user code ran."""
    attempts_failed: int = 0
    first_attempt_at: float | None = None
    next_attempt_at: float | None = None
    recovery: RecoveryRecord | None = None
    last_error: str | None = None
    ended_at: float | None = None

    @property
    def wake_at(self) -> float | None:
        """When the scheduler must look at this execution again, if ever."""
        if self.status is ExecStatus.READY:
            return self.next_attempt_at or self.created_at
        return None

    def to_json(self) -> str:
        data: dict[str, Any] = {
            "exec_id": self.exec_id,
            "step_type": self.step_type,
            "number": self.number,
            "input": _b64(self.input),
            "options": _b64(self.options),
            "from_exec_id": self.from_exec_id,
            "status": self.status.value,
            "created_at": self.created_at,
            "remote": self.remote,
            "failure_remote": self.failure_remote,
            "wait": _b64(self.wait),
            "wait_started_at": self.wait_started_at,
            "condition_results": _b64(self.condition_results),
            "taken": list(self.taken),
            "wait_for_failed": self.wait_for_failed,
            "wait_for_failures": self.wait_for_failures,
            "locals": {k: _b64(v) for k, v in self.locals.items()},
            "heartbeat": _b64(self.heartbeat),
            "attempts_started": self.attempts_started,
            "attempts_failed": self.attempts_failed,
            "first_attempt_at": self.first_attempt_at,
            "next_attempt_at": self.next_attempt_at,
            "recovery": None
            if self.recovery is None
            else {
                "detail": self.recovery.detail,
                "error_type": self.recovery.error_type,
                "progress": self.recovery.progress,
            },
            "last_error": self.last_error,
            "ended_at": self.ended_at,
        }
        return compact_json(data)

    @staticmethod
    def from_json(text: str) -> ExecRecord:
        d = json.loads(text)
        recovery = d["recovery"]
        return ExecRecord(
            exec_id=d["exec_id"],
            step_type=d["step_type"],
            number=d["number"],
            input=_unb64(d["input"]) or b"",
            options=_unb64(d["options"]) or b"",
            from_exec_id=d["from_exec_id"],
            status=ExecStatus(d["status"]),
            created_at=d["created_at"],
            remote=d["remote"],
            failure_remote=d["failure_remote"],
            wait=_unb64(d["wait"]),
            wait_started_at=d["wait_started_at"],
            condition_results=_unb64(d["condition_results"]),
            taken=tuple(d.get("taken", ())),  # absent in rows written before it existed
            wait_for_failed=d["wait_for_failed"],
            wait_for_failures=d["wait_for_failures"],
            locals={k: _unb64(v) or b"" for k, v in d["locals"].items()},
            heartbeat=_unb64(d["heartbeat"]),
            attempts_started=d["attempts_started"],
            attempts_failed=d["attempts_failed"],
            first_attempt_at=d["first_attempt_at"],
            next_attempt_at=d["next_attempt_at"],
            recovery=None if recovery is None else RecoveryRecord(**recovery),
            last_error=d["last_error"],
            ended_at=d["ended_at"],
        )


_EXEC_FIELDS: frozenset[str] = frozenset(f.name for f in fields(ExecRecord))


def evolve(record: ExecRecord, **changes: Any) -> ExecRecord:
    """``dataclasses.replace`` for the hot path: a copy with ``changes`` (field
    names checked), without re-running ``__init__`` for every field."""
    unknown = changes.keys() - _EXEC_FIELDS
    if unknown:
        raise TypeError(f"ExecRecord has no field(s) {sorted(unknown)}")
    new = object.__new__(ExecRecord)
    new.__dict__.update(record.__dict__)
    new.__dict__.update(changes)
    return new


@dataclass(kw_only=True)
class RunRecord:
    """The run row: status, ownership epoch, counters and search fields."""

    flow_id: str
    run_id: str
    flow_type: str
    flow_hash: str
    status: RunStatus
    epoch: int
    started_at: float
    closed_at: float | None = None
    error_type: str = ""
    error_message: str = ""
    counters: dict[str, int] = field(default_factory=dict)
    """Per Step type, the number of executions created so far."""
    next_message_seq: int = 1
    graceful_completed: bool = False
    active_step_types: list[str] = field(default_factory=list)
    search_attributes: dict[str, Any] = field(default_factory=dict)
    """Indexed Attribute values by index key, as JSON-compatible values."""
    start_request_id: str = ""
    active_step_search_mode: str = "default"
    """Which active Steps ``active_step_types`` lists: an ``ActiveStepSearchMode``
    value (``FlowConfig``); ``default`` lists every one."""

    def row(self) -> tuple[Any, ...]:
        """The ``runs`` table's columns, in order (both stores use this shape)."""
        return (
            self.flow_id,
            self.run_id,
            self.flow_type,
            self.flow_hash,
            self.status.value,
            self.started_at,
            self.closed_at,
            self.error_type,
            self.error_message,
            compact_json(self.active_step_types),
            compact_json(self.search_attributes, sort_keys=True),
            self.extra_json(),
        )

    def extra_json(self) -> str:
        return compact_json(
            {
                "counters": self.counters,
                "next_message_seq": self.next_message_seq,
                "graceful_completed": self.graceful_completed,
                "start_request_id": self.start_request_id,
                "active_step_search_mode": self.active_step_search_mode,
            }
        )


@dataclass(frozen=True, kw_only=True)
class ChannelMessageRecord:
    """One pending Channel message."""

    channel: str
    """Physical channel name (``name`` or ``name/<quoted instance>``)."""
    seq: int
    message_id: str
    value: bytes


@dataclass(frozen=True, kw_only=True)
class AttributeRecord:
    key: str
    value: bytes


@dataclass(frozen=True, kw_only=True)
class HistoryRecord:
    """One entry of a run's Step history."""

    at: float
    exec_id: str
    event: str
    detail: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class CompletionRecord:
    step_type: str
    exec_id: str
    output: bytes


@dataclass(kw_only=True)
class Commit:
    """Everything one Step result, RPC or transition changes, applied atomically."""

    flow_id: str
    epoch: int
    run: RunRecord | None = None
    """The run row, or ``None`` when it is as stored (nothing in it changed)."""
    active_steps_changed: bool = True
    """Whether ``run``'s active Step types (or its start time) differ from the
    stored ones, so that the store rewrites the run's ``active_steps`` index rows."""
    attribute_upserts: dict[str, bytes] = field(default_factory=dict)
    attribute_deletes: set[str] = field(default_factory=set)
    message_deletes: list[tuple[str, str]] = field(default_factory=list)
    """``(channel, message_id)`` pairs, applied before the appends."""
    message_appends: list[ChannelMessageRecord] = field(default_factory=list)
    executions: list[ExecRecord] = field(default_factory=list)
    completions: list[CompletionRecord] = field(default_factory=list)
    history: list[HistoryRecord] = field(default_factory=list)
    rpc_request: tuple[str, bytes] | None = None
    """``(request_id, response)`` remembered for retried client calls."""
    stream_appends: list[StreamAppend] = field(default_factory=list)
    """Stream writes that ride in this commit's transaction (appended in order)."""
    prune: PruneRequest | None = None
    """Delete the run's older finished executions, history and RPC responses."""


def merge_commits(first: Commit, second: Commit) -> Commit | None:
    """One commit that leaves the store as ``first`` then ``second`` would, or
    ``None`` when they cannot share one (another run or epoch, two RPC responses).

    The store applies a commit's deletes before its appends, so a message that
    ``first`` appends and ``second`` consumes is left out of both, and an
    Attribute that ``second`` deletes is dropped from ``first``'s upserts.
    Executions, completions, history and Stream writes keep their order.
    """
    if (
        first.flow_id != second.flow_id
        or first.epoch != second.epoch
        or (first.rpc_request is not None and second.rpc_request is not None)
    ):
        return None
    consumed = set(second.message_deletes)
    dropped = second.attribute_deletes
    upserts = {k: v for k, v in first.attribute_upserts.items() if k not in dropped}
    upserts.update(second.attribute_upserts)
    deletes = (first.attribute_deletes - second.attribute_upserts.keys()) | second.attribute_deletes
    run: RunRecord | None = first.run
    active_changed = first.active_steps_changed
    if second.run is not None:
        run = second.run
        active_changed = second.active_steps_changed or (
            first.run is not None and first.active_steps_changed
        )
    return Commit(
        flow_id=first.flow_id,
        epoch=first.epoch,
        run=run,
        active_steps_changed=active_changed,
        attribute_upserts=upserts,
        attribute_deletes=deletes,
        message_deletes=[*first.message_deletes, *second.message_deletes],
        message_appends=[
            *(m for m in first.message_appends if (m.channel, m.message_id) not in consumed),
            *second.message_appends,
        ],
        executions=[*first.executions, *second.executions],
        completions=[*first.completions, *second.completions],
        history=[*first.history, *second.history],
        rpc_request=first.rpc_request if second.rpc_request is None else second.rpc_request,
        stream_appends=[*first.stream_appends, *second.stream_appends],
        prune=second.prune if second.prune is not None else first.prune,
    )


@dataclass(kw_only=True)
class LoadedRun:
    """A run as activation reads it."""

    run: RunRecord
    attributes: dict[str, bytes]
    messages: list[ChannelMessageRecord]
    executions: list[ExecRecord]
    completions: list[CompletionRecord]


@dataclass(frozen=True, kw_only=True)
class PruneRequest:
    """What a commit prunes (see ``RetentionOptions``); ``None`` keeps all of a kind."""

    keep_finished_executions: int | None
    keep_rpc_requests: int | None


@dataclass(frozen=True, kw_only=True)
class StreamAppend:
    """One message to append to a run's Stream (see ``StreamStore.append_streams``)."""

    stream: str
    source: str
    value: bytes
    capacity_bytes: int


@dataclass(frozen=True, kw_only=True)
class StreamRecord:
    offset: int
    created_at: float
    source: str
    value: bytes
