"""Running one attempt of a Step: in the host, on a pooled executor, or as a Ray task.

``AttemptRunner`` starts an attempt, watches its deadline and heartbeats, takes
its start acknowledgement and its frames (heartbeats, Stream writes), and hands
back what it produced. The driver (``_driver.RunDriver``) decides what attempts
run and commits their outcomes. Each knows the other by a small Protocol: the
driver holds its runner as :class:`Attempts`, and the runner reaches the driver
as :class:`AttemptOwner` (the run's state, its transactions and commits).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from dex.dexpb import dex_pb2 as pb

from dex_agents_ray.engine import _clock as clock
from dex_agents_ray.engine._options import RayTaskOptions, RemoteExecution, StepAttemptProgress
from dex_agents_ray.engine.run._remote import (
    ABANDONED,
    AbandonedAttempt,
    RemoteRequest,
    decode_frame,
    decode_result,
    definition_key,
    remote_step_function,
)
from dex_agents_ray.engine.run._retry import DEFAULT_METHOD_TIMEOUT
from dex_agents_ray.engine.run._state import RunState, Tx
from dex_agents_ray.engine.run._streams import StreamBuffer
from dex_agents_ray.engine.run._transactions import marks_at_dispatch, stage_start
from dex_agents_ray.engine.run._watch import AttemptOutcome, describe_failure, watch_attempt
from dex_agents_ray.engine.sdk._invoke import FlowMapper, StepResult, invoke_step
from dex_agents_ray.engine.sdk._sdk import InvocationMethod
from dex_agents_ray.engine.sdk._sdk import RegisteredFlow as _RegisteredFlow
from dex_agents_ray.engine.store._records import ExecRecord, ExecStatus, evolve
from dex_agents_ray.engine.store._store import StaleEpochError
from dex_agents_ray.errors import DexAgentsError


class AttemptPool(Protocol):
    """Where a host sends its pooled remote attempts (``actors._pool.ExecutorPool``).

    The driver runs below the actors, so it knows the pool by this method only.
    """

    def submit(
        self,
        options: RayTaskOptions,
        options_text: str,
        args: tuple[Any, ...],
        attempt_key: tuple[str, str, int],
        on_frames: Callable[[list[tuple[str, str, int, str, bytes]]], None],
    ) -> tuple[asyncio.Future[Any], Callable[[], None]]:
        """Send one attempt to an executor of its shape; returns (result, kill).

        The result raises ``AbandonedAttempt`` for an attempt the executor
        refused or cancelled.
        """
        ...


@dataclass
class FlowDefinition:
    """A registered Flow as one host process holds it."""

    flow_type: str
    flow_hash: str
    blob: bytes
    flow: _RegisteredFlow
    mapper: FlowMapper
    blob_ref: Any = None
    """The blob in Ray's object store, put once and passed to remote tasks."""
    blob_key: str = ""
    """The blob's content hash: executors cache loaded definitions by it."""


@dataclass
class Live:
    """In-memory bookkeeping for one running attempt."""

    attempt: int
    last_beat: float
    kill: Callable[[], None]
    first_attempt_at: float | None = None
    """What the attempt's request said ``first_attempt_at`` is (recorded at its start)."""
    acked: asyncio.Future[None] | None = None
    """A remote attempt's start acknowledgement; its timeouts count from it."""
    dispatch: int | None = None
    """The number a pooled executor knows this attempt's call by (see ``_DISPATCHES``)."""
    outcome: asyncio.Future[Any] | None = None
    """The attempt's result; done once it finished, before the watch sees it."""
    exact: bool = False
    """The Step's last attempt: its heartbeat values are written at once (see
    ``HEARTBEAT_LINGER``)."""


HEARTBEAT_LINGER = 0.025
"""Seconds a retryable attempt's new heartbeat value waits before it is written.

An attempt that ends sooner never needs it written: a success makes it moot, and
a failure's commit carries it to the next attempt. The values of the run's
attempts that wait together go in one commit. A host that dies meanwhile loses
at most this much of an attempt's heartbeat values, as it loses the start of an
attempt that starts early (``ExecutorPoolOptions.early_ack_delay``); a Step's
last attempt, whose start is recorded exactly, has its values written at once.
"""

_DISPATCHES = itertools.count(1)
"""Numbers for calls to pooled executors, one per dispatch, never reused in a host
process. An executor names a call by it (with the run and the execution) in its
acknowledgement, frames, early results and orphan checks, so no other call of
the execution passes for the call the host waits for now: attempt numbers do
not tell them apart (a remote Step's ``wait_for`` call and its first
``execute`` call are both attempt 1)."""


