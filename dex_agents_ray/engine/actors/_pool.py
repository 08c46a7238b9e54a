"""A host's view of the pooled executors: which executor gets the next call.

Each host process keeps, per resource shape, the executors it has used and how
many of its calls each one runs. A call goes to the first executor with a
free slot by that count; when every executor it knows is at its slot count,
or one reported a call that had to wait for a slot, the host starts the next
one (up to ``ExecutorPoolOptions.max_executors``); the first call of a shape
starts ``ExecutorPoolOptions.min_executors`` at once. Executors are named, so every host of
a namespace finds the same ones, and Ray restarts one that dies.

A light shape (no ``max_concurrency`` of its own: coroutine tools that share a
fraction of a CPU) gets at most one executor per CPU of the cluster: more
processes than cores only add each process's own overhead to a burst that is
short of CPU, not of slots. Its slots are not cut: the ``max_executors`` x
``DEFAULT_IO_CONCURRENCY`` slots are spread over the executors it may have.

An executor above the floor that ran nothing for ``executor_idle_timeout`` drains:
it answers ``DRAINING`` to every call without starting it, then ends for good. A
host that gets that answer, or finds the executor dead and its name gone, forgets
it and sends the call to another one (starting one if none has a slot): the
attempt was never started, so none is spent.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dex_agents_ray.engine import _clock as clock
from dex_agents_ray.engine._options import (
    DEFAULT_IO_CONCURRENCY,
    ExecutorPoolOptions,
    RayTaskOptions,
)
from dex_agents_ray.engine.actors._channel import Channel, ChannelClosed, open_if_local
from dex_agents_ray.engine.actors._executor import (
    CANCELLED,
    DRAINING,
    AttemptKey,
    CallOutcome,
    FrameRecord,
    executor_name,
)
from dex_agents_ray.engine.run._remote import ABANDONED, AbandonedAttempt

logger = logging.getLogger("dex_agents_ray.engine")

_executor_class: Any = None


def _remote_executor() -> Any:
    global _executor_class
    if _executor_class is None:
        import ray

        from dex_agents_ray.engine.actors._executor import StepExecutor

        _executor_class = ray.remote(StepExecutor)
    return _executor_class


@dataclass
class _Pending:
    """One submitted attempt until its executor's reply settles it."""

    key: AttemptKey
    args: tuple[Any, ...]
    reply: asyncio.Future[tuple[bool, Any, list[FrameRecord]]]


@dataclass
class _Shape:
    options: RayTaskOptions
    key: str
    concurrency: int
    """Slots of each executor of the shape."""
    limit: int
    """Most executors of the shape (see ``light_shape_layout``)."""
    handles: list[Any] = field(default_factory=list)
    """By executor index; ``None`` where a drained executor was forgotten."""
    in_flight: list[int] = field(default_factory=list)
    saw_queueing: bool = False
    outgoing: dict[int, list[_Pending]] = field(default_factory=dict)
    """Attempts submitted this event-loop turn, per executor, not sent yet."""
    restarting: set[int] = field(default_factory=set)
    """Executors that died under a call: the next batch waits until Ray has the
    restarted one (a call sent before Ray learns of the death reaches the dead
    process and fails without running)."""
    channels: dict[int, Channel] = field(default_factory=dict)
    """Open sockets to executors of this node (see ``_channel``)."""
    connecting: set[int] = field(default_factory=set)
    """Executors asked for their socket, not answered yet."""
    over_ray: set[int] = field(default_factory=set)
    """Executors that have no socket for this host (another node): Ray only."""


