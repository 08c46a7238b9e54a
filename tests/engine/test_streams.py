"""A host's Stream writes on their way to the store (``StreamBuffer``), on a real
SQLite store: a write rides in its run's next commit or is appended alone after
the linger, and long polls answer with the records, from the tail it keeps or
from the store."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from dex.dexpb import dex_pb2 as pb

from dex_agents_ray.engine import SqliteStoreConfig
from dex_agents_ray.engine.run._streams import StreamBuffer
from dex_agents_ray.engine.store._records import Commit, StreamAppend
from tests.stores.records import entry, opened, run


def _write(text: str) -> pb.StepStreamWrite:
    return pb.StepStreamWrite(stream_name="events", value=pb.Value(string_value=text))


def _texts(records: list[object]) -> list[str]:
    return [pb.Value.FromString(r.value).string_value for r in records]  # type: ignore[attr-defined]


async def test_writes_ride_the_next_commit_and_long_polls_get_them(tmp_path: Path) -> None:
    async with opened(SqliteStoreConfig(path=tmp_path / "s.db")) as store:
        epoch, _ = await store.runs.activate("a")
        await store.runs.commit(Commit(flow_id="a", epoch=epoch, run=run("a")))
        # A long linger: only the commit can have written them.
        streams = StreamBuffer(store.streams, linger=60.0)
        poll = asyncio.ensure_future(streams.wait("a", "events", 0, 10, 30.0))
        await asyncio.sleep(0)
        streams.write("a", "events", "#X-1", _write("one"))
        streams.write("a", "events", "#X-1", _write("two"))
        taken = streams.take("a")
        assert [t.source for t in taken] == ["#X-1", "#X-1"]
        assert streams.take("a") == []
        commit = Commit(flow_id="a", epoch=epoch, history=[entry("X-1", "done")])
        commit.stream_appends = taken
        offsets = await store.runs.commit(commit)
        streams.written("a", taken, offsets)
        assert _texts(await poll) == ["one", "two"]
        assert [r.offset for r in await store.streams.read_stream("a", "events", 0, 10)] == [1, 2]
        # Served from the tail: a read past the newest waits, one inside it does not.
        assert _texts(await streams.wait("a", "events", 1, 10, 0.0)) == ["two"]
        assert await streams.wait("a", "events", 2, 10, 0.0) == []
        streams.close()


async def test_a_write_no_commit_takes_is_appended_alone(tmp_path: Path) -> None:
    async with opened(SqliteStoreConfig(path=tmp_path / "s.db")) as store:
        streams = StreamBuffer(store.streams, linger=0.001)
        poll = asyncio.ensure_future(streams.wait("a", "events", 0, 10, 30.0))
        await asyncio.sleep(0)
        streams.write("a", "events", "rpc", _write("alone"))
        assert _texts(await poll) == ["alone"]
        assert _texts(await store.streams.read_stream("a", "events", 0, 10)) == ["alone"]
        streams.close()


async def test_a_busy_runs_write_waits_for_its_commit_up_to_the_busy_linger(
    tmp_path: Path,
) -> None:
    async with opened(SqliteStoreConfig(path=tmp_path / "s.db")) as store:
        busy = True
        streams = StreamBuffer(store.streams, linger=0.001, busy=lambda _: busy, busy_linger=60.0)
        checks = _counting_due(streams)
        checks.append(asyncio.get_running_loop().create_future())
        streams.write("a", "events", "#X-1", _write("kept"))
        await checks[0]  # the linger is over: the run is busy, so the write waits
        assert _texts(streams.take("a")) == ["kept"]  # ...for the commit to take it
        # Once the run is no longer busy, the linger alone decides.
        busy = False
        await _a_write_is_appended_alone(streams)
        streams.close()


async def test_a_busy_runs_write_is_appended_alone_after_the_busy_linger(
    tmp_path: Path,
) -> None:
    async with opened(SqliteStoreConfig(path=tmp_path / "s.db")) as store:
        streams = StreamBuffer(store.streams, linger=0.001, busy=lambda _: True, busy_linger=0.002)
        poll = asyncio.ensure_future(streams.wait("a", "events", 0, 10, 30.0))
        await asyncio.sleep(0)
        streams.write("a", "events", "#X-1", _write("streamed"))
        assert _texts(await poll) == ["streamed"]
        assert _texts(await store.streams.read_stream("a", "events", 0, 10)) == ["streamed"]
        streams.close()


async def test_a_committing_runs_writes_wait_for_its_commit_past_every_linger(
    tmp_path: Path,
) -> None:
    """A Step's result on its way to its commit (a loaded host): its writes are
    not appended alone, however late the commit comes, so they ride in it."""
    async with opened(SqliteStoreConfig(path=tmp_path / "s.db")) as store:
        committing = True
        streams = StreamBuffer(
            store.streams,
            linger=0.001,
            busy=lambda _: True,
            busy_linger=0.001,
            committing=lambda _: committing,
        )
        checks = _counting_due(streams)
        streams.write("a", "events", "#X-1", _write("end"))
        for _ in range(3):  # past the linger and the busy linger, still queued
            checks[:] = [asyncio.get_running_loop().create_future()]
            await checks[0]
        assert streams._pending["a"] and "a" not in streams._appending
        assert _texts(streams.take("a")) == ["end"]
        # Once nothing commits, the linger decides again.
        committing = False
        await _a_write_is_appended_alone(streams)
        streams.close()


class _HeldAppends:
    """A Stream store whose appends wait until ``release`` is set."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def append_streams(self, flow_id: str, appends: Any) -> list[int]:
        self.started.set()
        await self.release.wait()
        return list(await self._inner.append_streams(flow_id, appends))