class AttemptOwner(Protocol):
    """What an ``AttemptRunner`` reads and calls of the run's driver
    (``_driver.RunDriver``): the run's state and the way to commit to it.

    Everything runs on the host's event loop; ``commit`` is called with
    ``commit_lock`` held, as the driver's own commits are. For example::

        async with owner.commit_lock:
            tx = owner.tx()
            tx.update(evolve(tx.current(exec_id), heartbeat=checkpoint))
            await owner.commit(tx)
    """

    @property
    def flow_id(self) -> str: ...

    @property
    def definition(self) -> FlowDefinition | None: ...

    @property
    def state(self) -> RunState: ...

    @property
    def commit_lock(self) -> asyncio.Lock: ...

    @property
    def streams(self) -> StreamBuffer: ...

    def tx(self) -> Tx:
        """A new transaction on the run's state."""
        ...

    async def commit(self, tx: Tx) -> Any:
        """Apply ``tx`` durably, then in memory; the caller holds ``commit_lock``."""
        ...

    def background(self, coro: Any) -> None:
        """Run ``coro`` as a task the driver stops with the run."""
        ...

    def is_current(self, exec_id: str, status: ExecStatus, attempt: int, *, wait: bool) -> bool:
        """Whether ``attempt`` of ``exec_id`` is the one its status expects now."""
        ...


class Attempts(Protocol):
    """The attempts of one run's Steps as its driver knows them (``AttemptRunner``).

    The first four are the driver's; the rest are the calls of the run's host
    (``actors._host.FlowHost``) and its remote attempts, reached as
    ``driver.attempts``. All are called on the host's event loop; ``run`` returns
    once the attempt ended (its result, failure or abandonment), and ``kill``
    and ``kill_all`` do not wait for it. For example::

        outcome = await driver.attempts.run(record, 1, InvocationMethod.EXECUTE, options)
    """

    async def run(
        self,
        record: ExecRecord,
        attempt: int,
        method: InvocationMethod,
        options: pb.StepOptions,
        *,
        early_start: bool = False,
    ) -> AttemptOutcome:
        """Run one attempt where its Step runs and watch it."""
        ...

    def kill(self, exec_id: str) -> None:
        """Forget ``exec_id``'s running attempt, if any, and kill it."""
        ...

    def kill_all(self) -> None:
        """Kill every running attempt (the driver stops)."""
        ...

    @property
    def running(self) -> bool:
        """Whether an attempt is running."""
        ...

    @property
    def finishing(self) -> bool:
        """Whether an attempt has finished that its driver has not taken yet."""
        ...

    def take_heartbeat(self, exec_id: str, attempt: int) -> tuple[bytes | None] | None:
        """The heartbeat value ``attempt`` of ``exec_id`` sent that is not written
        yet, as a 1-tuple (the value may be ``None``), now the caller's to write;
        ``None`` when there is none."""
        ...

    async def ack_remote_start(self, exec_id: str, attempt: int) -> bool: ...

    async def ack_dispatches(self, calls: list[tuple[str, int]]) -> list[bool]: ...

    def dispatch_active(self, exec_id: str, dispatch: int) -> bool: ...

    def on_frame(
        self, exec_id: str, attempt: int, frame: pb.StepMethodHeartbeat | pb.StepStreamWrite
    ) -> None: ...

    def on_dispatch_frame(
        self, exec_id: str, dispatch: int, frame: pb.StepMethodHeartbeat | pb.StepStreamWrite
    ) -> None: ...


