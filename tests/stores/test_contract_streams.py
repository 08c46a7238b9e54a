"""The ``FlowStore`` contract for Streams, on every backend: offsets, reads, trimming."""

from __future__ import annotations

import asyncio

import pytest

from dex_agents_ray.engine import StaleEpochError
from dex_agents_ray.engine.store._records import Commit, StreamAppend
from tests.stores.conftest import Backend
from tests.stores.records import entry, opened, run


async def test_offsets_count_per_stream_and_reads_page_both_ways(backend: Backend) -> None:
    async with opened(backend.config) as store:
        offsets = [
            await store.streams.append_stream("a", "events", f"Step-{i}", f"v{i}".encode(), 0)
            for i in range(1, 5)
        ]
        assert offsets == [1, 2, 3, 4]
        assert await store.streams.append_stream("a", "other", "rpc", b"x", 0) == 1
        assert await store.streams.append_stream("b", "events", "rpc", b"y", 0) == 1

        after = await store.streams.read_stream("a", "events", 1, 10)
        assert [(r.offset, r.source, r.value) for r in after] == [
            (2, "Step-2", b"v2"),
            (3, "Step-3", b"v3"),
            (4, "Step-4", b"v4"),
        ]
        assert [r.offset for r in await store.streams.read_stream("a", "events", 0, 2)] == [1, 2]
        assert await store.streams.read_stream("a", "events", 4, 10) == []
        assert after[0].created_at > 0

        newest = await store.streams.list_stream("a", "events", None, 2)
        assert [r.offset for r in newest] == [4, 3]
        assert [r.offset for r in await store.streams.list_stream("a", "events", 3, 10)] == [2, 1]
        assert await store.streams.list_stream("a", "events", 1, 10) == []
        assert await store.streams.list_stream("a", "missing", None, 10) == []


async def test_capacity_trims_the_oldest_and_always_keeps_the_newest(backend: Backend) -> None:
    async with opened(backend.config) as store:
        for i in range(1, 5):
            await store.streams.append_stream("a", "s", "src", b"%04d" % i, 10)
        kept = await store.streams.read_stream("a", "s", 0, 10)
        assert [(r.offset, r.value) for r in kept] == [(3, b"0003"), (4, b"0004")]

        # A message larger than the capacity is kept alone; offsets go on.
        assert await store.streams.append_stream("a", "s", "src", b"x" * 20, 10) == 5
        assert [r.offset for r in await store.streams.read_stream("a", "s", 0, 10)] == [5]
        assert await store.streams.append_stream("a", "s", "src", b"yy", 10) == 6
        assert [r.offset for r in await store.streams.read_stream("a", "s", 0, 10)] == [6]
        assert await store.streams.append_stream("a", "s", "src", b"zz", 10) == 7
        assert [r.offset for r in await store.streams.read_stream("a", "s", 0, 10)] == [6, 7]


async def test_concurrent_appends_get_distinct_offsets(backend: Backend) -> None:
    async with opened(backend.config) as first, opened(backend.config) as second:
        offsets = await asyncio.gather(
            *(
                store.streams.append_stream("a", "s", "src", b"v", 0)
                for _ in range(10)
                for store in (first, second)
            )
        )
        assert sorted(offsets) == list(range(1, 21))
        assert len(await first.streams.read_stream("a", "s", 0, 100)) == 20


async def test_a_batch_appends_in_order_in_one_transaction(backend: Backend) -> None:
    async with opened(backend.config) as store:
        await store.streams.append_stream("a", "s", "src", b"0001", 10)
        batch = [
            StreamAppend(stream="s", source="Step-1", value=b"0002", capacity_bytes=10),
            StreamAppend(stream="t", source="Step-1", value=b"t1", capacity_bytes=0),
            StreamAppend(stream="s", source="Step-2", value=b"0003", capacity_bytes=10),
            StreamAppend(stream="s", source="Step-2", value=b"0004", capacity_bytes=10),
        ]
        assert await store.streams.append_streams("a", batch) == [2, 1, 3, 4]
        kept = await store.streams.read_stream("a", "s", 0, 10)
        assert [(r.offset, r.source, r.value) for r in kept] == [
            (3, "Step-2", b"0003"),
            (4, "Step-2", b"0004"),
        ]
        assert [r.value for r in await store.streams.read_stream("a", "t", 0, 10)] == [b"t1"]
        assert await store.streams.append_streams("a", []) == []


async def test_a_commit_carries_stream_appends_and_returns_their_offsets(
    backend: Backend,
) -> None:
    async with opened(backend.config) as store:
        epoch, _ = await store.runs.activate("a")
        await store.runs.commit(Commit(flow_id="a", epoch=epoch, run=run("a")))
        assert await store.streams.append_stream("a", "events", "rpc", b"first", 0) == 1
        appends = [
            StreamAppend(stream="events", source="#X-1", value=b"v2", capacity_bytes=0),
            StreamAppend(stream="other", source="#X-1", value=b"o1", capacity_bytes=0),
            StreamAppend(stream="events", source="#X-1", value=b"v3", capacity_bytes=4),
        ]
        offsets = await store.runs.commit(
            Commit(flow_id="a", epoch=epoch, history=[entry("X-1", "done")], stream_appends=appends)
        )
        assert offsets == [2, 1, 3]
        # The trim of the third append applied in the same transaction.
        assert [
            (r.offset, r.value) for r in await store.streams.read_stream("a", "events", 0, 10)
        ] == [
            (2, b"v2"),
            (3, b"v3"),
        ]
        assert [r.value for r in await store.streams.read_stream("a", "other", 0, 10)] == [b"o1"]


async def test_a_refused_commit_appends_none_of_its_stream_writes(backend: Backend) -> None:
    async with opened(backend.config) as old, opened(backend.config) as new:
        stale, _ = await old.runs.activate("a")
        await new.runs.activate("a")
        appends = [StreamAppend(stream="events", source="#X-1", value=b"v", capacity_bytes=0)]
        with pytest.raises(StaleEpochError):
            await old.runs.commit(Commit(flow_id="a", epoch=stale, stream_appends=appends))
        assert await new.streams.read_stream("a", "events", 0, 10) == []