class ExecutorPool:
    """Per-host executor choice; see the module docstring."""

    def __init__(
        self, namespace: str, options: ExecutorPoolOptions, *, detached: bool = True
    ) -> None:
        self._namespace = namespace
        self._options = options
        self._detached = detached
        """Whether executors outlive their creator; ``False`` when a worker process
        owns the namespace's actors (``HostConfig.worker_owned``), so they end with it."""
        self._shapes: dict[str, _Shape] = {}
        self._by_text: dict[str, _Shape] = {}
        self._waiting: dict[AttemptKey, _Pending] = {}
        self._background: set[asyncio.Task[None]] = set()
        self.redirected = 0
        """Attempts sent again because their executor was draining or drained."""
        self._definition_refs: dict[str, Any] = {}
        """Each Flow definition's object ref by key, as sent (for ``definition_box``)."""
        self._cpus: int | None = None
        """The cluster's CPUs when the first light shape was seen (0: unknown)."""

    def set_clock_offset(self, seconds: float) -> None:
        """Move the clock of every executor this pool knows (a test engine moved it)."""
        for shape in self._shapes.values():
            for handle in shape.handles:
                if handle is not None:
                    handle.set_clock_offset.remote(seconds)

    def submit(
        self,
        options: RayTaskOptions,
        options_text: str,
        args: tuple[Any, ...],
        attempt_key: AttemptKey,
        on_frames: Callable[[list[FrameRecord]], None],
    ) -> tuple[asyncio.Future[Any], Callable[[], None]]:
        """Send one attempt to an executor of its shape; returns (result, kill).

        Attempts submitted to one executor in the same event-loop turn (a
        turn's parallel tool calls) go in one actor call (``run_many``).
        Frames that come back with a reply go to ``on_frames`` before the
        result is returned. The result is the encoded ``StepResult``; it raises
        :class:`AbandonedAttempt` for a refused or cancelled attempt and Ray's
        ``WorkerCrashedError`` when the executor died.
        """
        shape = self._by_text.get(options_text) or self._shape(options, options_text)
        current = [self._enqueue(shape, args, attempt_key)]

        async def result() -> Any:
            while True:
                index, handle, pending = current[0]
                try:
                    queued, payload, frames = await pending.reply
                except Exception as error:
                    if not await self._drained(shape, index, handle, error):
                        raise
                    queued, payload, frames = False, DRAINING, []
                finally:
                    shape.in_flight[index] -= 1
                    if self._waiting.get(attempt_key) is pending:
                        del self._waiting[attempt_key]
                if payload != DRAINING:
                    break
                self._forget(shape, index, handle)
                self.redirected += 1
                current[0] = self._enqueue(shape, args, attempt_key)
            if queued:
                shape.saw_queueing = True
            if frames:
                on_frames(frames)
            if payload in (ABANDONED, CANCELLED):
                raise AbandonedAttempt(payload)
            return payload

        future = asyncio.ensure_future(result())

        def kill() -> None:
            future.add_done_callback(_consume)
            _, handle, _ = current[0]
            handle.cancel.remote(*attempt_key, args[5])  # args[5]: the host's name

        return future, kill

    def _enqueue(
        self, shape: _Shape, args: tuple[Any, ...], attempt_key: AttemptKey
    ) -> tuple[int, Any, _Pending]:
        """Queue one attempt for an executor of ``shape``: its index, handle and reply."""
        index = self._pick(shape)
        handle = shape.handles[index]
        shape.in_flight[index] += 1
        loop = asyncio.get_running_loop()
        pending = _Pending(attempt_key, args, loop.create_future())
        batch = shape.outgoing.get(index)
        if batch is None:
            batch = shape.outgoing[index] = []
            loop.call_soon(self._send, shape, index)
        batch.append(pending)
        self._waiting[attempt_key] = pending
        return index, handle, pending

    async def _drained(self, shape: _Shape, index: int, handle: Any, error: BaseException) -> bool:
        """Whether ``error`` says the executor ended by draining: it died and its name
        is gone (Ray keeps the name of one it restarts). A drained executor started
        none of the calls it got after it began to drain. Its socket can close a
        moment before Ray has its name released, so the name is asked a few times."""
        import ray

        if handle is not shape.handles[index]:
            return True  # forgotten meanwhile: another attempt found it drained
        cause = error.__cause__ if error.__cause__ is not None else error
        if not _is_death(cause):
            return False
        name = executor_name(shape.key, index)
        for _ in range(_NAME_CHECKS):
            try:
                await asyncio.to_thread(ray.get_actor, name, self._namespace)
            except ValueError:
                return True
            await asyncio.sleep(_ALIVE_CHECK_INTERVAL)  # a retry interval, not a timing guess
        return False

    def _forget(self, shape: _Shape, index: int, handle: Any) -> None:
        """Drop a drained executor (once; a new one may take its index later)."""
        if shape.handles[index] is not handle:
            return
        logger.info("executor %s:%d drained: its calls go to another one", shape.key, index)
        shape.handles[index] = None
        shape.restarting.discard(index)
        shape.connecting.discard(index)
        shape.over_ray.discard(index)
        channel = shape.channels.pop(index, None)
        if channel is not None:
            channel.close()

    def _send(self, shape: _Shape, index: int) -> None:
        batch = shape.outgoing.pop(index, [])
        if not batch:
            return
        if shape.handles[index] is None:  # forgotten this turn: each goes elsewhere
            for pending in batch:
                _resolve(pending, ("ok", (False, DRAINING, [])))
            return
        for pending in batch:
            self._definition_refs.setdefault(pending.args[0], pending.args[1][0])
        # The call goes out now, not in the task's first step: Steps that became
        # ready in the same commit (a Step's in-host ``wait_for``) would otherwise
        # run before it.
        channel = shape.channels.get(index)
        if channel is not None and (channel.closed or index in shape.restarting):
            del shape.channels[index]
            channel = None
        if channel is not None:
            try:
                reply = channel.request([(p.args[0], [], *p.args[2:]) for p in batch])
            except Exception as error:  # nothing was sent: each attempt fails unstarted
                for pending in batch:
                    _resolve(pending, ("error", error))
                return
            self._spawn(self._deliver_by_channel(shape, index, batch, reply))
            return
        ref = None
        if index not in shape.restarting:
            ref = _call(shape.handles[index], batch)
            if ref is None:
                return
        self._spawn(self._deliver_batch(shape, index, batch, ref))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _deliver_by_channel(
        self, shape: _Shape, index: int, batch: list[_Pending], reply: Any
    ) -> None:
        if await _settle_many(reply, batch):
            shape.restarting.add(index)
            shape.channels.pop(index, None)

    async def _connect(self, shape: _Shape, index: int) -> None:
        """Open the socket of executor ``index`` when it is on this node."""
        handle = shape.handles[index]
        if handle is None:
            shape.connecting.discard(index)
            return
        try:
            try:
                node, path = await handle.channel.remote()
            except Exception as error:  # it died meanwhile: the next Ray batch asks again
                logger.debug("executor %d: no socket address (%r)", index, error)
                return
            channel = await open_if_local(node, path, f"executor {index}")
            if channel is None:
                shape.over_ray.add(index)
                return
        finally:
            shape.connecting.discard(index)
        old = shape.channels.pop(index, None)
        if old is not None:
            old.close()
        shape.channels[index] = channel

    def definition_box(self, key: str) -> list[Any]:
        """See ``FlowHost.definition_box``."""
        ref = self._definition_refs.get(key)
        return [] if ref is None else [ref]

    async def _deliver_batch(
        self, shape: _Shape, index: int, batch: list[_Pending], ref: Any
    ) -> None:
        handle = shape.handles[index]
        if ref is None:
            await _until_alive(handle)
            shape.restarting.discard(index)
            ref = _call(handle, batch)
            if ref is None:
                return
        if len(batch) == 1:
            died = await _settle_one(ref, batch[0])
        else:
            died = await _settle_many(ref, batch)
        if died:
            shape.restarting.add(index)
            old = shape.channels.pop(index, None)
            if old is not None:
                old.close()
        elif (
            self._options.local_channel
            and index not in shape.channels
            and index not in shape.connecting
            and index not in shape.over_ray
        ):
            shape.connecting.add(index)
            self._spawn(self._connect(shape, index))

    def deliver(self, results: list[tuple[AttemptKey, CallOutcome]]) -> None:
        """Outcomes an executor sent ahead of its ``run_many`` reply."""
        for key, outcome in results:
            pending = self._waiting.get(key)
            if pending is not None:
                _resolve(pending, outcome)

    def _shape(self, options: RayTaskOptions, options_text: str) -> _Shape:
        key = options.shape_key()
        shape = self._shapes.get(key)
        if shape is None:
            concurrency, limit = options.executor_concurrency(), self._options.max_executors
            if options.max_concurrency is None and concurrency == DEFAULT_IO_CONCURRENCY:
                concurrency, limit = light_shape_layout(self._options, self._cluster_cpus())
            shape = _Shape(options, key, concurrency, limit)
            self._shapes[key] = shape
        self._by_text[options_text] = shape
        return shape

    def _pick(self, shape: _Shape) -> int:
        """The first executor with a free slot (calls made together share one, and
        their acknowledgements one batch); a new one when none has, and the
        least busy at the maximum."""
        while len(shape.handles) < self._options.min_executors:
            self._start(shape)
        live = [i for i, handle in enumerate(shape.handles) if handle is not None]
        if not shape.saw_queueing:
            for index in live:
                if shape.in_flight[index] < shape.concurrency:
                    return index
        if live and len(live) >= shape.limit:
            return min(live, key=shape.in_flight.__getitem__)
        shape.saw_queueing = False
        return self._start(shape)

    def _cluster_cpus(self) -> int:
        """The cluster's CPUs, asked once (0 when Ray cannot tell)."""
        if self._cpus is None:
            import ray

            try:
                resources: dict[str, float] = (
                    ray.cluster_resources()  # type: ignore[no-untyped-call]
                    if ray.is_initialized()
                    else {}
                )
                cpus = resources.get("CPU", 0)
            except Exception:  # the GCS is unreachable for a moment: no cap this time
                return 0
            self._cpus = int(cpus)
        return self._cpus

    def _start(self, shape: _Shape) -> int:
        """Start (or find, by name) the executor of the first free index."""
        free = [i for i, handle in enumerate(shape.handles) if handle is None]
        index = free[0] if free else len(shape.handles)
        lifetime: dict[str, str] = {"lifetime": "detached"} if self._detached else {}
        idle = self._options.executor_idle_timeout
        handle = (
            _remote_executor()
            .options(
                name=executor_name(shape.key, index),
                namespace=self._namespace,
                **lifetime,
                get_if_exists=True,
                max_restarts=-1,
                max_task_retries=0,
                max_concurrency=10_000,
                scheduling_strategy="SPREAD",
                **shape.options.executor_actor_options(),
            )
            .remote(
                self._namespace,
                shape.options.to_json(),
                shape.concurrency,
                self._options.orphan_check.total_seconds(),
                clock.offset(),
                self._options.early_ack_delay.total_seconds(),
                idle.total_seconds()
                if idle is not None and index >= self._options.min_executors
                else None,
            )
        )
        if index == len(shape.handles):
            shape.handles.append(handle)
            shape.in_flight.append(0)
        else:
            shape.handles[index] = handle
        return index


