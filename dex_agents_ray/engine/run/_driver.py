"""Drives one flow run inside its host: Steps, waits, timers, RPCs, commits.

Every change to the run goes through ``commit`` under the run's commit lock:
the store applies it in one transaction fenced by the ownership epoch, and
only then does memory change. One kind of commit is written in the background
instead: an effect-free Step's completion that moves only to in-host Steps
(see ``_effect_free``). Memory changes at once, the next Steps start, and the
run's next commit, and every attempt that must start exactly, waits for the
write first. Each active Step execution has one asyncio task that moves it
through ``wait_for`` → waiting → ``execute`` attempts; running one attempt is
the part of the driver's ``attempts`` (``_attempts.AttemptRunner``), and what
each outcome changes is built by ``_transactions``' pure functions.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from dex.dexpb import dex_pb2 as pb

from dex_agents_ray.engine import _clock as clock
from dex_agents_ray.engine._errors import StoreUnavailableError
from dex_agents_ray.engine._metrics import record_step
from dex_agents_ray.engine._options import RetentionOptions
from dex_agents_ray.engine.run._attempts import (
    AttemptPool,
    AttemptRunner,
    Attempts,
    FlowDefinition,
)
from dex_agents_ray.engine.run._decisions import LockTable
from dex_agents_ray.engine.run._deferred import DeferredCommits, fail
from dex_agents_ray.engine.run._fusion import fuse_waits
from dex_agents_ray.engine.run._state import RunState, Tx
from dex_agents_ray.engine.run._streams import StreamBuffer
from dex_agents_ray.engine.run._transactions import (
    deferrable,
    marks_at_dispatch,
    may_satisfy_waits,
    premark,
    stage_execute,
    stage_execute_failed,
    stage_start,
    stage_wait_for,
    stage_wait_for_failed,
    still_ready,
)
from dex_agents_ray.engine.run._waits import next_timer_at, timer_fire_times
from dex_agents_ray.engine.run._watch import AttemptOutcome
from dex_agents_ray.engine.sdk._invoke import StepResult
from dex_agents_ray.engine.sdk._sdk import InvocationMethod
from dex_agents_ray.engine.store._records import (
    Commit,
    ExecRecord,
    ExecStatus,
    LoadedRun,
    PruneRequest,
    evolve,
    merge_commits,
)
from dex_agents_ray.engine.store._store import RunStore, StaleEpochError

logger = logging.getLogger("dex_agents_ray.engine")


class RunDriver:
    """Owns one run inside a host while the host holds its ownership epoch."""

    def __init__(
        self,
        *,
        store: RunStore,
        flow_id: str,
        epoch: int,
        definition: FlowDefinition | None,
        host_handle: Any,
        streams: StreamBuffer,
        on_stale: Callable[[], None] = lambda: None,
        pool: AttemptPool | None = None,
        host_name: str = "",
        on_store_down: Callable[[], None] = lambda: None,
        retention: RetentionOptions | None = None,
    ) -> None:
        self.store = store
        self.flow_id = flow_id
        self.epoch = epoch
        self.definition = definition
        self.state = RunState()
        self.locks = LockTable()
        self.commit_lock = asyncio.Lock()
        self.stale = False
        self._on_store_down = on_store_down
        self.streams = streams
        self._retention = retention or RetentionOptions()
        self._commits = 0
        self._on_stale = on_stale
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self.attempts: Attempts = AttemptRunner(
            self, pool=pool, host_handle=host_handle, host_name=host_name
        )
        """The run's running attempts (its host's acknowledgements and frames go there)."""
        self._changed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._closed: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._evaluating: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[Any]] = set()
        self.last_activity = time.monotonic()
        """When a commit, a client call or a wait last touched the run."""
        self._premarked: set[str] = set()
        """Executions whose attempt-1 start this incarnation recorded before running it."""
        self._finished: list[_Finished] = []
        """Successful attempts waiting for their commit (see ``_commit_finished``)."""
        self._deferred = DeferredCommits(
            lambda built: self._store_commit(built, applied=True), self._deferred_written
        )
        """Effect-free completions applied in memory, written later (see ``commit``)."""
        self.waiters = 0
        """Client calls in progress (starts, RPCs, stops, ``wait_closed`` long polls)."""

    # -- lifecycle ---------------------------------------------------------------------

    def load(self, loaded: LoadedRun) -> None:
        self.state.load(
            loaded.run, loaded.attributes, loaded.messages, loaded.executions, loaded.completions
        )

    def start(self) -> None:
        """Resume every active execution and look at the waits once."""
        for record in self.state.active_execs():
            self._spawn(record.exec_id)
        self.schedule_evaluation()

    async def stop(self) -> None:
        """Stop every task of this run in this process (the store keeps the run)."""
        _settle(self._closed)
        if self._timer is not None:
            self._timer.cancel()
        self.attempts.kill_all()
        # A held deferred commit is written, not dropped (a stale driver's is
        # refused by the store): its write goes on while the rest is cancelled.
        writes = asyncio.ensure_future(self._deferred.stop())
        tasks = [*self._tasks.values(), *self._background]
        if self._evaluating is not None:
            tasks.append(self._evaluating)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, writes, return_exceptions=True)

    def changed(self) -> asyncio.Future[None]:
        """A future resolved at the next applied commit."""
        return self._changed

    def closed(self) -> asyncio.Future[None]:
        """A future resolved once the run is no longer running here (it closed,
        or this driver stopped)."""
        if self._closed is None:
            self._closed = asyncio.get_running_loop().create_future()
            if not self.state.is_running:
                self._closed.set_result(None)
        return self._closed

    def touch(self) -> None:
        self.last_activity = time.monotonic()

    def passivation(self, now: float, threshold: float) -> tuple[bool, float | None]:
        """Whether the run may leave memory now, and when a timer needs it back.

        It may when nothing runs (every active Step only waits, no attempt, lock,
        evaluation or background write is in flight, no client call is in
        progress) and its next timer is further than ``threshold`` seconds away.
        """
        if self.state.run is None or self.stale:
            return False, None
        if not self.state.is_running:
            return self.waiters == 0, None
        busy = (
            self.attempts.running
            or self.waiters
            or self.locks.busy
            or any(not task.done() for task in self._background)
            or self.writing
            or (self._evaluating is not None and not self._evaluating.done())
        )
        if busy:
            return False, None
        earliest: float | None = None
        for record in self.state.active_execs():
            if record.status is not ExecStatus.WAITING or record.wait is None:
                return False, None
            wait = pb.WaitingCondition.FromString(record.wait)
            started = record.wait_started_at or now
            if any(at <= now for at in timer_fire_times(wait, started)):
                return False, None  # a due timer is about to be evaluated
            due = next_timer_at(wait, started, now)
            if due is not None and (earliest is None or due < earliest):
                earliest = due
        if earliest is not None and earliest - now < threshold:
            return False, None
        return True, earliest

    @property
    def busy(self) -> bool:
        """Whether the run is about to write more Stream records on its own (a long
        poll gathers them into one answer): a deferred commit's write in flight, or
        a Step whose ``execute`` is pending or running. A Step that only evaluates
        its ``wait_for`` is not: the turn's last events answer without waiting for
        the next Step's wait to be stored."""
        if self.writing:
            return True
        return self.state.is_running and any(
            record.status is ExecStatus.READY for record in self.state.execs.values()
        )

    @property
    def committing(self) -> bool:
        """Whether a commit will take the run's queued Stream writes: an attempt
        has finished and its result is on its way to its commit, a commit is in
        progress, or a deferred commit is held or being written. Its Stream
        writes are then not appended alone (see ``_streams``): a Step's writes
        ride in its own result commit, never behind it."""
        return (
            bool(self._finished)
            or self.commit_lock.locked()
            or self.writing
            or self.attempts.finishing
        )

    def _notify(self) -> None:
        self.touch()
        self.streams.stir(self.flow_id)
        future, self._changed = self._changed, asyncio.get_running_loop().create_future()
        if not future.done():
            future.set_result(None)
        if not self.state.is_running:
            _settle(self._closed)

    def _spawn(self, exec_id: str) -> None:
        if exec_id not in self._tasks:
            task = asyncio.create_task(self._drive(exec_id), name=f"{self.flow_id}/{exec_id}")
            self._tasks[exec_id] = task

    def background(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- commits -----------------------------------------------------------------------

    def tx(self) -> Tx:
        return Tx(self.state, self.epoch, clock.now())

    @property
    def writing(self) -> bool:
        """Whether a deferred commit is held or its write is still in flight."""
        return self._deferred.writing

    async def settle_deferred(self) -> None:
        """Wait until the last deferred commit is durable; raise what its write raised."""
        await self._deferred.settle()

    async def durable(self) -> None:
        """Wait until every commit applied so far is durable, without hurrying a
        held deferred commit (the run's next commit or its linger writes it);
        raise what its write raised."""
        await self._deferred.durable()

    async def commit(
        self, tx: Tx | Commit, *, replace_run: bool = False, deferred: bool = False
    ) -> Commit:
        """Apply ``tx`` durably, then in memory; the caller holds ``commit_lock``.

        Waits that ``tx``'s own changes satisfy (a published message, a Step
        that starts waiting on messages already there) become ready in ``tx``
        itself, and so do the starts of their first attempts: one commit, not three.

        ``deferred``: apply ``tx`` in memory now and write it in the background
        (only for the commits ``_deferrable`` accepts) when it starts an in-host
        Step. Every commit first waits for the previous deferred one, so the
        store sees the run's commits in order, and a failed deferred write fails
        every later commit of this driver (the host reloads the run from the store).
        """
        if self._deferred.held is None or replace_run:
            await self.settle_deferred()
        if isinstance(tx, Tx) and may_satisfy_waits(tx):
            tx.satisfy_waits(tx.now)
        premarked = premark(tx) if isinstance(tx, Tx) else []
        built = tx.build() if isinstance(tx, Tx) else tx
        # Stream writes queued meanwhile ride in this commit's transaction.
        built.stream_appends = self.streams.take(self.flow_id) + built.stream_appends
        self._commits += 1
        if self._commits % self._retention.prune_every_commits == 0 and built.prune is None:
            built.prune = PruneRequest(
                keep_finished_executions=self._retention.keep_finished_executions,
                keep_rpc_requests=self._retention.keep_rpc_requests,
            )
        held = self._deferred.held
        write = built
        if held is not None:
            merged = merge_commits(held, built)
            if merged is None:
                await self.settle_deferred()
                held = None
            else:
                write = merged
        # A deferred commit that starts nothing in this host has nothing to let
        # run early: it is written at once.
        if (
            deferred
            and isinstance(tx, Tx)
            and not replace_run
            and not tx.closed
            and (premarked or any(r.remote is None for r in tx.new_execs))
        ):
            self.state.apply(built)
            self._premarked.update(premarked)
            if held is None:
                self._deferred.hold(built)
            else:
                self._deferred.join(write)  # its linger goes on
            self._after(tx)
            return built
        if held is None:
            offsets = await self._store_commit(built, replace_run=replace_run)
        else:
            # The held deferred commit rides in this one's transaction.
            done = self._deferred.take()
            try:
                offsets = await self._store_commit(write, applied=True)
            except BaseException as error:
                fail(done, error)
                raise
            head = len(held.stream_appends)
            if held.stream_appends:
                self.streams.written(self.flow_id, held.stream_appends, offsets[:head])
            offsets = offsets[head:]
            if not done.done():
                done.set_result(None)
        self.state.apply(built, replace_run=replace_run)
        if built.stream_appends:
            self.streams.written(self.flow_id, built.stream_appends, offsets)
        self._premarked.update(premarked)
        if isinstance(tx, Tx):
            self._after(tx)
        self._notify()
        return built

    async def _store_commit(
        self, built: Commit, *, replace_run: bool = False, applied: bool = False
    ) -> list[int]:
        """Write ``built``; a refused or failed write makes this driver stale.
        ``applied``: memory already holds ``built`` (a deferred commit), so any
        failure, not only the store's own, has the host reload the run."""
        try:
            # The run's earlier writes on their way alone land first.
            await self.streams.appended(self.flow_id)
            return await self.store.commit(built, replace_run=replace_run)
        except StaleEpochError:
            self.stale = True
            self._on_stale()
            raise
        except StoreUnavailableError:
            # Memory may now be ahead of the store: the host reloads the run.
            self.stale = True
            self._on_store_down()
            raise
        except Exception:
            if not applied:
                raise
            logger.exception("run %s: a deferred commit failed; its host reloads it", self.flow_id)
            self.stale = True
            self._on_store_down()
            raise

    def _deferred_written(self, built: Commit, offsets: list[int]) -> None:
        """A deferred commit written on its own is durable."""
        if built.stream_appends:
            self.streams.written(self.flow_id, built.stream_appends, offsets)
        self._notify()

    def _after(self, tx: Tx) -> None:
        for exec_id in tx.canceled:
            self.attempts.kill(exec_id)
            task = self._tasks.pop(exec_id, None)
            if task is not None and task is not asyncio.current_task():
                task.cancel()
        for record in tx.new_execs:
            if record.status.is_active:
                self._spawn(record.exec_id)
        if tx.commit.message_appends or any(
            e.status is ExecStatus.WAITING for e in tx.commit.executions
        ):
            self.schedule_evaluation()

    # -- driving one execution ---------------------------------------------------------

    async def _drive(self, exec_id: str) -> None:
        try:
            while True:
                record = self.state.execs.get(exec_id)
                if record is None or not record.status.is_active or not self.state.is_running:
                    return
                if record.status is ExecStatus.WAIT_FOR:
                    await self._run_wait_for(record)
                elif record.status is ExecStatus.WAITING:
                    # Shielded: cancelling this task must not cancel the shared future.
                    await asyncio.shield(self.changed())
                else:
                    await self._run_execute(record)
        except StaleEpochError:
            logger.warning("run %s: superseded by a newer incarnation; stopping", self.flow_id)
        except StoreUnavailableError as error:
            logger.warning("run %s: %s; its host reloads it from the store", self.flow_id, error)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("run %s: internal error driving %s", self.flow_id, exec_id)
        finally:
            if self._tasks.get(exec_id) is asyncio.current_task():
                del self._tasks[exec_id]

    def is_current(self, exec_id: str, status: ExecStatus, attempt: int, *, wait: bool) -> bool:
        record = self.state.execs.get(exec_id)
        if record is None or record.status is not status or not self.state.is_running:
            return False
        done = record.wait_for_failures if wait else record.attempts_failed
        return done + 1 == attempt

    async def _run_wait_for(self, record: ExecRecord) -> None:
        await _sleep_until(record.next_attempt_at)
        options = pb.StepOptions.FromString(record.options)
        attempt = record.wait_for_failures + 1
        keys = list(options.wait_for_lock_attribute_keys)
        await self.locks.acquire(keys, record.exec_id)
        try:
            await self.settle_deferred()
            outcome = await self.attempts.run(record, attempt, InvocationMethod.WAIT_FOR, options)
            async with self.commit_lock:
                if not self.is_current(record.exec_id, ExecStatus.WAIT_FOR, attempt, wait=True):
                    return
                tx = self.tx()
                if outcome.result is not None and outcome.result.wait_for is not None:
                    stage_wait_for(tx, record.exec_id, outcome.result.wait_for)
                else:
                    stage_wait_for_failed(tx, record.exec_id, options, outcome)
                await self.commit(tx)
        finally:
            self.locks.release(keys, record.exec_id)

    async def _run_execute(self, record: ExecRecord) -> None:
        options = pb.StepOptions.FromString(record.options)
        premarked = record.exec_id in self._premarked
        self._premarked.discard(record.exec_id)
        if record.attempts_started > record.attempts_failed and not premarked:
            # An attempt had started when the previous incarnation of the host died.
            async with self.commit_lock:
                if record.exec_id not in self.state.execs or not self.state.is_running:
                    return
                outcome = AttemptOutcome(
                    error_type="HostDiedError",
                    detail="the host running this attempt stopped before it finished",
                    infrastructure=True,
                )
                await self._execute_failed(
                    record.exec_id, record.attempts_started, options, outcome
                )
            return
        await _sleep_until(record.next_attempt_at)
        attempt = record.attempts_failed + 1
        started_before = 0 if premarked else record.attempts_started
        keys = list(options.execute_lock_attribute_keys)
        await self.locks.acquire(keys, record.exec_id)
        try:
            mark = record.remote is None or marks_at_dispatch(record, attempt, options)
            if mark and not premarked:
                async with self.commit_lock:
                    if not self.is_current(record.exec_id, ExecStatus.READY, attempt, wait=False):
                        return
                    tx = self.tx()
                    stage_start(tx, record.exec_id, attempt, None)
                    await self.commit(tx)
            current = self.state.execs.get(record.exec_id)
            if current is None:
                return  # canceled while its start was being recorded
            if record.remote is not None or not marks_at_dispatch(record, attempt, options):
                # A dispatch, or a last attempt: its recorded start must be durable.
                await self.settle_deferred()
            outcome = await self.attempts.run(
                current,
                attempt,
                InvocationMethod.EXECUTE,
                options,
                early_start=record.remote is not None and mark,
            )
            if outcome.result is not None and outcome.result.execute is not None:
                await self._commit_finished(_Finished(record.exec_id, attempt, outcome.result))
                return
            async with self.commit_lock:
                if not self.is_current(record.exec_id, ExecStatus.READY, attempt, wait=False):
                    return
                if not outcome.acknowledged:
                    # It never reached user code: undo a start marked at dispatch.
                    await self._execute_failed(
                        record.exec_id, attempt, options, outcome, unstarted=started_before
                    )
                else:
                    await self._execute_failed(record.exec_id, attempt, options, outcome)
        finally:
            self.locks.release(keys, record.exec_id)

    async def _commit_finished(self, finished: _Finished) -> None:
        """Commit a successful ``execute`` attempt. Attempts of this run that finish
        at the same moment (a fan-out's results coming back in one batch) commit in
        one transaction: the first to take the commit lock commits every one queued,
        each as its own commit would have (one whose execution stopped being current
        meanwhile, or was cancelled by an earlier one in the batch, is left out)."""
        self._finished.append(finished)
        try:
            await asyncio.sleep(0)  # the others that finished with it queue theirs
            await self.commit_lock.acquire()
        except asyncio.CancelledError:  # as before: a cancelled attempt commits nothing
            if finished in self._finished:
                self._finished.remove(finished)
            raise
        try:
            if finished.done:
                if finished.error is not None:
                    raise finished.error
                return
            batch, self._finished = self._finished, []
            staged = []
            try:
                tx = self.tx()
                for item in batch:
                    if self.is_current(
                        item.exec_id, ExecStatus.READY, item.attempt, wait=False
                    ) and still_ready(tx, item.exec_id):
                        assert self.definition is not None
                        decode = _reason_decoder(self.definition)
                        stage_execute(tx, item.exec_id, item.result, decode)
                        staged.append(item)
                if staged:
                    assert self.definition is not None
                    # In the background only for in-host effect-free Steps (see
                    # ``_transactions.deferrable``).
                    later = deferrable(
                        tx, [item.exec_id for item in staged], self.definition.flow.steps
                    )
                    # The waits of the effect-free Steps it creates ride along.
                    fuse_waits(tx, self.state, self.definition)
                    await self.commit(tx, deferred=later)
            except BaseException as error:
                # Every attempt of the batch ends as its own failed commit would have.
                for item in batch:
                    item.done, item.error = True, error
                raise
            for item in batch:
                item.done = True
            for item in staged:
                record_step(item.exec_id, "completed")
        finally:
            self.commit_lock.release()

    async def _execute_failed(
        self,
        exec_id: str,
        attempt: int,
        options: pb.StepOptions,
        outcome: AttemptOutcome,
        *,
        unstarted: int | None = None,
    ) -> None:
        """Record a failed attempt; ``unstarted``: it never reached user code, and
        this is the start count to restore (undoing a mark made at dispatch)."""
        tx = self.tx()
        pending = self.attempts.take_heartbeat(exec_id, attempt)
        if pending is not None and tx.current(exec_id).heartbeat != pending[0]:
            # The next attempt reads the last value this one sent.
            tx.update(evolve(tx.current(exec_id), heartbeat=pending[0]))
        retried = stage_execute_failed(tx, exec_id, attempt, options, outcome, unstarted=unstarted)
        await self.commit(tx)
        record_step(exec_id, "retrying" if retried else "failed")

    # -- waits and timers --------------------------------------------------------------

    def schedule_evaluation(self) -> None:
        if self._evaluating is None or self._evaluating.done():
            self._evaluating = asyncio.create_task(self._evaluate())

    async def _evaluate(self) -> None:
        async with self.commit_lock:
            if not self.state.is_running:
                return
            tx = self.tx()
            earliest = tx.satisfy_waits(tx.now)
            if tx.commit.history:
                try:
                    await self.commit(tx)
                except StaleEpochError:
                    return
            self._arm_timer(earliest)

    def _arm_timer(self, when: float | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if when is not None:
            delay = max(0.0, when - clock.now()) + 0.001
            self._timer = asyncio.get_running_loop().call_later(delay, self.schedule_evaluation)


def _reason_decoder(definition: FlowDefinition) -> Callable[[pb.Value], Any]:
    """How a Step's failing decision's reason is read (its Flow's value codec)."""
    values = definition.mapper.values
    return lambda v: values.decode(v, values.codec(str))


async def _sleep_until(when: float | None) -> None:
    if when is not None:
        delay = when - clock.now()
        if delay > 0:
            await asyncio.sleep(delay)


def _settle(closed: asyncio.Future[None] | None) -> None:
    if closed is not None and not closed.done():
        closed.set_result(None)


class _Finished:
    """A successful ``execute`` attempt on its way to the store."""

    __slots__ = ("attempt", "done", "error", "exec_id", "result")

    def __init__(self, exec_id: str, attempt: int, result: StepResult) -> None:
        self.exec_id = exec_id
        self.attempt = attempt
        self.result = result
        self.done = False
        self.error: BaseException | None = None
