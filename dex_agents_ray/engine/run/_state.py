"""A run's state in memory, the requests handlers see, and transactions on it.

``RunState`` mirrors what the store holds for one run. A ``Tx`` stages changes
on a working copy and turns them into one ``Commit``; memory changes only after
the store accepted that commit (``RunState.apply``).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from dex.dexpb import dex_pb2 as pb
from dex.runtime_errors import ChannelMessageNotFoundError

from dex_agents_ray.engine import _clock as clock
from dex_agents_ray.engine._errors import service_error
from dex_agents_ray.engine.run._flow_config import indexed_step_types
from dex_agents_ray.engine.run._waits import evaluate_wait, next_timer_at
from dex_agents_ray.engine.sdk._invoke import AttributeValues, DecodedAttributes, MovementExtras
from dex_agents_ray.engine.store._records import (
    ChannelMessageRecord,
    Commit,
    CompletionRecord,
    ExecRecord,
    ExecStatus,
    HistoryRecord,
    RecoveryRecord,
    RunRecord,
    RunStatus,
    evolve,
)


def uuid7() -> str:
    """A time-ordered UUIDv7 string (RFC 9562), as Dex assigns to messages."""
    ms = int(time.time() * 1000)
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= ((rand >> 62) & 0xFFF) << 64
    value |= 0b10 << 62
    value |= rand & ((1 << 62) - 1)
    return str(uuid.UUID(int=value))


class RunState:
    """One run's committed state."""

    def __init__(self) -> None:
        self.run: RunRecord | None = None
        self.attributes: dict[str, bytes] = {}
        self.decoded: DecodedAttributes = {}
        """Decoded immutable Attribute values, checked against ``attributes`` by identity."""
        self.channels: dict[str, list[ChannelMessageRecord]] = {}
        self.execs: dict[str, ExecRecord] = {}
        """The active executions only (ended ones live in the store), in creation order."""
        self.completions: list[CompletionRecord] = []

    def load(
        self,
        run: RunRecord,
        attributes: dict[str, bytes],
        messages: Iterable[ChannelMessageRecord],
        execs: Iterable[ExecRecord],
        completions: list[CompletionRecord],
    ) -> None:
        self.run = run
        self.attributes = dict(attributes)
        self.channels = {}
        for message in messages:
            self.channels.setdefault(message.channel, []).append(message)
        self.execs = {e.exec_id: e for e in execs if e.status.is_active}
        self.completions = list(completions)

    def apply(self, commit: Commit, *, replace_run: bool = False) -> None:
        if replace_run:
            self.attributes, self.channels, self.execs, self.completions = {}, {}, {}, []
        if commit.run is not None:
            self.run = commit.run
        for key in commit.attribute_deletes:
            self.attributes.pop(key, None)
        self.attributes.update(commit.attribute_upserts)
        for channel, message_id in commit.message_deletes:
            queue = self.channels.get(channel, [])
            self.channels[channel] = [m for m in queue if m.message_id != message_id]
        for message in commit.message_appends:
            self.channels.setdefault(message.channel, []).append(message)
        for name in [n for n, q in self.channels.items() if not q]:
            del self.channels[name]
        for record in commit.executions:
            if record.status.is_active:
                self.execs[record.exec_id] = record
            else:
                self.execs.pop(record.exec_id, None)
        self.completions.extend(commit.completions)

    @property
    def is_running(self) -> bool:
        return self.run is not None and self.run.status is RunStatus.RUNNING

    def active_execs(self) -> list[ExecRecord]:
        return list(self.execs.values())

    # -- what a handler sees -----------------------------------------------------------

    def context(self, e: ExecRecord, attempt: int) -> pb.Context:
        assert self.run is not None
        context = pb.Context(
            flow_id=self.run.flow_id,
            run_id=self.run.run_id,
            flow_started_timestamp=int(self.run.started_at),
            step_execution_id=e.exec_id,
            first_attempt_timestamp=int(e.first_attempt_at or clock.now()),
            attempt=attempt,
            from_step_execution_id=e.from_exec_id,
            run_attempt=1,
        )
        if e.recovery is not None:
            context.recovery_error.detail = e.recovery.detail
            context.recovery_error.error_type = e.recovery.error_type
        if e.heartbeat is not None:
            context.last_heartbeat_value.CopyFrom(pb.Value.FromString(e.heartbeat))
        return context

    def attribute_snapshot(self, loaded_map_keys: Sequence[str]) -> dict[str, bytes]:
        """The serialized Attributes a handler sees: static ones, plus the
        AttributeMap instances it loads."""
        if not loaded_map_keys:
            return {k: v for k, v in self.attributes.items() if "/" not in k}
        whole_maps = tuple(k for k in loaded_map_keys if k.endswith("/"))
        instances = {k for k in loaded_map_keys if not k.endswith("/")}
        return {
            k: v
            for k, v in self.attributes.items()
            if "/" not in k or k in instances or k.startswith(whole_maps)
        }

    def attribute_kvs(self, loaded_map_keys: Sequence[str]) -> list[pb.KV]:
        """The same Attributes as protobuf entries (a request that leaves the process)."""
        return [
            pb.KV(key=key, value=pb.Value.FromString(value))
            for key, value in self.attribute_snapshot(loaded_map_keys).items()
        ]

    def attribute_values(self, loaded_map_keys: Sequence[str]) -> AttributeValues:
        """The same Attributes for a handler run in this process: parsed and
        decoded when it reads them, decoded values shared across its Steps."""
        decoded = self.decoded
        if len(decoded) > 2 * len(self.attributes) + 64:
            self.decoded = decoded = {
                k: v for k, v in decoded.items() if self.attributes.get(k) is v[0]
            }
        return AttributeValues(self.attribute_snapshot(loaded_map_keys), decoded)

    def channel_infos(self) -> dict[str, pb.ChannelInfo]:
        return {name: pb.ChannelInfo(size=len(q)) for name, q in self.channels.items()}

    def loaded_messages(
        self, channel_names: Sequence[str], map_instances: Sequence[str]
    ) -> dict[str, pb.ChannelValues]:
        whole_maps = tuple(k for k in map_instances if k.endswith("/"))
        wanted = set(channel_names) | {k for k in map_instances if not k.endswith("/")}
        loaded: dict[str, pb.ChannelValues] = {}
        for name, queue in self.channels.items():
            if name in wanted or (whole_maps and name.startswith(whole_maps)):
                loaded[name] = pb.ChannelValues(
                    messages=[
                        pb.ChannelMessage(
                            channel_name=name,
                            value=pb.Value.FromString(m.value),
                            message_id=m.message_id,
                        )
                        for m in queue
                    ]
                )
        return loaded

    def execute_request(
        self, e: ExecRecord, attempt: int, *, attributes: bool = True
    ) -> pb.InvokeExecuteMethodRequest:
        """The request of one ``execute`` attempt; ``attributes=False`` leaves the
        Attributes out (a local attempt takes them from ``attribute_values``)."""
        assert self.run is not None
        options = pb.StepOptions.FromString(e.options)
        request = pb.InvokeExecuteMethodRequest(
            context=self.context(e, attempt),
            flow_type=self.run.flow_type,
            step_type=e.step_type,
            step_input=pb.Value.FromString(e.input),
            attributes=(
                self.attribute_kvs(options.execute_load_attribute_map_instances)
                if attributes
                else ()
            ),
            step_exe_locals=[
                pb.KV(key=k, value=pb.Value.FromString(v)) for k, v in e.locals.items()
            ],
            channel_infos=self.channel_infos(),
            loaded_channel_messages=self.loaded_messages(
                options.execute_load_channel_names, options.execute_load_channel_map_instances
            ),
            loaded_attribute_map_instances=options.execute_load_attribute_map_instances,
            loaded_channel_names=options.execute_load_channel_names,
            loaded_channel_map_instances=options.execute_load_channel_map_instances,
        )
        if e.condition_results is not None:
            request.condition_results.CopyFrom(pb.ConditionResults.FromString(e.condition_results))
        if e.wait_for_failed:
            request.condition_results.wait_for_failed = True
        return request

    def wait_for_request(
        self, e: ExecRecord, attempt: int, *, attributes: bool = True
    ) -> pb.InvokeWaitForMethodRequest:
        """The request of one ``wait_for`` attempt (``attributes`` as for ``execute_request``)."""
        assert self.run is not None
        options = pb.StepOptions.FromString(e.options)
        context = self.context(e, attempt)
        # wait_for attempts count from the execution's creation, as its retry budget does.
        context.first_attempt_timestamp = int(e.created_at)
        return pb.InvokeWaitForMethodRequest(
            context=context,
            flow_type=self.run.flow_type,
            step_type=e.step_type,
            step_input=pb.Value.FromString(e.input),
            attributes=(
                self.attribute_kvs(options.wait_for_load_attribute_map_instances)
                if attributes
                else ()
            ),
            channel_infos=self.channel_infos(),
            loaded_channel_messages=self.loaded_messages(
                options.wait_for_load_channel_names, options.wait_for_load_channel_map_instances
            ),
            loaded_attribute_map_instances=options.wait_for_load_attribute_map_instances,
            loaded_channel_names=options.wait_for_load_channel_names,
            loaded_channel_map_instances=options.wait_for_load_channel_map_instances,
        )

    def taken_messages(self, channel_names: Sequence[str]) -> dict[str, pb.ChannelValues]:
        """The messages of ``channel_names`` that satisfied waits took for executions
        whose ``execute`` has not committed yet, oldest execution first.

        A wait's messages leave their Channel when it is satisfied, but the Step
        that got them commits what it makes of them only with its ``execute``
        (a session's turn, for a queued user message): an RPC that shows the
        Channel (``taken_channel_messages``) shows these too, so a message is
        never out of sight in between.
        """
        wanted = set(channel_names)
        taken: dict[str, pb.ChannelValues] = {}
        for e in self.execs.values():
            if not e.taken or e.condition_results is None or e.status is not ExecStatus.READY:
                continue
            ids = iter(e.taken)
            for result in pb.ConditionResults.FromString(e.condition_results).channel_results:
                for value, message_id in zip(result.values, ids, strict=False):
                    if result.channel_name in wanted:
                        taken.setdefault(result.channel_name, pb.ChannelValues()).messages.add(
                            channel_name=result.channel_name, value=value, message_id=message_id
                        )
        return taken

    def rpc_request(
        self,
        rpc_name: str,
        input_value: pb.Value | None,
        attribute_maps: Sequence[str],
        channel_names: Sequence[str],
        channel_maps: Sequence[str],
    ) -> pb.InvokeWorkerRPCRequest:
        assert self.run is not None
        request = pb.InvokeWorkerRPCRequest(
            context=pb.Context(
                flow_id=self.run.flow_id,
                run_id=self.run.run_id,
                flow_started_timestamp=int(self.run.started_at),
            ),
            flow_type=self.run.flow_type,
            rpc_name=rpc_name,
            channel_infos=self.channel_infos(),
            loaded_channel_messages=self.loaded_messages(channel_names, channel_maps),
            loaded_attribute_map_instances=attribute_maps,
            loaded_channel_names=channel_names,
            loaded_channel_map_instances=channel_maps,
        )
        if input_value is not None:
            request.input.CopyFrom(input_value)
        return request