async def test_appended_waits_for_the_runs_append_in_flight(tmp_path: Path) -> None:
    """A commit asks first (``RunDriver`` before every store commit): the run's
    earlier writes on their way alone land before it."""
    async with opened(SqliteStoreConfig(path=tmp_path / "s.db")) as store:
        held = _HeldAppends(store.streams)
        streams = StreamBuffer(held, linger=0.001)
        assert (await asyncio.wait_for(streams.appended("a"), 5)) is None  # none in flight
        streams.write("a", "events", "#X-1", _write("delta"))
        await held.started.wait()
        waiting = asyncio.ensure_future(streams.appended("a"))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not waiting.done()
        held.release.set()
        await asyncio.wait_for(waiting, 30)
        assert _texts(await store.streams.read_stream("a", "events", 0, 10)) == ["delta"]
        streams.close()


async def test_a_gap_or_a_forgotten_run_falls_back_to_the_store(tmp_path: Path) -> None:
    async with opened(SqliteStoreConfig(path=tmp_path / "s.db")) as store:
        for text in ("a1", "a2", "a3"):
            await store.streams.append_stream(
                "a", "events", "other-host", _write(text).value.SerializeToString(), 0
            )
        streams = StreamBuffer(store.streams)
        # This host saw only offset 3: a poll from 0 reads the store, not the tail.
        appended = StreamAppend(
            stream="events",
            source="x",
            value=_write("a3").value.SerializeToString(),
            capacity_bytes=0,
        )
        streams.written("a", [appended], [3])
        assert _texts(await streams.wait("a", "events", 0, 10, 0.0)) == ["a1", "a2", "a3"]
        # Offsets not known (a retried commit): the tail is dropped, the store answers.
        streams.written("a", [appended], [])
        assert _texts(await streams.wait("a", "events", 2, 10, 0.0)) == ["a3"]
        streams.forget("a")
        assert _texts(await streams.wait("a", "events", 1, 1, 0.0)) == ["a2"]
        streams.close()


async def _spin() -> None:
    """Let every callback that is ready run (a woken poll answers within these)."""
    for _ in range(50):
        await asyncio.sleep(0)


