"""State: Attributes, AttributeMaps and load options, Channel message IDs, Streams,
heartbeat checkpoints."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from dex import FlowStatus, IdReusePolicy, LongPollTimeoutError, StartFlowOptions
from dex.dexpb import dex_pb2 as pb

from dex_agents_ray.engine import InvalidStreamTokenError
from dex_agents_ray.testing import FileGate
from tests.engine.flows_state import (
    SMALL_CAPACITY,
    AttributeFlow,
    AttributeMapFlow,
    BurstFlow,
    ChannelFlow,
    CheckpointFlow,
    Events,
    Small,
    SmallStreamFlow,
    StreamFlow,
)
from tests.engine.polling import details, eventually

TIMEOUT = 60


async def _output(engine: Any, flow: Any, flow_id: str, input: Any) -> dict[str, Any]:
    await engine.client.start_flow(flow, flow_id, input)
    result = await engine.client.wait_for_flow(flow_id, timeout=TIMEOUT)
    assert result.status is FlowStatus.COMPLETED, result.error_message
    report: dict[str, Any] = result.single_output(dict[str, Any])
    return report


async def test_attributes_set_read_and_delete(engine_factory: Any) -> None:
    flow = AttributeFlow()
    engine = await engine_factory([flow])
    report = await _output(engine, flow, "attributes", "hello")
    assert report["before"] == [0, None]  # unset: the type's zero value, or None
    assert report["staged"] == [5, "hello"]  # a handler reads its own staged writes
    assert report["committed"] == [5, "hello"]  # the next Step reads the committed values
    assert report["deleted"] == [0, None]


async def test_attribute_map_instances_load_only_when_selected(engine_factory: Any) -> None:
    flow = AttributeMapFlow()
    engine = await engine_factory([flow])
    report = await _output(engine, flow, "notes", "-")
    assert report["nothing"] == "AttributeMapNotLoadedError"
    assert report["one"] == "A B"
    assert report["other"] == "AttributeMapNotLoadedError"
    assert report["one_keys"] == "AttributeMapNotLoadedError"
    assert report["all"] == {"a": "A", "a b": "A B", "b": "B"}
    assert report["size"] == 3
    assert report["staged_keys"] == ["a", "a b"]
    assert report["after_delete"] == ["a", "a b"]


async def test_channel_messages_have_ids_and_deletions_apply_before_publications(
    engine_factory: Any,
) -> None:
    flow = ChannelFlow()
    engine = await engine_factory([flow])
    report = await _output(engine, flow, "channels", "-")
    assert report["values"] == ["m1", "m2", "m3"]
    ids = report["ids"]
    assert len(set(ids)) == 3 and report["uuid7"] is True
    assert report["found"] == "m2"
    assert report["size_after_edits"] == 3
    # m2 was deleted and m4 published in one result: both applied, FIFO kept.
    assert report["after"] == [[ids[0], "m1"], [ids[2], "m3"], [report["after"][2][0], "m4"]]
    assert report["after"][2][0] not in ids
    assert report["boxed"] == ["k1", "k2"]
    assert report["other_box"] == "ChannelMessagesNotLoadedError"
    assert report["box_keys"] == ["k", "other"]
    assert report["box_count"] == 2
    assert report["boxes_after"] == {"k": ["k2"], "other": ["o1"]}


async def test_stream_reads_resume_from_tokens_and_carry_the_writing_step(
    engine_factory: Any,
) -> None:
    flow = StreamFlow()
    engine = await engine_factory([flow])
    client = engine.client
    await client.start_flow(flow, "stream", 3)
    token = ""
    seen = []
    for _ in range(3):
        message = await client.read_stream("stream", Events, token, timeout=30)
        seen.append((message.value, message.source))
        assert _offset(message.resume_token) > _offset(token)
        token = message.resume_token
    assert seen == [
        ("g0", "#WritesFromGenerator-1"),
        ("g1", "#WritesFromGenerator-1"),
        ("g2", "#WritesFromGenerator-1"),
    ]
    with pytest.raises(LongPollTimeoutError):
        await client.read_stream("stream", Events, token, timeout=1)
    # A long poll in progress wakes up for a write that happens while it waits.
    pending = asyncio.ensure_future(client.read_stream("stream", Events, token, timeout=30))
    assert await client.invoke_rpc(flow.trigger, "stream") == "triggered"
    late = await pending
    assert (late.value, late.source) == ("late", "#WaitsForTrigger-1")
    assert (await client.wait_for_flow("stream", timeout=TIMEOUT)).status is FlowStatus.COMPLETED


async def test_list_stream_messages_pages_newest_first(engine_factory: Any) -> None:
    flow = StreamFlow()
    engine = await engine_factory([flow])
    client = engine.client
    await client.start_flow(flow, "pages", 5)
    first = await eventually(
        lambda: client.list_stream_messages("pages", Events, 2),
        lambda page: bool(page.messages) and page.messages[0].value == "g4",
    )
    pages = [[m.value for m in first.messages]]
    token = first.next_page_token
    while token:
        page = await client.list_stream_messages("pages", Events, 2, token)
        pages.append([m.value for m in page.messages])
        token = page.next_page_token
    assert pages == [["g4", "g3"], ["g2", "g1"], ["g0"]]


async def test_stream_capacity_trims_the_oldest_messages(engine_factory: Any) -> None:
    flow = SmallStreamFlow()
    engine = await engine_factory([flow])
    client = engine.client
    await client.start_flow(flow, "small", 10)
    written = [f"s-{i:08d}" for i in range(10)]
    page = await eventually(
        lambda: client.list_stream_messages("small", Small, 100),
        lambda p: bool(p.messages) and p.messages[0].value == written[-1],
    )
    kept: list[str] = []
    used = 0
    for value in reversed(written):
        used += pb.Value(string_value=value).ByteSize()
        if used > SMALL_CAPACITY:
            break
        kept.insert(0, value)
    assert 0 < len(kept) < len(written)
    assert [m.value for m in reversed(page.messages)] == kept
    oldest = await client.read_stream("small", Small, "", timeout=5)
    assert oldest.value == kept[0]


async def test_heartbeat_checkpoint_is_read_by_the_next_attempt(engine_factory: Any) -> None:
    flow = CheckpointFlow()
    engine = await engine_factory([flow])
    seen = await _output(engine, flow, "checkpoint", "-")
    assert seen == {"attempt": 2, "has": True, "value": 20}
    history = await engine.client.read_step_history("checkpoint")
    [failure] = details(history, "Checkpointed-1", "attempt_failed")
    assert "'has': False" in failure["error"]


async def test_stream_offsets_go_on_across_runs_of_a_flow_id_and_reads_ahead_stay_exact(
    engine_factory: Any,
) -> None:
    flow = StreamFlow()
    engine = await engine_factory([flow])
    client = engine.client
    await client.start_flow(flow, "again", 3)
    await eventually(
        lambda: engine.store.streams.read_stream("again", Events.name, 0, 10), lambda r: len(r) == 3
    )
    first = await client.read_stream("again", Events, "", timeout=30)  # reads ahead g1, g2
    assert (first.value, _offset(first.resume_token)) == ("g0", 1)
    assert await client.invoke_rpc(flow.trigger, "again") == "triggered"
    assert (await client.wait_for_flow("again", timeout=TIMEOUT)).status is FlowStatus.COMPLETED

    reuse = StartFlowOptions(id_reuse_policy=IdReusePolicy.ALLOW_IF_NOT_RUNNING)
    await client.start_flow(flow, "again", 1, reuse)
    token, seen = first.resume_token, []
    for _ in range(4):
        message = await client.read_stream("again", Events, token, timeout=30)
        seen.append((_offset(message.resume_token), message.value))
        token = message.resume_token
    # The first run's messages, then the new run's, each once and in order.
    assert seen == [(2, "g1"), (3, "g2"), (4, "late"), (5, "g0")]
    with pytest.raises(LongPollTimeoutError):
        await client.read_stream("again", Events, token, timeout=1)
    # A token is bound to its run and Stream: another run's, or a forged one, is refused.
    await client.start_flow(flow, "other", 1)
    for bad in (token, "1", "1.000000000000", "x"):
        with pytest.raises(InvalidStreamTokenError):
            await client.read_stream("other", Events, bad, timeout=1)


def _offset(token: str) -> int:
    """The Stream offset a resume token carries (``<offset>.<tag>``; ``""`` is 0)."""
    return int(token.split(".")[0]) if token else 0


@pytest.mark.parametrize("window", [5.0, 0.0])
async def test_a_long_poll_of_a_busy_run_answers_with_the_writes_of_its_next_commits(
    engine_factory: Any, tmp_path: Path, window: float
) -> None:
    flow = BurstFlow()
    engine = await engine_factory([flow], stream_batch_window=timedelta(seconds=window))
    client = engine.client
    await client.start_flow(flow, "burst", str(tmp_path))
    assert await client.invoke_rpc(flow.trigger, "burst") == "triggered"
    gate = FileGate(tmp_path, "second")
    await gate.wait_until_reached()  # "first" is durable; the run is busy behind the gate
    # The host's long poll itself (what read_stream calls when the store has nothing).
    poll = asyncio.ensure_future(client._call("burst", "wait_stream", Events.name, 0, 16, 30.0))
    if window == 0:
        assert _texts(await poll) == ["first"]  # at once, busy or not
        gate.release()
        return
    done, _ = await asyncio.wait([poll], timeout=0.5)
    assert not done  # the run is busy: the poll waits for what follows
    gate.release()
    # Answered once the run settles (WaitsForTrigger waits), not at the 5 s window.
    assert _texts(await asyncio.wait_for(poll, 4.0)) == ["first", "second"]
    message = await client.read_stream("burst", Events, "", timeout=30)
    assert message.value == "first"


def _texts(records: list[Any]) -> list[str]:
    return [pb.Value.FromString(r.value).string_value for r in records]


async def test_a_reader_at_the_tail_a_long_poll_gave_polls_the_host_without_a_store_read(
    engine_factory: Any,
) -> None:
    flow = StreamFlow()
    engine = await engine_factory([flow])
    client = engine.client
    await client.start_flow(flow, "tail", 0)
    polling = asyncio.Event()
    call = client._call

    async def watched_call(*args: Any, **kwargs: Any) -> Any:
        if args[1] == "wait_streams":
            polling.set()
        return await call(*args, **kwargs)

    client._call = watched_call
    pending = asyncio.ensure_future(client.read_stream("tail", Events, "", timeout=30))
    await asyncio.wait_for(polling.wait(), TIMEOUT)
    assert await client.invoke_rpc(flow.trigger, "tail") == "triggered"
    late = await pending  # from the long poll: the newest message when it answered
    assert late.value == "late"

    store_reads: list[int] = []
    read = engine.store.streams.read_stream

    async def counted_read(*args: Any, **kwargs: Any) -> Any:
        store_reads.append(args[2])
        return await read(*args, **kwargs)

    engine.store.streams.read_stream = counted_read
    with pytest.raises(LongPollTimeoutError):
        await client.read_stream("tail", Events, late.resume_token, timeout=1)
    assert store_reads == []  # straight back to the host's long poll
    again = await client.read_stream("tail", Events, "", timeout=30)
    assert again.value == "late"
    assert store_reads == [0]  # a position no long poll answered is read from the store
