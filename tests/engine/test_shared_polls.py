"""A client's long polls shared by the readers waiting on one host (``SharedPolls``).

The sharing rules run against a scripted host call that the test answers by hand
(which positions a call carries, when a newcomer's poll starts, what a reader
that got nothing does); ``StreamBuffer.wait_many``, the host's side, runs on a
real SQLite store; and readers of several runs on one real host each get their
own messages.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from dex.dexpb import dex_pb2 as pb

from dex_agents_ray.engine import SqliteStoreConfig
from dex_agents_ray.engine._polls import Position, SharedPolls
from dex_agents_ray.engine.run._streams import StreamBuffer
from dex_agents_ray.engine.store._records import Commit, StreamRecord
from dex_agents_ray.testing import wait_until
from tests.engine.flows_state import Events, StreamFlow
from tests.stores.records import entry, opened, run

TIMEOUT = 60.0


@dataclass
class _Call:
    positions: list[Position]
    timeout: float
    answer: asyncio.Future[list[tuple[int, list[StreamRecord]]]] = field(repr=False)


class _ScriptedHost:
    """A host call the test answers: every call waits until the test answers it."""

    def __init__(self) -> None:
        self.calls: list[_Call] = []
        self.changed = asyncio.Event()

    async def __call__(
        self, flow_id: str, positions: list[Position], limit: int, timeout: float
    ) -> list[tuple[int, list[StreamRecord]]]:
        assert flow_id == positions[0][0]  # the first position routes the call
        call = _Call(list(positions), timeout, asyncio.get_running_loop().create_future())
        self.calls.append(call)
        self.changed.set()
        return await call.answer

    async def calls_reach(self, count: int) -> None:
        while len(self.calls) < count:
            self.changed.clear()
            await asyncio.wait_for(self.changed.wait(), TIMEOUT)


def _record(offset: int, text: str = "x") -> StreamRecord:
    value = pb.Value(string_value=text).SerializeToString()
    return StreamRecord(offset=offset, created_at=0.0, source="s", value=value)


def _polls(host: _ScriptedHost, newcomer_delay: float = 600.0) -> SharedPolls:
    return SharedPolls(host, lambda flow_id: "one-host", 16, newcomer_delay=newcomer_delay)


async def test_readers_arriving_together_share_one_call_and_each_gets_its_own_records() -> None:
    host = _ScriptedHost()
    polls = _polls(host)
    a = asyncio.ensure_future(polls.wait("a", "events", 0, 30.0))
    b = asyncio.ensure_future(polls.wait("b", "events", 3, 30.0))
    twin = asyncio.ensure_future(polls.wait("b", "events", 3, 30.0))  # a second reader there
    await host.calls_reach(1)
    (call,) = host.calls
    assert call.positions == [("a", "events", 0), ("b", "events", 3)]
    assert 29.0 < call.timeout <= 30.0
    call.answer.set_result([(1, [_record(4)]), (0, [_record(1), _record(2)])])
    assert [r.offset for r in await a] == [1, 2]
    assert [r.offset for r in await b] == [4]
    assert [r.offset for r in await twin] == [4]
    assert len(host.calls) == 1


async def test_a_newcomer_joins_the_next_poll_when_the_one_in_flight_answers() -> None:
    host = _ScriptedHost()
    polls = _polls(host)  # newcomers never get a poll of their own in this test
    a = asyncio.ensure_future(polls.wait("a", "events", 0, 30.0))
    await host.calls_reach(1)
    b = asyncio.ensure_future(polls.wait("b", "events", 0, 30.0))
    for _ in range(20):
        await asyncio.sleep(0)
    assert len(host.calls) == 1  # b waits for the poll in flight
    host.calls[0].answer.set_result([])  # nothing for a: it polls again, with b
    await host.calls_reach(2)
    assert host.calls[1].positions == [("b", "events", 0), ("a", "events", 0)]
    host.calls[1].answer.set_result([(0, [_record(1)]), (1, [_record(1)])])
    assert [r.offset for r in await a] == [1]
    assert [r.offset for r in await b] == [1]


async def test_a_newcomer_does_not_wait_behind_an_idle_poll() -> None:
    host = _ScriptedHost()
    polls = _polls(host, newcomer_delay=0.0)
    idle = asyncio.ensure_future(polls.wait("idle", "events", 0, 30.0))
    await host.calls_reach(1)
    busy = asyncio.ensure_future(polls.wait("busy", "events", 0, 30.0))
    await host.calls_reach(2)  # its own poll, while the idle one is still in flight
    assert host.calls[1].positions == [("busy", "events", 0)]
    host.calls[1].answer.set_result([(0, [_record(1)])])
    assert [r.offset for r in await busy] == [1]
    assert not idle.done()
    host.calls[0].answer.set_result([])
    await host.calls_reach(3)  # the idle reader polls on until its deadline
    assert host.calls[2].positions == [("idle", "events", 0)]
    idle.cancel()


async def test_a_reader_past_its_deadline_gets_nothing_and_errors_reach_every_reader() -> None:
    host = _ScriptedHost()
    polls = _polls(host)
    short = asyncio.ensure_future(polls.wait("a", "events", 0, 0.0))
    long = asyncio.ensure_future(polls.wait("b", "events", 0, 30.0))
    await host.calls_reach(1)
    assert host.calls[0].timeout == 0.0  # the shortest deadline bounds the call
    host.calls[0].answer.set_result([])
    assert await short == []
    await host.calls_reach(2)
    assert host.calls[1].positions == [("b", "events", 0)]
    other = asyncio.ensure_future(polls.wait("c", "events", 0, 30.0))
    host.calls[1].answer.set_exception(RuntimeError("host gone"))
    with pytest.raises(RuntimeError, match="host gone"):
        await long
    await host.calls_reach(3)  # a reader queued behind the failed call polls on
    host.calls[2].answer.set_result([(0, [_record(7)])])
    assert [r.offset for r in await other] == [7]


async def test_a_cancelled_reader_leaves_the_others_waiting() -> None:
    host = _ScriptedHost()
    polls = _polls(host)
    gone = asyncio.ensure_future(polls.wait("a", "events", 0, 30.0))
    stays = asyncio.ensure_future(polls.wait("b", "events", 0, 30.0))
    await host.calls_reach(1)
    gone.cancel()
    host.calls[0].answer.set_result([(0, [_record(1)])])  # records for the cancelled one
    await host.calls_reach(2)
    assert host.calls[1].positions == [("b", "events", 0)]
    host.calls[1].answer.set_result([(0, [_record(2)])])
    assert [r.offset for r in await stays] == [2]
    assert gone.cancelled()


def _write(text: str) -> pb.StepStreamWrite:
    return pb.StepStreamWrite(stream_name="events", value=pb.Value(string_value=text))


def _texts(records: list[StreamRecord]) -> list[str]:
    return [pb.Value.FromString(r.value).string_value for r in records]


async def test_the_hosts_side_answers_each_position_that_has_records(tmp_path: Path) -> None:
    async with opened(SqliteStoreConfig(path=tmp_path / "s.db")) as store:
        epochs = {}
        for flow_id in ("a", "b", "c"):
            epochs[flow_id], _ = await store.runs.activate(flow_id)
            await store.runs.commit(
                Commit(flow_id=flow_id, epoch=epochs[flow_id], run=run(flow_id))
            )
        # "c" has a record this host never saw: the poll reads it from the store.
        await store.streams.append_stream(
            "c", "events", "elsewhere", _write("c1").value.SerializeToString(), 0
        )
        streams = StreamBuffer(store.streams, linger=60.0)
        positions = [("a", "events", 0), ("b", "events", 0), ("c", "events", 0)]
        assert await streams.wait_many(positions, 10, 30.0) == [
            (2, await store.streams.read_stream("c", "events", 0, 10))
        ]
        poll = asyncio.ensure_future(streams.wait_many(positions[:2], 10, 30.0))
        await asyncio.sleep(0)

        async def commit_write(flow_id: str, text: str) -> None:
            streams.write(flow_id, "events", "#X-1", _write(text))
            commit = Commit(flow_id=flow_id, epoch=epochs[flow_id], history=[entry("X-1", text)])
            commit.stream_appends = streams.take(flow_id)
            streams.written(flow_id, commit.stream_appends, await store.runs.commit(commit))

        await commit_write("b", "b1")
        answered = await poll
        assert [(i, _texts(r)) for i, r in answered] == [(1, ["b1"])]
        await commit_write("a", "a1")
        await commit_write("b", "b2")
        # Both in this host's tails: answered at once, each from its own position.
        answered = await streams.wait_many([("a", "events", 0), ("b", "events", 1)], 10, 30.0)
        assert [(i, _texts(r)) for i, r in answered] == [(0, ["a1"]), (1, ["b2"])]
        # At the newest record this host wrote: nothing within the timeout.
        assert await streams.wait_many([("a", "events", 1), ("b", "events", 2)], 10, 0.05) == []
        assert await streams.wait_many([], 10, 30.0) == []
        streams.close()


async def test_readers_of_runs_on_one_host_each_get_their_own_messages(
    engine_factory: Any,
) -> None:
    flow = StreamFlow()
    engine = await engine_factory([flow], shared_hosts=1)
    client = engine.client
    flow_ids = [f"run-{i}" for i in range(4)]
    for flow_id in flow_ids:
        await client.start_flow(flow, flow_id, 0)
    in_flight: set[tuple[str, str, int]] = set()
    call = client._call

    async def watched_call(*args: Any, **kwargs: Any) -> Any:
        if args[1] != "wait_streams":
            return await call(*args, **kwargs)
        positions = set(args[2])
        in_flight.update(positions)
        try:
            return await call(*args, **kwargs)
        finally:
            in_flight.difference_update(positions)

    client._call = watched_call
    readers = [
        asyncio.ensure_future(client.read_stream(f, Events, "", timeout=TIMEOUT)) for f in flow_ids
    ]
    await wait_until(
        "every reader in a shared poll",
        lambda: len({p[0] for p in in_flight}) == len(flow_ids),
        timeout=TIMEOUT,
    )
    for flow_id in flow_ids:
        assert await client.invoke_rpc(flow.trigger, flow_id) == "triggered"
    messages = await asyncio.gather(*readers)
    assert [m.value for m in messages] == ["late"] * len(flow_ids)
    assert [m.resume_token.split(".")[0] for m in messages] == ["1"] * len(flow_ids)
