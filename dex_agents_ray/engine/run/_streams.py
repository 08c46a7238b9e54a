"""Stream writes of a host's runs on their way to the store, and the long polls
that wait for them.

A Stream write (an attempt's ``Stream.write``) lingers for up to ``linger``
seconds, and up to ``busy_linger`` while its run is busy (an attempt in flight, a
Step about to commit): when the run commits meanwhile (a Step's result, almost
always a few milliseconds later), the commit carries the write in its own
transaction (one fsync instead of two, see ``RunDriver.commit``); otherwise the
write is appended alone. The longer linger of a busy run matters under load: a
loaded host's Step result often commits more than ``linger`` after the Step's
last write, and on ``benchmarks/agent_loop.py``'s shared hosts at 150 sessions
about two writes a turn were then appended in transactions of their own.
Streams are best effort in Dex: a write that the store refuses is logged and
dropped, as before.

A committed Step's writes are never left behind its commit. While the run is
*committing* (an attempt's result is on its way to its commit, a commit or a
deferred commit's write is in flight; ``RunDriver.committing``) nothing of it
is appended alone, whatever the linger: the commit takes the writes queued
before it, so a loaded host whose commit comes late cannot leave a turn's last
events in an append that a host kill loses after the turn's end is durable.
Only the writes of a running attempt are appended alone (a model's streamed
text), and those of an attempt that never commits. Writes of one run keep
their order: the ones a commit takes were queued after every write already on
its way to the store, and the commit waits for that append to land first
(``appended``; the stores' connections need not keep two transactions in order).

The buffer also keeps the newest records each run's Stream got through it (a
short tail, once durable), so that a long poll answers with the records
themselves, mostly without a store read on either side. A long poll that finds
records while its run is busy (an attempt in flight, a Step about to run) waits
up to ``batch_window`` for the records that follow, and answers as soon as the
run settles: a turn's events, written over several commits, reach a reader in
one Ray call instead of four.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence

from dex.dexpb import dex_pb2 as pb

from dex_agents_ray.engine import _clock as clock
from dex_agents_ray.engine._faults import gate_before_stream_append_spec, wait_at_gate
from dex_agents_ray.engine.store._records import StreamAppend, StreamRecord
from dex_agents_ray.engine.store._store import StreamStore

logger = logging.getLogger("dex_agents_ray.engine")

STREAM_LINGER_SECONDS = 0.005
"""How long a Stream write waits for its run's next commit before it is appended alone."""
STREAM_BUSY_LINGER_SECONDS = 0.05
"""How long a Stream write of a busy run waits for the run's next commit (a
long-running Step's writes, a model's streamed text say, reach readers this
often)."""
STREAM_BATCH_WINDOW_SECONDS = 0.05
"""How long a long poll that found records of a busy run waits for more (the default
of ``FlowEngine.start(stream_batch_window=...)``)."""
TAIL_RECORDS = 64
"""Records kept per Stream for long polls."""
TAIL_STREAMS = 4096
"""Streams whose tails a host keeps (least recently written dropped first)."""


