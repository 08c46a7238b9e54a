"""Pooled executors: long-lived actors that run remote Step attempts.

A Ray task per attempt costs a worker process whenever no idle one is at hand
(about 1 s and 100-400 MiB each here), and Ray does not share task workers
between detached host actors. An executor is a detached, named async actor of
one resource shape that runs many attempts, each as a coroutine, so an attempt
costs an actor call, or less: a host of the same node sends its calls after the
first by the executor's Unix socket (``_channel``). Protocol of one call
(``StepExecutor.run``):

1. wait for a slot (backpressure; the host's timeouts have not started);
2. load the Flow definition (once per executor and Flow version);
3. acknowledge the start to the run's host, which records it durably or
   refuses a superseded call (``ABANDONED``): the acknowledgement, like every
   message about a call, names it by the host's dispatch number (``AttemptKey``),
   so only the call the host waits for now can start;
4. run the handler; heartbeats and Stream writes go back to the host in
   batches, and every frame is delivered before the result is returned.

An attempt whose start the host recorded at dispatch (one that is not its
Step's last, so a repeat is allowed) starts early: its handler runs at once,
not after the host's answer (a round trip off every tool call's path), and a
refusal cancels it. Its acknowledgement waits ``early_ack_delay`` to be sent
and is never sent when the attempt ends first: the host counts any reply of
such an attempt as acknowledged, so a short call costs one message each way.
An executor that dies before the host receives the acknowledgement may have
begun user code the host counts as not started (the attempt is not the last:
it runs again either way); a refused attempt's user code runs until the
refusal comes back. A single-attempt Step, and the last attempt of any, waits
for the answer as above, so a superseded write never reaches user code.

An executor that dies fails its in-flight calls: the host sees the actor
error and counts the attempt as failed (``NOT_STARTED`` when no start was
recorded). A call whose host died or moved on (the host no longer tracks that
attempt) is cancelled by the orphan check, so a crashed host does not leave
its tools running. Sync handlers and sync tools run in threads; an async
handler that blocks its event loop stalls the executor's other calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from dex.dexpb import dex_pb2 as pb

from dex_agents_ray.engine import _clock as clock
from dex_agents_ray.engine._exit_hooks import run_exit_hooks
from dex_agents_ray.engine._faults import gate_before_ack_spec, wait_at_gate_before_ack
from dex_agents_ray.engine._options import ExecutorPoolOptions, StepAttemptProgress
from dex_agents_ray.engine.actors._channel import Channel, ChannelServer, open_if_local
from dex_agents_ray.engine.run._remote import (
    ABANDONED,
    RemoteRequest,
    encode_frame,
    encode_result,
    load_definition,
    parse_request,
    tune_collector,
)
from dex_agents_ray.engine.sdk._invoke import FlowMapper, invoke_step

logger = logging.getLogger("dex_agents_ray.engine")

EXECUTOR_PREFIX = "dexexec:"
CANCELLED = "cancelled"
"""What ``run`` returns for a call the engine cancelled (timeout, orphan)."""
DRAINING = "draining"
"""What ``run`` returns, without starting the call, once the executor drains:
the host sends the call to another executor (no attempt is spent)."""

AttemptKey = tuple[str, str, int]
"""(flow ID, execution ID, dispatch number): one call, as the host named it. The
host numbers every call it sends (never twice in one incarnation), so two calls
of one execution with the same attempt number (its ``wait_for`` call and its
first ``execute`` call) have keys of their own."""
FrameRecord = tuple[str, str, int, str, bytes]
"""(flow ID, execution ID, dispatch number, ``"heartbeat"`` | ``"stream"``, payload)."""
CallOutcome = tuple[str, Any]
"""``("ok", run's reply)`` or ``("error", the exception)``: one call of ``run_many``."""


def executor_name(shape_key: str, index: int) -> str:
    return f"{EXECUTOR_PREFIX}{shape_key}:{index}"


@dataclass
class _Call:
    task: asyncio.Future[Any]
    started: float
    cancelled: bool = False
    refused: bool = False
    """The host refused an early start's acknowledgement (or could not be reached)."""


def _refused(answer: asyncio.Future[bool], call: _Call) -> None:
    """An early start's acknowledgement came back: a refusal cancels its user code."""
    if answer.cancelled() or answer.exception() is not None or not answer.result():
        call.refused = True
        call.task.cancel()


@dataclass
class _HostLink:
    """What goes to one host: start acknowledgements and frames, in batches,
    by the host's socket when it is on this node (see ``StepExecutor._host_call``).

    An acknowledgement is sent at once when none is in flight to that host;
    those that arrive meanwhile go together in the next call. Frames wait up to
    ``FRAME_DELAY`` so that a short call's frames ride back with its result.
    """

    handle: Any
    name: str
    """The host's name as its dispatches give it (its incarnation's own)."""
    acks: list[tuple[AttemptKey, asyncio.Future[bool]]] = field(default_factory=list)
    acking: bool = False
    early: dict[AttemptKey, asyncio.Future[bool]] = field(default_factory=dict)
    """Early starts' acknowledgements waiting for the delay."""
    early_timer: asyncio.TimerHandle | None = None
    frames: list[FrameRecord] = field(default_factory=list)
    frame_timer: asyncio.TimerHandle | None = None
    frame_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    channel: Channel | None = None
    """The host's socket, once open (see ``StepExecutor._host_call``)."""
    channel_asked: bool = False
    """Whether the host was asked for its socket (it is asked once)."""

    def idle(self) -> bool:
        return not (
            self.acks or self.acking or self.early or self.frames or self.frame_lock.locked()
        )


FRAME_DELAY = 0.05
"""Seconds a heartbeat or Stream write may wait to be batched (heartbeat
timeouts are minutes; a UI sees a tool's events this much later at most)."""
_MAX_IDLE_LINKS = 4096
_DEFAULT_EARLY_ACK = ExecutorPoolOptions().early_ack_delay.total_seconds()


class StepExecutor:
    """One pooled executor; see the module docstring."""

    async def __init__(  # type: ignore[misc]
        self,
        namespace: str,
        shape: str,
        concurrency: int,
        orphan_check_seconds: float,
        clock_offset: float = 0.0,
        early_ack_seconds: float = _DEFAULT_EARLY_ACK,
        idle_exit_seconds: float | None = None,
    ) -> None:
        clock.set_offset(clock_offset)
        self._idle_exit = idle_exit_seconds
        """Run nothing this long and drain, then exit (``None``: one of the floor)."""
        self._draining = False
        self._last_busy = asyncio.get_running_loop().time()
        self._early_ack = early_ack_seconds
        self._namespace = namespace
        """Where the hosts' names live (the actors' namespace, not the job's)."""
        self._shape = shape
        self._concurrency = concurrency
        self._slots = asyncio.Semaphore(concurrency)
        # Sync tools run in the loop's default thread pool (``asyncio.to_thread``):
        # a thread per slot (started when needed), so a call that holds a slot
        # never waits for another call's thread while its Step timeout runs; never
        # fewer than asyncio's own default, which the executor's housekeeping shares.
        threads = max(concurrency, min(32, (os.cpu_count() or 1) + 4))
        asyncio.get_running_loop().set_default_executor(
            ThreadPoolExecutor(max_workers=threads, thread_name_prefix="dex-executor")
        )
        self._waiting = 0
        self._running = 0
        self._completed = 0
        self._acks_sent = 0
        self._calls: dict[tuple[str, AttemptKey], _Call] = {}
        """Running calls by (the sending host incarnation's name, key): dispatch
        numbers are a host process's own, so two incarnations' may meet here."""
        self._links: dict[str, _HostLink] = {}
        self._definitions: dict[str, tuple[Any, FlowMapper]] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self._orphan_check = orphan_check_seconds
        self._channel = ChannelServer(self._socket_batch, "dex-exec")
        self._socket_calls = 0
        """Hosts of this node send their calls here after the first (see ``_channel``)."""
        self._host_socket_calls = 0
        """Calls this executor made to hosts by their sockets."""
        self._local_hosts: set[str] = set()
        """Hosts that sent calls by this executor's socket: this executor's calls
        to them go by theirs once it is open."""
        tune_collector()
        self._watcher = asyncio.get_running_loop().create_task(self._watch_orphans())

    # -- calls ---------------------------------------------------------------------------

    def set_clock_offset(self, seconds: float) -> None:
        """A test engine moved the clock."""
        clock.set_offset(seconds)

    async def run(
        self,
        definition_key: str,
        blob_box: list[Any],
        method: str,
        request: RemoteRequest,
        progress: str,
        host_name: str,
        flow_id: str,
        exec_id: str,
        dispatch: int,
        early_start: bool = False,
    ) -> tuple[bool, Any, list[FrameRecord]]:
        """Run one attempt; returns whether it waited for a slot, its result,
        and the frames it wrote that were not sent yet (the host applies them
        before the result).

        ``early_start``: the host recorded the start at dispatch (an attempt that
        is not its Step's last), so user code starts as the acknowledgement goes
        out, without waiting for the host's answer; a refusal cancels it.

        ``blob_box`` holds the Flow definition's object ref, boxed so that Ray
        does not fetch it for calls whose definition is already loaded.
        """
        if self._draining:
            return False, DRAINING, []
        queued = self._slots.locked()
        self._waiting += 1
        try:
            await self._slots.acquire()
        finally:
            self._waiting -= 1
        self._running += 1
        try:
            link = await self._link(host_name)
            key = (flow_id, exec_id, dispatch)
            result = await self._run(
                definition_key,
                blob_box,
                method,
                request,
                progress,
                host_name,
                link,
                key,
                early_start,
            )
            return queued, result, await self._take_frames(link, key)
        finally:
            self._running -= 1
            self._completed += 1
            self._last_busy = asyncio.get_running_loop().time()
            self._slots.release()

    async def run_many(self, calls: list[tuple[Any, ...]]) -> list[CallOutcome | None]:
        """Run several attempts from one host (each as :meth:`run` would).

        Returns their outcomes in order. When some finish while others still
        run, the finished ones get ``FRAME_DELAY`` for their batch-mates to
        finish too; then they go to the host ahead of the reply
        (``executor_results``) and their place in the reply is ``None``.
        """
        tasks: list[asyncio.Future[CallOutcome]] = [
            asyncio.ensure_future(self._outcome(call)) for call in calls
        ]
        index = {task: i for i, task in enumerate(tasks)}
        outcomes: list[CallOutcome | None] = [None] * len(calls)
        sent = [False] * len(calls)
        pending: set[asyncio.Future[CallOutcome]] = set(tasks)
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if pending:
                more, pending = await asyncio.wait(pending, timeout=FRAME_DELAY)
                done |= more
            for task in done:
                outcomes[index[task]] = task.result()
            if pending:
                early = [i for i, o in enumerate(outcomes) if o is not None and not sent[i]]
                host_name = calls[0][5]
                await self._send_ahead(
                    host_name, [(_attempt_key(calls[i]), outcomes[i]) for i in early]
                )
                for i in early:
                    sent[i] = True
        return [None if sent[i] else outcome for i, outcome in enumerate(outcomes)]

    async def _socket_batch(self, calls: list[tuple[Any, ...]]) -> list[CallOutcome | None]:
        """``run_many`` of a batch that came by the socket."""
        self._socket_calls += len(calls)
        for call in calls:
            self._local_hosts.add(call[5])
        return await self.run_many(calls)

    async def _outcome(self, call: tuple[Any, ...]) -> CallOutcome:
        try:
            return "ok", await self.run(*call)
        except Exception as error:  # the attempt's failure travels as a value
            return "error", _portable(error)

    async def _send_ahead(self, host_name: str, results: list[tuple[AttemptKey, Any]]) -> None:
        link = self._links.get(host_name)
        if link is None:
            return
        try:
            await self._host_call(link, "executor_results", results)
        except Exception as error:  # the host died: nobody waits for these
            logger.debug("executor: %d result(s) dropped: %s", len(results), error)

    async def _run(
        self,
        definition_key: str,
        blob_box: list[Any],
        method: str,
        request: RemoteRequest,
        progress: str,
        host_name: str,
        link: _HostLink,
        key: AttemptKey,
        early_start: bool,
    ) -> Any:
        if gate_before_ack_spec() is not None:
            await asyncio.to_thread(wait_at_gate_before_ack)
        flow, mapper = await self._definition(definition_key, blob_box, link)
        answer = self._acknowledge(link, key, early_start)
        if not early_start and not await answer:
            return ABANDONED
        invocation, parsed, values = parse_request(method, request)

        def sink(frame: pb.StepMethodHeartbeat | pb.StepStreamWrite) -> None:
            self._queue_frame(link, (*key, *encode_frame(frame)))

        call: _Call | None = None

        def active() -> bool:
            return call is not None and not call.cancelled

        task = asyncio.ensure_future(
            invoke_step(
                mapper,
                flow,
                invocation,
                parsed,
                attempt_progress=StepAttemptProgress(progress),
                is_active=active,
                sink=sink,
                attribute_values=values,
            )
        )
        call = _Call(task, asyncio.get_running_loop().time())
        self._calls[(host_name, key)] = call
        if early_start:
            answer.add_done_callback(lambda done: _refused(done, call))
        try:
            result = await task
        except asyncio.CancelledError:
            if call.refused:
                return ABANDONED
            if call.cancelled:
                return CANCELLED
            raise
        finally:
            if self._calls.get((host_name, key)) is call:
                del self._calls[(host_name, key)]
            if early_start:
                _settle_unsent(link, key)
        return encode_result(result)

    async def _definition(
        self, key: str, blob_box: list[Any], link: _HostLink
    ) -> tuple[Any, FlowMapper]:
        cached = self._definitions.get(key)
        if cached is None:
            if not blob_box:  # a call that came by the socket carries no object ref
                blob_box = await link.handle.definition_box.remote(key)
                if not blob_box:
                    raise RuntimeError(f"the host does not know the Flow definition {key}")
            blob: bytes = await blob_box[0]
            cached = await asyncio.to_thread(load_definition, blob)
            self._definitions[key] = cached
        return cached

    def cancel(self, flow_id: str, exec_id: str, dispatch: int, host_name: str) -> bool:
        """Cancel the call ``host_name`` sent (its Step timed out, or it is an
        orphan); False if it is not here."""
        call = self._calls.get((host_name, (flow_id, exec_id, dispatch)))
        if call is None:
            return False
        call.cancelled = True
        call.task.cancel()
        return True

    # -- the way back to hosts -----------------------------------------------------------

    async def _link(self, host_name: str) -> _HostLink:
        link = self._links.get(host_name)
        if link is None:
            import ray

            # A handle found by name reaches the host's next incarnation too, so
            # every call about attempts says which incarnation sent them (the host
            # refuses another's). ``host_name`` is "<actor name>#<actor ID>#<its
            # incarnation>": a host re-created under the same name (a dedicated
            # host after passivation) or restarted by Ray gets a link of its own.
            name = host_name.split("#", 1)[0]
            handle = await asyncio.to_thread(ray.get_actor, name, self._namespace)
            link = self._links.get(host_name)
            if link is None:
                if len(self._links) >= _MAX_IDLE_LINKS:
                    for name in [n for n, v in self._links.items() if v.idle()]:
                        gone = self._links.pop(name)
                        if gone.channel is not None:
                            gone.channel.close()
                link = self._links[host_name] = _HostLink(handle, host_name)
        return link

    async def _host_call(self, link: _HostLink, method: str, argument: Any) -> Any:
        """Call ``method`` of the link's host with ``argument`` and the link's name.

        It goes by the host's socket once that is open: a host that sent calls by
        this executor's socket is on this node, and the first call to it through
        Ray asks it for its socket (``FlowHost.client_channel``, as clients do).
        A Ray call costs both processes far more CPU than its bytes; under load
        the acknowledgements and frames of long calls cross several times a
        turn. The socket ends with the host's process: a call in flight then
        fails as one to a dead actor does, and later calls go through Ray.
        """
        channel = link.channel
        if channel is not None:
            if not channel.closed:
                self._host_socket_calls += 1
                return await channel.request((method, argument, (link.name,)))
            link.channel = None
        answer = await getattr(link.handle, method).remote(argument, link.name)
        if not link.channel_asked and link.name in self._local_hosts:
            link.channel_asked = True
            self._spawn(self._open_channel(link))
        return answer

    async def _open_channel(self, link: _HostLink) -> None:
        try:
            node, path = await link.handle.client_channel.remote()
        except Exception as error:  # the host is going away: Ray it is
            logger.debug("executor: host %s gave no socket (%r)", link.name, error)
            return
        link.channel = await open_if_local(node, path, f"host {link.name}")

    def _acknowledge(
        self, link: _HostLink, key: AttemptKey, early_start: bool
    ) -> asyncio.Future[bool]:
        """Queue the start acknowledgement of ``key``; the future is the host's answer.

        It goes out in the next batch, which is sent before any user code runs
        (its sender is scheduled first). An early start's waits the pool's
        ``early_ack_delay`` instead (its user code runs meanwhile), and then does
        not wait for a batch in flight to be answered.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        if early_start:
            link.early[key] = future
            if link.early_timer is None:
                link.early_timer = loop.call_later(self._early_ack, self._send_early_acks, link)
            return future
        link.acks.append((key, future))
        if not link.acking:
            link.acking = True
            self._spawn(self._send_acks(link))
        return future

    def _send_early_acks(self, link: _HostLink) -> None:
        """The early starts still running after the delay acknowledge now,
        without waiting for a batch in flight to be answered."""
        link.early_timer = None
        if not link.early:
            return
        link.acks.extend(link.early.items())
        link.early.clear()
        link.acking = True
        self._spawn(self._send_acks(link))

    async def _send_acks(self, link: _HostLink) -> None:
        try:
            while link.acks:
                batch, link.acks = link.acks, []
                self._acks_sent += len(batch)
                try:
                    answers = await self._host_call(
                        link, "ack_remote_starts", [k for k, _ in batch]
                    )
                except Exception as error:
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(error)
                    continue
                for (_, future), answer in zip(batch, answers, strict=True):
                    if not future.done():
                        future.set_result(bool(answer))
        finally:
            link.acking = False

    def _queue_frame(self, link: _HostLink, record: FrameRecord) -> None:
        link.frames.append(record)
        if link.frame_timer is None:
            loop = asyncio.get_running_loop()
            link.frame_timer = loop.call_later(
                FRAME_DELAY, lambda: self._spawn(self._flush_frames(link))
            )

    async def _flush_frames(self, link: _HostLink) -> None:
        async with link.frame_lock:
            link.frame_timer = None
            batch, link.frames = link.frames, []
            if not batch:
                return
            try:
                await self._host_call(link, "remote_frames", batch)
            except Exception as error:  # the host died: its attempts are over
                logger.debug("executor: %d frame(s) dropped: %s", len(batch), error)

    async def _take_frames(self, link: _HostLink, key: AttemptKey) -> list[FrameRecord]:
        """The attempt's frames not sent yet (after any delivery in flight)."""
        async with link.frame_lock:
            own = [f for f in link.frames if f[:3] == key]
            if own:
                link.frames = [f for f in link.frames if f[:3] != key]
            return own

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- orphans -------------------------------------------------------------------------

    async def _watch_orphans(self) -> None:
        while True:
            await asyncio.sleep(self._orphan_check)
            try:
                await self.check_orphans()
            except Exception:
                logger.exception("executor: the orphan check failed")
            if self._idle_long_enough():
                await self._drain()
                return

    def _idle_long_enough(self) -> bool:
        if self._idle_exit is None or self._running or self._waiting or self._calls:
            return False
        return asyncio.get_running_loop().time() - self._last_busy >= self._idle_exit

    async def _drain(self) -> None:
        """Refuse every call from now on, give the calls already on their way one
        orphan-check interval to be refused, then end this actor for good (Ray does
        not restart it; a host that finds its name gone sends elsewhere)."""
        import ray

        self._draining = True
        logger.info("executor %s: idle for %.0f s, draining", self._shape, self._idle_exit)
        await asyncio.sleep(self._orphan_check)  # a grace interval, not a timing guess
        self._channel.close()
        run_exit_hooks()
        ray.kill(ray.get_runtime_context().current_actor, no_restart=True)

    async def check_orphans(self) -> int:
        """Cancel calls whose host no longer tracks their attempt; returns how many."""
        now = asyncio.get_running_loop().time()
        by_host: dict[str, list[AttemptKey]] = {}
        for (host_name, key), call in self._calls.items():
            if not call.cancelled and now - call.started >= self._orphan_check:
                by_host.setdefault(host_name, []).append(key)
        cancelled = 0
        for host_name, keys in by_host.items():
            link = self._links.get(host_name)
            if link is None:
                continue
            try:
                live = await asyncio.wait_for(
                    self._host_call(link, "live_attempts", keys), timeout=30
                )
            except TimeoutError:
                continue  # a busy host is not a dead one
            except Exception:
                live = [False] * len(keys)  # the host is gone for good
            for key, alive in zip(keys, live, strict=True):
                if not alive and self.cancel(*key, host_name):
                    logger.info("executor: cancelled orphaned attempt %s", key)
                    cancelled += 1
        return cancelled

    # -- operations for tooling and tests ------------------------------------------------

    def pid(self) -> int:
        return os.getpid()

    def node_id(self) -> str:
        import ray

        return str(ray.get_runtime_context().get_node_id())

    async def channel(self) -> tuple[str, str | None]:
        """This executor's node ID and the path of its socket for hosts of the same
        node (``None``: none here); see ``_channel``."""
        return self.node_id(), await self._channel.address()

    def stats(self) -> dict[str, Any]:
        """Slots, running and waiting calls, calls completed, start
        acknowledgements sent, hosts and calls that came by the socket, and the
        calls this executor made by hosts' sockets, since start."""
        return {
            "shape": self._shape,
            "concurrency": self._concurrency,
            "running": self._running,
            "waiting": self._waiting,
            "completed": self._completed,
            "acks_sent": self._acks_sent,
            "socket_connections": self._channel.connections,
            "socket_calls": self._socket_calls,
            "host_socket_calls": self._host_socket_calls,
            "draining": self._draining,
        }

    async def shutdown(self) -> None:
        self._channel.close()
        self._watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._watcher
        run_exit_hooks()


def _settle_unsent(link: _HostLink, key: AttemptKey) -> None:
    """An early start ended before its acknowledgement was sent: it never is (the
    reply, which the host counts as acknowledged, stands for it)."""
    future = link.early.pop(key, None)
    if future is not None and not future.done():
        future.set_result(True)
    if not link.early and link.early_timer is not None:
        link.early_timer.cancel()
        link.early_timer = None


def _attempt_key(call: tuple[Any, ...]) -> AttemptKey:
    """The (flow ID, execution ID, dispatch number) of a ``run`` argument tuple."""
    return call[6], call[7], call[8]


def _portable(error: Exception) -> Exception:
    """``error`` if it survives pickling, else a ``RuntimeError`` that says what it was."""
    from ray import cloudpickle

    try:
        cloudpickle.loads(cloudpickle.dumps(error))  # type: ignore[no-untyped-call]
    except Exception:
        return RuntimeError(f"{type(error).__name__}: {error}")
    return error