class AttemptRunner:
    """Attempts of one run's Steps, for its driver (see the module docstring).

    It reaches the driver only through ``owner`` (:class:`AttemptOwner`).
    """

    def __init__(
        self,
        owner: AttemptOwner,
        *,
        pool: AttemptPool | None = None,
        host_handle: Any = None,
        host_name: str = "",
    ) -> None:
        self._owner = owner
        self._pool = pool
        self._host_handle = host_handle
        self._host_name = host_name
        self._live: dict[str, Live] = {}
        self._beats: dict[str, tuple[int, bytes | None]] = {}
        """Heartbeat values of retryable attempts waiting to be written."""
        self._beat_timer: asyncio.TimerHandle | None = None

    @property
    def running(self) -> bool:
        return bool(self._live)

    @property
    def finishing(self) -> bool:
        return any(live.outcome is not None and live.outcome.done() for live in self._live.values())

    def kill(self, exec_id: str) -> None:
        live = self._live.pop(exec_id, None)
        if live is not None:
            live.kill()

    def kill_all(self) -> None:
        for live in list(self._live.values()):
            live.kill()
        if self._beat_timer is not None:
            self._beat_timer.cancel()
            self._beat_timer = None
        self._beats.clear()

    def take_heartbeat(self, exec_id: str, attempt: int) -> tuple[bytes | None] | None:
        pending = self._beats.get(exec_id)
        if pending is None or pending[0] != attempt:
            return None
        del self._beats[exec_id]
        return (pending[1],)

    async def ack_remote_start(self, exec_id: str, attempt: int) -> bool:
        """A remote task is about to run user code: record it, or refuse."""
        return (await self.ack_remote_starts([(exec_id, attempt)]))[0]

    async def ack_remote_starts(self, attempts: list[tuple[str, int]]) -> list[bool]:
        """Remote attempts about to run user code: record the starts not recorded
        at dispatch (in one commit), or refuse each that is superseded."""
        return await self._ack_starts([(exec_id, attempt, None) for exec_id, attempt in attempts])

    async def ack_dispatches(self, calls: list[tuple[str, int]]) -> list[bool]:
        """:meth:`ack_remote_starts` for pooled executors' calls, named by
        (execution ID, dispatch number): a call is accepted only while it is the
        one the host waits for."""
        return await self._ack_starts([(exec_id, None, dispatch) for exec_id, dispatch in calls])

    async def _ack_starts(self, items: list[tuple[str, int | None, int | None]]) -> list[bool]:
        """Each item names its attempt by number or by dispatch number."""
        async with self._owner.commit_lock:
            answers: list[bool] = []
            accepted: list[Live] = []
            tx = self._owner.tx()
            for exec_id, number, dispatch in items:
                live = self._live.get(exec_id)
                record = self._owner.state.execs.get(exec_id)
                if dispatch is not None:
                    matches = live is not None and live.dispatch == dispatch
                else:
                    matches = live is not None and live.attempt == number
                ok = matches and record is not None
                attempt = live.attempt if live is not None else 0
                if ok and record is not None and record.status is ExecStatus.WAIT_FOR:
                    ok = self._owner.is_current(exec_id, ExecStatus.WAIT_FOR, attempt, wait=True)
                elif ok and record is not None:
                    ok = self._owner.is_current(exec_id, ExecStatus.READY, attempt, wait=False)
                    if ok and live is not None and record.attempts_started < attempt:
                        stage_start(tx, exec_id, attempt, live.first_attempt_at)
                if ok and live is not None:
                    accepted.append(live)
                answers.append(ok)
            if tx.commit.history:
                await self._owner.commit(tx)
            for live in accepted:
                _acknowledged(live)
            return answers

    async def run(
        self,
        record: ExecRecord,
        attempt: int,
        method: InvocationMethod,
        options: pb.StepOptions,
        *,
        early_start: bool = False,
    ) -> AttemptOutcome:
        """Run one attempt where its Step runs and watch it.

        ``early_start`` (a remote ``execute`` attempt whose start was recorded at
        dispatch): the executor runs user code as it sends the start
        acknowledgement instead of after the host's answer, and a refusal cancels
        it; any reply from the executor then counts as acknowledged (see
        ``StepExecutor`` in ``engine/actors/_executor.py``).
        """
        future, live, decode = self._start_attempt(record, attempt, method, options, early_start)
        live.outcome = future
        live.exact = not marks_at_dispatch(record, attempt, options)
        exec_id = record.exec_id
        self._live[exec_id] = live
        raw_timeout = (
            options.wait_for_timeout_seconds
            if method is InvocationMethod.WAIT_FOR
            else options.execute_timeout_seconds
        )
        try:
            outcome = await watch_attempt(
                future,
                timeout=float(raw_timeout or DEFAULT_METHOD_TIMEOUT),
                heartbeat_timeout=float(options.heartbeat_timeout_seconds) or None,
                last_beat=lambda: live.last_beat,
                kill=live.kill,
                decode=decode,
                acked=live.acked,
            )
        except (_Abandoned, AbandonedAttempt):
            outcome = AttemptOutcome(error_type="AttemptAbandoned", detail="superseded attempt")
        except Exception as error:  # a result the engine cannot decode fails the attempt
            outcome = describe_failure(error)
        finally:
            if self._live.get(exec_id) is live:
                del self._live[exec_id]
        if live.acked is not None and not live.acked.done():
            outcome.acknowledged = False
        return outcome

    def _start_attempt(
        self,
        record: ExecRecord,
        attempt: int,
        method: InvocationMethod,
        options: pb.StepOptions,
        early_start: bool,
    ) -> tuple[asyncio.Future[Any], Live, Callable[[Any], StepResult]]:
        """Start one attempt (see :meth:`run`): its result, its bookkeeping,
        and how to read its result."""
        definition = self._owner.definition
        assert definition is not None
        is_wait = method is InvocationMethod.WAIT_FOR
        # A remote attempt records its start later, at its acknowledgement: fix
        # first_attempt_at now so the request and the record agree.
        first_attempt_at = record.first_attempt_at or float(int(clock.now()))
        local = record.remote is None
        request = (
            self._owner.state.wait_for_request(record, attempt, attributes=False)
            if is_wait
            else self._owner.state.execute_request(
                evolve(record, first_attempt_at=first_attempt_at), attempt, attributes=False
            )
        )
        loaded_maps = (
            options.wait_for_load_attribute_map_instances
            if is_wait
            else options.execute_load_attribute_map_instances
        )
        progress = (
            StepAttemptProgress(record.recovery.progress)
            if record.recovery is not None
            else StepAttemptProgress.UNSPECIFIED
        )
        loop = asyncio.get_running_loop()
        exec_id = record.exec_id
        if local:
            # A local attempt reads the Attributes from the same snapshot, lazily; a
            # remote one gets them in its request.
            future = asyncio.ensure_future(
                invoke_step(
                    definition.mapper,
                    definition.flow,
                    method,
                    request,
                    attempt_progress=progress,
                    is_active=lambda: self.attempt_active(exec_id, attempt),
                    sink=lambda frame: self.on_frame(exec_id, attempt, frame),
                    attribute_values=self._owner.state.attribute_values(loaded_maps),
                )
            )
            return future, Live(attempt, loop.time(), lambda: _cancel(future)), _identity
        payload = (request.SerializeToString(), self._owner.state.attribute_snapshot(loaded_maps))
        remote, kill, dispatch = self._submit_remote(
            record, attempt, method, payload, progress, early_start
        )
        live = Live(attempt, loop.time(), kill, first_attempt_at, loop.create_future(), dispatch)
        if early_start:
            # Registered before the watch's own callback: a reply marks the
            # start before the outcome is looked at.
            remote.add_done_callback(lambda done: _replied(done, live))
        return remote, live, _decode_remote

    def _submit_remote(
        self,
        record: ExecRecord,
        attempt: int,
        method: InvocationMethod,
        payload: RemoteRequest,
        progress: StepAttemptProgress,
        early_start: bool = False,
    ) -> tuple[asyncio.Future[Any], Callable[[], None], int | None]:
        """Send an attempt's request (see ``RemoteRequest``) to Ray; returns its
        result, how to kill it, and its dispatch number (pooled executors only)."""
        import ray

        definition = self._owner.definition
        assert definition is not None and record.remote is not None
        if definition.blob_ref is None:
            definition.blob_ref = ray.put(definition.blob)
            definition.blob_key = definition_key(definition.blob)
        ray_options = _task_options(record.remote)
        method_name = "wait_for" if method is InvocationMethod.WAIT_FOR else "execute"
        if ray_options.execution is RemoteExecution.POOL and self._pool is not None:
            dispatch = next(_DISPATCHES)
            future, kill_call = self._pool.submit(
                ray_options,
                record.remote,
                (
                    definition.blob_key,
                    [definition.blob_ref],
                    method_name,
                    payload,
                    progress.value,
                    self._host_name,
                    self._owner.flow_id,
                    record.exec_id,
                    dispatch,
                    early_start,
                ),
                (self._owner.flow_id, record.exec_id, dispatch),
                self._on_frames,
            )
            return future, kill_call, dispatch
        ref = (
            remote_step_function()
            .options(**ray_options.ray_options())
            .remote(
                definition.blob_ref,
                method_name,
                payload,
                progress.value,
                self._host_handle,
                self._owner.flow_id,
                record.exec_id,
                attempt,
            )
        )

        def kill() -> None:
            ray.cancel(ref, force=True)

        return asyncio.ensure_future(_await_ref(ref)), kill, None

    def attempt_active(self, exec_id: str, attempt: int) -> bool:
        """Whether ``attempt`` of ``exec_id`` is running for this driver now."""
        live = self._live.get(exec_id)
        return live is not None and live.attempt == attempt and self._owner.state.is_running

    def dispatch_active(self, exec_id: str, dispatch: int) -> bool:
        """Whether the pooled executor's call ``dispatch`` of ``exec_id`` is the one
        running for this driver now."""
        return self._by_dispatch(exec_id, dispatch) is not None and self._owner.state.is_running

    def _by_dispatch(self, exec_id: str, dispatch: int) -> Live | None:
        live = self._live.get(exec_id)
        return live if live is not None and live.dispatch == dispatch else None

    def _on_frames(self, frames: list[tuple[str, str, int, str, bytes]]) -> None:
        """Frames that came back with a pooled executor's reply."""
        for _, exec_id, dispatch, kind, payload in frames:
            self.on_dispatch_frame(exec_id, dispatch, decode_frame(kind, payload))

    def on_dispatch_frame(
        self, exec_id: str, dispatch: int, frame: pb.StepMethodHeartbeat | pb.StepStreamWrite
    ) -> None:
        """A frame from the pooled executor's call ``dispatch``; one of another call
        of the execution (its ``wait_for`` call, say) is dropped."""
        live = self._by_dispatch(exec_id, dispatch)
        if live is not None:
            self.on_frame(exec_id, live.attempt, frame)

    def on_frame(
        self, exec_id: str, attempt: int, frame: pb.StepMethodHeartbeat | pb.StepStreamWrite
    ) -> None:
        """A heartbeat or Stream write from a running attempt (local or remote)."""
        live = self._live.get(exec_id)
        if live is None or live.attempt != attempt:
            return
        live.last_beat = asyncio.get_running_loop().time()
        if isinstance(frame, pb.StepStreamWrite):
            self._owner.streams.write(self._owner.flow_id, frame.stream_name, f"#{exec_id}", frame)
            return
        checkpoint = frame.value.SerializeToString() if frame.HasField("value") else None
        pending = self._beats.get(exec_id)
        stored = pending[1] if pending is not None else self._stored_heartbeat(exec_id)
        if stored == checkpoint:
            return  # nothing new to store (most beats: liveness only)
        if live.exact:
            self._beats.pop(exec_id, None)
            self._owner.background(self._persist_heartbeats({exec_id: checkpoint}))
            return
        self._beats[exec_id] = (attempt, checkpoint)
        if self._beat_timer is None:
            loop = asyncio.get_running_loop()
            self._beat_timer = loop.call_later(HEARTBEAT_LINGER, self._flush_heartbeats)

    def _stored_heartbeat(self, exec_id: str) -> bytes | None:
        record = self._owner.state.execs.get(exec_id)
        return record.heartbeat if record is not None else None

    def _flush_heartbeats(self) -> None:
        """Write the heartbeat values that waited ``HEARTBEAT_LINGER`` (one commit)."""
        self._beat_timer = None
        beats = {exec_id: checkpoint for exec_id, (_, checkpoint) in self._beats.items()}
        self._beats.clear()
        if beats:
            self._owner.background(self._persist_heartbeats(beats))

    async def _persist_heartbeats(self, beats: dict[str, bytes | None]) -> None:
        async with self._owner.commit_lock:
            tx = self._owner.tx()
            for exec_id, checkpoint in beats.items():
                record = self._owner.state.execs.get(exec_id)
                if record is None or not record.status.is_active:
                    continue  # it ended meanwhile: its value is moot
                if record.heartbeat != checkpoint:
                    tx.update(evolve(tx.current(exec_id), heartbeat=checkpoint))
            if not tx.staged():
                return
            try:
                await self._owner.commit(tx)
            except StaleEpochError:
                return