class StreamBuffer:
    """One host's Stream writes in flight and its ``wait_stream`` long polls."""

    def __init__(
        self,
        store: StreamStore,
        linger: float = STREAM_LINGER_SECONDS,
        busy: Callable[[str], bool] | None = None,
        batch_window: float = STREAM_BATCH_WINDOW_SECONDS,
        busy_linger: float = STREAM_BUSY_LINGER_SECONDS,
        committing: Callable[[str], bool] | None = None,
    ) -> None:
        self._store = store
        self._linger = linger
        self._busy_linger = max(linger, busy_linger)
        self._busy = busy
        self._committing = committing
        self._batch_window = batch_window
        self._stirred: dict[str, asyncio.Future[None]] = {}
        self._pending: dict[str, list[StreamAppend]] = {}
        self._queued_at: dict[str, float] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._appending: dict[str, asyncio.Task[None]] = {}
        self._waiters: dict[tuple[str, str], asyncio.Future[None]] = {}
        self._tails: OrderedDict[tuple[str, str], deque[StreamRecord]] = OrderedDict()

    def write(self, flow_id: str, stream: str, source: str, write: pb.StepStreamWrite) -> None:
        """Queue one Stream write of ``flow_id``."""
        queued = self._pending.get(flow_id)
        if queued is None:
            queued = self._pending[flow_id] = []
            self._queued_at[flow_id] = asyncio.get_running_loop().time()
        queued.append(
            StreamAppend(
                stream=stream,
                source=source,
                value=write.value.SerializeToString(),
                capacity_bytes=write.stream_capacity_bytes,
            )
        )
        if flow_id not in self._timers:
            self._timers[flow_id] = asyncio.get_running_loop().call_later(
                self._linger, self._due, flow_id
            )

    def take(self, flow_id: str) -> list[StreamAppend]:
        """The queued writes of ``flow_id``, for a commit to carry (in order)."""
        self._queued_at.pop(flow_id, None)
        timer = self._timers.pop(flow_id, None)
        if timer is not None:
            timer.cancel()  # the next write starts a linger of its own
        return self._pending.pop(flow_id, [])

    def _due(self, flow_id: str) -> None:
        """The linger of ``flow_id``'s oldest queued write is over: append what no
        commit took (a busy run's writes wait longer for its commit), after any
        append of the run still on its way (one at a time per run keeps the run's
        writes in order). Nothing is appended alone while the run is committing
        (see ``committing``): that commit, or the next, carries the writes."""
        del self._timers[flow_id]
        if flow_id not in self._pending:
            return  # a commit took them (almost always)
        loop = asyncio.get_running_loop()
        waited = loop.time() - self._queued_at[flow_id]
        if flow_id in self._appending or (
            self._committing is not None and self._committing(flow_id)
        ):
            self._timers[flow_id] = loop.call_later(self._linger, self._due, flow_id)
            return
        if self._busy is not None and waited < self._busy_linger and self._busy(flow_id):
            # A busy run's commit takes these as it comes (its Step ends in a commit):
            # look again once the busy linger is over, not every ``linger``.
            later = max(self._linger, self._busy_linger - waited)
            self._timers[flow_id] = loop.call_later(later, self._due, flow_id)
            return
        batch = self.take(flow_id)
        self._appending[flow_id] = loop.create_task(self._append_alone(flow_id, batch))

    async def appended(self, flow_id: str) -> None:
        """Wait until the append of ``flow_id``'s writes that is on its way to the
        store alone, if any, has landed (or failed: streams are best effort)."""
        task = self._appending.get(flow_id)
        if task is not None:
            await asyncio.wait([task])

    def written(
        self, flow_id: str, appends: Sequence[StreamAppend], offsets: Sequence[int]
    ) -> None:
        """``appends`` of ``flow_id`` are durable at ``offsets`` (``[]``: not known):
        keep them in the tails and wake the long polls on their Streams."""
        now = clock.now()
        for item, offset in zip(appends, offsets, strict=False):
            key = (flow_id, item.stream)
            tail = self._tails.get(key)
            if tail is not None and tail[-1].offset + 1 != offset:
                tail = None  # a gap (another writer): start again from here
            if tail is None:
                tail = self._tails[key] = deque(maxlen=TAIL_RECORDS)
                while len(self._tails) > TAIL_STREAMS:
                    self._tails.popitem(last=False)
            self._tails.move_to_end(key)
            tail.append(
                StreamRecord(offset=offset, created_at=now, source=item.source, value=item.value)
            )
        if len(offsets) != len(appends):
            for stream in {item.stream for item in appends}:
                self._tails.pop((flow_id, stream), None)
        for stream in dict.fromkeys(item.stream for item in appends):
            waiter = self._waiters.pop((flow_id, stream), None)
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
        self.stir(flow_id)

    def stir(self, flow_id: str) -> None:
        """``flow_id`` committed or wrote: wake its long polls that gather a batch."""
        stirred = self._stirred.pop(flow_id, None)
        if stirred is not None and not stirred.done():
            stirred.set_result(None)

    async def _gather(
        self,
        flow_id: str,
        stream: str,
        records: list[StreamRecord],
        limit: int,
        until: float | None,
    ) -> list[StreamRecord]:
        """``records`` and the ones that follow them while ``flow_id`` is busy, for
        up to the batch window (and not past ``until``, the poll's own deadline): a
        run's burst of writes (one turn's events, say) answers one long poll
        instead of one each. It answers as soon as the run settles (only waits),
        ``limit`` records are in hand, or the next record is not in this host's
        tail."""
        busy = self._busy
        if busy is None or self._batch_window <= 0 or len(records) >= limit or not busy(flow_id):
            return records
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._batch_window
        if until is not None:
            deadline = min(deadline, until)
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return records
            stirred = self._stirred.get(flow_id)
            if stirred is None or stirred.done():
                stirred = self._stirred[flow_id] = loop.create_future()
            try:
                await asyncio.wait_for(asyncio.shield(stirred), remaining)
            except TimeoutError:
                return records
            last = records[-1].offset
            tail = self._tails.get((flow_id, stream))
            if tail is None or tail[0].offset > last + 1:
                return records  # not in this host's tail: the next poll reads the store
            records = records + [r for r in tail if r.offset > last][: limit - len(records)]
            if len(records) >= limit or not busy(flow_id):
                return records

    def forget(self, flow_id: str) -> None:
        """Drop the tails of ``flow_id`` (this host no longer owns the run)."""
        self.stir(flow_id)
        for key in [k for k in self._tails if k[0] == flow_id]:
            del self._tails[key]

    def _from_tail(
        self, flow_id: str, stream: str, after_offset: int, limit: int
    ) -> list[StreamRecord] | None:
        tail = self._tails.get((flow_id, stream))
        if not tail or tail[0].offset > after_offset + 1 or tail[-1].offset <= after_offset:
            return None
        return [r for r in tail if r.offset > after_offset][:limit]

    async def _append_alone(self, flow_id: str, batch: list[StreamAppend]) -> None:
        offsets: list[int] = []
        try:
            gate = gate_before_stream_append_spec()
            if gate is not None:
                await asyncio.to_thread(wait_at_gate, gate)
            offsets = await self._store.append_streams(flow_id, batch)
        except Exception:
            logger.exception(
                "run %s: %d Stream write(s) lost (streams are best effort)",
                flow_id,
                len(batch),
            )
        finally:
            self._appending.pop(flow_id, None)
        self.written(flow_id, batch, offsets)

    async def wait(
        self, flow_id: str, stream: str, after_offset: int, limit: int, timeout: float | None
    ) -> list[StreamRecord]:
        """Up to ``limit`` records past ``after_offset``, waiting up to ``timeout``
        for the first; ``[]`` when none came."""
        until = None if timeout is None else asyncio.get_running_loop().time() + timeout
        records = self._from_tail(flow_id, stream, after_offset, limit)
        if records:
            return await self._gather(flow_id, stream, records, limit, until)
        key = (flow_id, stream)
        waiter = self._waiters.get(key)
        if waiter is None or waiter.done():
            waiter = asyncio.get_running_loop().create_future()
            self._waiters[key] = waiter
        # Registered before looking, so a write in between still wakes us.
        records = await self._store.read_stream(flow_id, stream, after_offset, limit)
        if records:
            return await self._gather(flow_id, stream, records, limit, until)
        try:
            await asyncio.wait_for(asyncio.shield(waiter), timeout)
        except TimeoutError:
            return []
        records = self._from_tail(flow_id, stream, after_offset, limit)
        if records is None:
            records = await self._store.read_stream(flow_id, stream, after_offset, limit)
        return await self._gather(flow_id, stream, records, limit, until) if records else records

    async def wait_many(
        self, positions: Sequence[tuple[str, str, int]], limit: int, timeout: float | None
    ) -> list[tuple[int, list[StreamRecord]]]:
        """The long poll of many readers at once (one client's readers of runs on
        this host): ``(index, records)`` for each position of ``positions``
        (``(flow ID, stream, after offset)``) that has records past it, waiting up
        to ``timeout`` for the first; ``[]`` when none came.

        A position found with records gathers what follows as :meth:`wait` does
        (all of them at once); the others get what reached this host's tails
        meanwhile, without waiting. A position at the newest record this host
        wrote waits without a store read; any other is read from the store once
        before the wait, as :meth:`wait` reads it."""
        if not positions:
            return []
        loop = asyncio.get_running_loop()
        until = None if timeout is None else loop.time() + timeout
        found = self._sweep(positions, limit, {})
        if not found:
            waiters: set[asyncio.Future[None]] = set()
            for index, (flow_id, stream, after) in enumerate(positions):
                key = (flow_id, stream)
                waiter = self._waiters.get(key)
                if waiter is None or waiter.done():
                    waiter = self._waiters[key] = loop.create_future()
                waiters.add(waiter)
                tail = self._tails.get(key)
                if tail and tail[-1].offset == after:
                    continue  # at the newest record: only a write here can add one
                # Registered before looking, so a write in between still wakes us.
                records = await self._store.read_stream(flow_id, stream, after, limit)
                if records:
                    found[index] = records
            if not found:
                await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                found = self._sweep(positions, limit, {})
                for index, (flow_id, stream, after) in enumerate(positions):
                    if index not in found and self._from_tail(flow_id, stream, after, 1) is None:
                        waiter = self._waiters.get((flow_id, stream))
                        if waiter is None or waiter.done():  # woken, but not in the tail
                            records = await self._store.read_stream(flow_id, stream, after, limit)
                            if records:
                                found[index] = records
        if found:
            gathered = await asyncio.gather(
                *(
                    self._gather(positions[i][0], positions[i][1], records, limit, until)
                    for i, records in found.items()
                )
            )
            found = dict(zip(found, gathered, strict=True))
            found = self._sweep(positions, limit, found)
        return sorted(found.items())

    def _sweep(
        self,
        positions: Sequence[tuple[str, str, int]],
        limit: int,
        found: dict[int, list[StreamRecord]],
    ) -> dict[int, list[StreamRecord]]:
        """``found`` plus the positions not in it that this host's tails answer."""
        for index, (flow_id, stream, after) in enumerate(positions):
            if index not in found:
                records = self._from_tail(flow_id, stream, after, limit)
                if records:
                    found[index] = records
        return found

    def close(self) -> None:
        """Stop the writers (queued writes are dropped)."""
        for timer in self._timers.values():
            timer.cancel()
        for task in self._appending.values():
            task.cancel()
        self._timers.clear()
        self._appending.clear()
        self._pending.clear()
        self._queued_at.clear()
        self._tails.clear()
        for flow_id in list(self._stirred):
            self.stir(flow_id)