def light_shape_layout(options: ExecutorPoolOptions, cpus: int) -> tuple[int, int]:
    """(slots per executor, most executors) of a light shape on a cluster of
    ``cpus`` CPUs (0: unknown, so no cap): at most one executor per CPU, never
    fewer than ``min_executors``, and as many slots in all as ``max_executors``
    executors of ``DEFAULT_IO_CONCURRENCY`` would have."""
    limit = options.max_executors
    if cpus > 0:
        limit = max(options.min_executors, min(limit, cpus))
    return DEFAULT_IO_CONCURRENCY * math.ceil(options.max_executors / limit), limit


def _call(handle: Any, batch: list[_Pending]) -> Any:
    """Send ``batch`` to the executor ``handle``: its reply's object ref, or ``None``
    when Ray refused the call as it was made (nothing was sent: each attempt of the
    batch fails unstarted with that error)."""
    try:
        if len(batch) == 1:
            return handle.run.remote(*batch[0].args)
        return handle.run_many.remote([p.args for p in batch])
    except Exception as error:
        for pending in batch:
            _resolve(pending, ("error", error))
        return None


def _resolve(pending: _Pending, outcome: CallOutcome) -> None:
    if pending.reply.done():
        return
    kind, value = outcome
    if kind == "ok":
        pending.reply.set_result(value)
    else:
        pending.reply.set_exception(value)