def _search_value(value: pb.Value) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "obj_value":
        if value.obj_value.encoding == "json":
            return json.loads(value.obj_value.payload.decode("utf-8"))
        return None
    if kind == "null_value" or kind is None:
        return None
    return getattr(value, kind)


class Tx:
    """Changes to a run staged on a working copy, committed as one ``Commit``.

    ``stored``: whether ``state``'s run row is the one in the store (it is not
    for a run being started: that commit writes it whatever changed).
    """

    def __init__(self, state: RunState, epoch: int, now: float, *, stored: bool = True) -> None:
        assert state.run is not None
        self._state = state
        self._stored = stored
        self.now = now
        run = state.run
        # A working copy (``dataclasses.replace`` without re-running ``__init__``):
        # its containers are the only mutable parts. Writes replace or remove whole
        # search attribute values, never change one in place.
        copy = object.__new__(RunRecord)
        copy.__dict__.update(run.__dict__)
        copy.counters = dict(run.counters)
        copy.active_step_types = list(run.active_step_types)
        copy.search_attributes = dict(run.search_attributes)
        self.run = copy
        self.commit = Commit(flow_id=self.run.flow_id, epoch=epoch)
        self._channels: dict[str, list[ChannelMessageRecord]] = {}
        self._execs: dict[str, ExecRecord] = {}
        self._new_execs: list[ExecRecord] = []
        self.canceled: list[str] = []
        self.closed = False

    # -- attributes, channels ----------------------------------------------------------

    def write_attributes(self, writes: Iterable[pb.AttributeWrite]) -> None:
        for write in writes:
            is_null = write.value.WhichOneof("kind") == "null_value"
            if is_null:
                self.commit.attribute_deletes.add(write.key)
                self.commit.attribute_upserts.pop(write.key, None)
            else:
                self.commit.attribute_upserts[write.key] = write.value.SerializeToString()
                self.commit.attribute_deletes.discard(write.key)
            if write.HasField("index_config") and write.index_config.enable:
                index_key = write.index_config.index_key or write.key
                if is_null:
                    self.run.search_attributes.pop(index_key, None)
                else:
                    self.run.search_attributes[index_key] = _search_value(write.value)

    def queue(self, channel: str) -> list[ChannelMessageRecord]:
        if channel not in self._channels:
            self._channels[channel] = list(self._state.channels.get(channel, ()))
        return self._channels[channel]

    def delete_messages(
        self, deletions: Iterable[pb.ChannelMessageDeletion], *, strict: bool
    ) -> None:
        """Delete staged message IDs; ``strict`` (transactional) refuses missing ones."""
        for deletion in deletions:
            queue = self.queue(deletion.channel_name)
            kept = [m for m in queue if m.message_id != deletion.message_id]
            if len(kept) == len(queue):
                if strict:
                    raise service_error(
                        ChannelMessageNotFoundError,
                        f"channel {deletion.channel_name!r} has no pending message "
                        f"{deletion.message_id!r}",
                        "InvokeRPC",
                        self.run.flow_id,
                    )
                continue
            queue[:] = kept
            self._drop(deletion.channel_name, deletion.message_id)

    def consume(self, messages: Iterable[ChannelMessageRecord]) -> None:
        for message in messages:
            queue = self.queue(message.channel)
            queue[:] = [m for m in queue if m.message_id != message.message_id]
            self._drop(message.channel, message.message_id)

    def _drop(self, channel: str, message_id: str) -> None:
        """Delete a stored message, or unpublish one this transaction publishes
        (stores apply deletes before appends)."""
        appends = self.commit.message_appends
        kept = [m for m in appends if m.message_id != message_id]
        if len(kept) < len(appends):
            appends[:] = kept
        else:
            self.commit.message_deletes.append((channel, message_id))

    def publish(self, publications: Iterable[pb.ChannelMessage]) -> None:
        for publication in publications:
            record = ChannelMessageRecord(
                channel=publication.channel_name,
                seq=self.run.next_message_seq,
                message_id=uuid7(),
                value=publication.value.SerializeToString(),
            )
            self.run.next_message_seq += 1
            self.queue(record.channel).append(record)
            self.commit.message_appends.append(record)

    def channel_empty(self, channel: str) -> bool:
        return not self.queue(channel)

    # -- the run as this transaction leaves it (a wait evaluated inside it) ------------

    def attribute_snapshot(self, loaded_map_keys: Sequence[str]) -> dict[str, bytes]:
        """``RunState.attribute_snapshot`` with this transaction's writes applied."""
        snapshot = self._state.attribute_snapshot(loaded_map_keys)
        upserts, deletes = self.commit.attribute_upserts, self.commit.attribute_deletes
        if not upserts and not deletes:
            return snapshot
        whole_maps = tuple(k for k in loaded_map_keys if k.endswith("/"))
        instances = {k for k in loaded_map_keys if not k.endswith("/")}
        for key in deletes:
            snapshot.pop(key, None)
        for key, value in upserts.items():
            if "/" not in key or key in instances or (whole_maps and key.startswith(whole_maps)):
                snapshot[key] = value
        return snapshot

    def wait_for_request(self, e: ExecRecord, attempt: int) -> pb.InvokeWaitForMethodRequest:
        """``RunState.wait_for_request`` (Attributes apart, see ``attribute_snapshot``)
        with the Channel sizes as staged here; its loaded Channel messages are the
        stored ones, so only a ``wait_for`` that loads none may use it."""
        request = self._state.wait_for_request(e, attempt, attributes=False)
        for name, queue in self._channels.items():
            request.channel_infos[name].size = len(queue)
        return request

    def satisfy_waits(self, now: float) -> float | None:
        """Make ready, in this transaction, every waiting execution whose
        condition holds against the Channels as staged here (messages go to the
        earliest waits first, each consumed by its winner only); returns when the
        earliest Timer of a wait still unsatisfied fires."""
        waiting = [
            (record, pb.WaitingCondition.FromString(record.wait))
            for record in self.active_snapshot()
            if record.status is ExecStatus.WAITING and record.wait is not None
        ]
        # Every wait is judged against the same snapshot; ``claimed`` counts
        # what earlier winners in this pass took.
        channels = {
            c.channel_name: list(self.queue(c.channel_name))
            for _, wait in waiting
            for c in wait.channel_conditions
        }
        claimed: dict[str, int] = {}
        earliest: float | None = None
        for record, wait in waiting:
            started = record.wait_started_at or now
            satisfied = evaluate_wait(wait, started, now, channels, claimed)
            if satisfied is None:
                due = next_timer_at(wait, started, now)
                if due is not None and (earliest is None or due < earliest):
                    earliest = due
                continue
            self.consume(satisfied.consumed)
            self.update(
                evolve(
                    record,
                    status=ExecStatus.READY,
                    condition_results=satisfied.results.SerializeToString(),
                    taken=tuple(m.message_id for m in satisfied.consumed),
                    wait=None,
                )
            )
            self.history(record.exec_id, "wait_satisfied", {"consumed": len(satisfied.consumed)})
        return earliest

    # -- executions --------------------------------------------------------------------

    def current(self, exec_id: str) -> ExecRecord:
        return self._execs.get(exec_id) or self._state.execs[exec_id]

    def update(self, record: ExecRecord) -> None:
        self._execs[record.exec_id] = record

    def staged(self) -> list[ExecRecord]:
        """The executions this transaction changes or creates."""
        return list(self._execs.values())

    def active_snapshot(self) -> list[ExecRecord]:
        seen = {**self._state.execs, **self._execs}
        return [e for e in seen.values() if e.status.is_active]

    def create(
        self,
        movement: pb.StepMovement,
        extras: MovementExtras | None,
        *,
        from_exec_id: str,
        recovery: RecoveryRecord | None = None,
        remote: str | None = None,
        not_before: float | None = None,
    ) -> ExecRecord:
        step_type = movement.step_type
        number = self.run.counters.get(step_type, 0) + 1
        self.run.counters[step_type] = number
        options = movement.step_options
        if remote is None and extras is not None and extras.remote is not None:
            remote = extras.remote.to_json()
        failure_remote = None
        if extras is not None and extras.failure_remote is not None:
            failure_remote = extras.failure_remote.to_json()
        record = ExecRecord(
            exec_id=f"{step_type}-{number}",
            step_type=step_type,
            number=number,
            input=movement.step_input.SerializeToString(),
            options=options.SerializeToString(),
            from_exec_id=from_exec_id,
            status=ExecStatus.READY if options.skip_wait_for else ExecStatus.WAIT_FOR,
            created_at=self.now,
            remote=remote,
            failure_remote=failure_remote,
            recovery=recovery,
            next_attempt_at=not_before,
        )
        self._execs[record.exec_id] = record
        self._new_execs.append(record)
        self.history(record.exec_id, "step_scheduled", {"from": from_exec_id})
        return record

    def cancel(self, records: Iterable[ExecRecord], reason: str) -> None:
        for record in records:
            if not record.status.is_active:
                continue
            self.update(evolve(record, status=ExecStatus.CANCELED, ended_at=self.now))
            self.canceled.append(record.exec_id)
            self.history(record.exec_id, "step_canceled", {"reason": reason})

    def close(self, status: RunStatus, error_type: str = "", message: str = "") -> None:
        """Close the run and cancel every execution still active."""
        self.run.status = status
        self.run.closed_at = self.now
        self.run.error_type = error_type
        self.run.error_message = message
        self.closed = True
        self.cancel(self.active_snapshot(), f"flow {status.value}")
        self.history("", "flow_closed", {"status": status.value, "error": message})

    def complete_output(self, exec_id: str, step_type: str, output: pb.Value) -> None:
        self.commit.completions.append(
            CompletionRecord(
                step_type=step_type, exec_id=exec_id, output=output.SerializeToString()
            )
        )

    def history(self, exec_id: str, event: str, detail: dict[str, Any]) -> None:
        self.commit.history.append(
            HistoryRecord(at=self.now, exec_id=exec_id, event=event, detail=detail)
        )

    @property
    def new_execs(self) -> list[ExecRecord]:
        return list(self._new_execs)

    def build(self) -> Commit:
        active = self.active_snapshot()
        self.run.active_step_types = indexed_step_types(active, self.run.active_step_search_mode)
        stored = self._state.run if self._stored else None
        # A row as stored is not written again (a commit rewrites 3 b-tree pages
        # for it, and 3 more for its active Step types).
        self.commit.run = None if self.run == stored else self.run
        self.commit.active_steps_changed = (
            stored is None
            or self.run.active_step_types != stored.active_step_types
            or self.run.started_at != stored.started_at
        )
        self.commit.executions = list(self._execs.values())
        return self.commit