async def _commit_write(store: object, streams: StreamBuffer, epoch: int, text: str) -> None:
    """One commit of run ``a`` that carries one queued Stream write."""
    streams.write("a", "events", "#X-1", _write(text))
    commit = Commit(flow_id="a", epoch=epoch, history=[entry("X-1", text)])
    commit.stream_appends = streams.take("a")
    offsets = await store.runs.commit(commit)  # type: ignore[attr-defined]
    streams.written("a", commit.stream_appends, offsets)


async def test_a_long_poll_of_a_busy_run_gathers_its_burst_until_it_settles(
    tmp_path: Path,
) -> None:
    async with opened(SqliteStoreConfig(path=tmp_path / "s.db")) as store:
        epoch, _ = await store.runs.activate("a")
        await store.runs.commit(Commit(flow_id="a", epoch=epoch, run=run("a")))
        busy = True
        streams = StreamBuffer(store.streams, linger=60.0, busy=lambda _: busy, batch_window=60.0)
        poll = asyncio.ensure_future(streams.wait("a", "events", 0, 10, 30.0))
        await asyncio.sleep(0)
        await _commit_write(store, streams, epoch, "one")
        await _spin()
        assert not poll.done()  # the run is busy: the poll waits for what follows
        await _commit_write(store, streams, epoch, "two")
        await _spin()
        assert not poll.done()
        busy = False
        streams.stir("a")  # a commit that leaves the run only waiting, no write
        assert _texts(await poll) == ["one", "two"]
        # A settled run's poll answers at once, whatever the window.
        assert _texts(await streams.wait("a", "events", 0, 10, 30.0)) == ["one", "two"]
        streams.close()


async def test_a_long_poll_answers_after_the_window_or_at_its_limit(tmp_path: Path) -> None:
    async with opened(SqliteStoreConfig(path=tmp_path / "s.db")) as store:
        epoch, _ = await store.runs.activate("a")
        await store.runs.commit(Commit(flow_id="a", epoch=epoch, run=run("a")))
        streams = StreamBuffer(store.streams, linger=60.0, busy=lambda _: True, batch_window=0.2)
        poll = asyncio.ensure_future(streams.wait("a", "events", 0, 10, 30.0))
        await asyncio.sleep(0)
        await _commit_write(store, streams, epoch, "one")
        # Busy for ever: the window ends the wait with what came.
        assert _texts(await asyncio.wait_for(poll, 10)) == ["one"]
        poll = asyncio.ensure_future(streams.wait("a", "events", 1, 2, 30.0))
        await asyncio.sleep(0)
        await _commit_write(store, streams, epoch, "two")
        await _commit_write(store, streams, epoch, "three")
        await _commit_write(store, streams, epoch, "four")
        assert _texts(await poll) == ["two", "three"]  # the limit ends it first
        # The poll's own timeout bounds the gathering too.
        patient = StreamBuffer(store.streams, busy=lambda _: True, batch_window=60.0)
        assert _texts(await asyncio.wait_for(patient.wait("a", "events", 2, 10, 0.0), 10)) == [
            "three",
            "four",
        ]
        patient.close()
        # A zero window answers at once, busy or not.
        unbatched = StreamBuffer(store.streams, busy=lambda _: True, batch_window=0.0)
        assert _texts(await unbatched.wait("a", "events", 3, 10, 30.0)) == ["four"]
        unbatched.close()
        streams.close()


def _counting_due(streams: StreamBuffer) -> list[asyncio.Future[None]]:
    """A list whose first future, put there by the test, resolves the next time
    ``streams`` checks a run's linger."""
    checks: list[asyncio.Future[None]] = []
    due = streams._due

    def counted(flow_id: str) -> None:
        due(flow_id)
        if checks and not checks[0].done():
            checks[0].set_result(None)

    streams._due = counted  # type: ignore[method-assign]
    return checks


async def _a_write_is_appended_alone(streams: StreamBuffer) -> None:
    """A write of run ``a`` now reaches a long poll on its own (no commit takes it)."""
    poll = asyncio.ensure_future(streams.wait("a", "events", 0, 10, 30.0))
    await asyncio.sleep(0)
    streams.write("a", "events", "#X-1", _write("alone"))
    assert _texts(await poll) == ["alone"]