def _executor_died(error: BaseException) -> BaseException:
    """An executor that died reads as a crashed worker (as a task worker would)."""
    import ray.exceptions

    if isinstance(error, ray.exceptions.RayActorError | ChannelClosed):
        crashed = ray.exceptions.WorkerCrashedError()
        crashed.__cause__ = error
        return crashed
    return error


_ALIVE_CHECKS = 100
_ALIVE_CHECK_INTERVAL = 0.05
_NAME_CHECKS = 10
"""How often a dead executor's name is asked for before it counts as crashed, not drained."""
"""A restarted executor is confirmed for up to about 5 s plus Ray's own answers."""


async def _until_alive(handle: Any) -> None:
    """Wait until ``handle``'s actor answers (Ray restarts a dead executor); after
    the last check the batch goes anyway and fails as before if it is still dead."""
    import ray.exceptions

    for _ in range(_ALIVE_CHECKS):
        try:
            await handle.__ray_ready__.remote()
            return
        except ray.exceptions.RayActorError:
            await asyncio.sleep(_ALIVE_CHECK_INTERVAL)  # a retry interval, not a timing guess


def _is_death(error: BaseException) -> bool:
    import ray.exceptions

    return isinstance(error, ray.exceptions.RayActorError | ChannelClosed)


async def _settle_one(ref: Any, pending: _Pending) -> bool:
    """Settle one attempt from its reply; ``True`` when the executor died."""
    try:
        reply = await ref
    except Exception as error:
        _resolve(pending, ("error", _executor_died(error)))
        return _is_death(error)
    _resolve(pending, ("ok", reply))
    return False


async def _settle_many(ref: Any, batch: list[_Pending]) -> bool:
    """Settle a batch from its reply; ``True`` when the executor died."""
    try:
        outcomes: list[CallOutcome | None] = await ref
    except Exception as error:
        failure = _executor_died(error)
        for pending in batch:
            _resolve(pending, ("error", failure))
        return _is_death(error)
    for pending, outcome in zip(batch, outcomes, strict=True):
        if outcome is not None:  # None: sent ahead with ``deliver``
            _resolve(pending, outcome)
    return False


def _consume(future: asyncio.Future[Any]) -> None:
    """Retrieve the outcome of an attempt nobody waits for any more."""
    if not future.cancelled():
        future.exception()