class _Abandoned(DexAgentsError):
    """A remote task found its attempt superseded and ran nothing."""


@functools.lru_cache(maxsize=1024)
def _task_options(text: str) -> RayTaskOptions:
    """A stored ``RayTaskOptions`` (decoded once per distinct text)."""
    return RayTaskOptions.from_json(text)


def _acknowledged(live: Live) -> None:
    live.last_beat = asyncio.get_running_loop().time()
    if live.acked is not None and not live.acked.done():
        live.acked.set_result(None)


def _replied(future: asyncio.Future[Any], live: Live) -> None:
    """An early-start attempt's executor answered: unless it refused the attempt or
    died (no reply), user code ran, acknowledged or not."""
    if future.cancelled():
        return
    error = future.exception()
    if error is None or not (isinstance(error, AbandonedAttempt) or _no_reply(error)):
        _acknowledged(live)


def _no_reply(error: BaseException) -> bool:
    """Ray's own failure of the call (the executor died or was never reached),
    not an error its code raised."""
    import ray.exceptions

    return isinstance(error, ray.exceptions.RayError) and not isinstance(
        error, ray.exceptions.RayTaskError
    )


def _cancel(future: asyncio.Future[Any]) -> None:
    future.cancel()


def _identity(value: Any) -> StepResult:
    return value  # type: ignore[no-any-return]


def _decode_remote(value: Any) -> StepResult:
    if value == ABANDONED:
        raise _Abandoned
    return decode_result(value)


async def _await_ref(ref: Any) -> Any:
    return await ref
