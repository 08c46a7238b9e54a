"""Two commits merged into one (a deferred commit riding in the run's next
commit, ``RunDriver``) leave every backend exactly as the two commits would."""

from __future__ import annotations

from typing import Any

from dex_agents_ray.engine.store._records import (
    Commit,
    ExecStatus,
    PruneRequest,
    StreamAppend,
    merge_commits,
)
from dex_agents_ray.engine.store._store import FlowStore
from tests.stores.conftest import Backend
from tests.stores.records import completion, entry, execution, message, opened, run


def _append(stream: str, value: bytes) -> StreamAppend:
    return StreamAppend(stream=stream, source="Step-1", value=value, capacity_bytes=1 << 20)


def _before(fid: str, epoch: int) -> Commit:
    """What the run holds before the two commits."""
    return Commit(
        flow_id=fid,
        epoch=epoch,
        run=run(fid, active_step_types=["Old"], next_message_seq=3),
        attribute_upserts={"a": b"1", "b": b"2", "c": b"3"},
        message_appends=[message("inbox", 1, "m1", b"one"), message("inbox", 2, "m2", b"two")],
        executions=[execution("Old-1")],
        history=[entry("Old-1", "attempt_started", attempt=1)],
    )


def _first(fid: str, epoch: int) -> Commit:
    return Commit(
        flow_id=fid,
        epoch=epoch,
        run=run(fid, active_step_types=["Work"], next_message_seq=5),
        attribute_upserts={"a": b"first", "d": b"first"},
        attribute_deletes={"b"},
        message_deletes=[("inbox", "m1")],
        message_appends=[
            message("inbox", 3, "m3", b"consumed next"),
            message("inbox", 4, "m4", b"kept"),
        ],
        executions=[
            execution("Old-1", ExecStatus.COMPLETED, attempts_started=1),
            execution("Work-1", attempts_started=1),
        ],
        completions=[completion("Old-1", b"old")],
        history=[entry("Old-1", "step_completed"), entry("Work-1", "attempt_started", attempt=1)],
        rpc_request=("req-1", b"response-1"),
        stream_appends=[_append("events", b"e1"), _append("events", b"e2")],
    )


def _second(fid: str, epoch: int) -> Commit:
    return Commit(
        flow_id=fid,
        epoch=epoch,
        # Same active Step types as the first left: this commit alone would not
        # rewrite them, the merged one must (the first changed them).
        run=run(fid, active_step_types=["Work"], next_message_seq=5, counters={"Work": 1}),
        active_steps_changed=False,
        attribute_upserts={"b": b"second", "c": b"second"},
        attribute_deletes={"d"},
        message_deletes=[("inbox", "m3")],
        executions=[
            execution("Work-1", ExecStatus.WAITING, attempts_started=1),
            execution("Next-1"),
        ],
        completions=[completion("Work-1", b"work")],
        history=[entry("Work-1", "step_completed")],
        stream_appends=[_append("events", b"e3"), _append("other", b"o1")],
        prune=PruneRequest(keep_finished_executions=10, keep_rpc_requests=10),
    )


async def _contents(store: FlowStore, fid: str) -> dict[str, Any]:
    _, loaded = await store.runs.activate(fid)
    assert loaded is not None
    return {
        "run": (loaded.run.active_step_types, loaded.run.counters, loaded.run.next_message_seq),
        "attributes": loaded.attributes,
        "messages": [(m.channel, m.seq, m.message_id, m.value) for m in loaded.messages],
        "executions": [(e.exec_id, e.status, e.attempts_started) for e in loaded.executions],
        "completions": loaded.completions,
        "history": [(h.exec_id, h.event, h.detail) for h in await store.runs.history(fid)],
        "rpc": await store.runs.rpc_response(fid, "req-1"),
        "events": [
            (r.offset, r.value) for r in await store.streams.read_stream(fid, "events", 0, 10)
        ],
        "other": [
            (r.offset, r.value) for r in await store.streams.read_stream(fid, "other", 0, 10)
        ],
        "active": [r.flow_id for r in await store.runs.list_runs(active_step_type="Work")],
    }


async def test_a_merged_commit_leaves_the_store_as_the_two_commits_do(backend: Backend) -> None:
    async with opened(backend.config) as store:
        apart, _ = await store.runs.activate("apart")
        await store.runs.commit(_before("apart", apart))
        first = await store.runs.commit(_first("apart", apart))
        second = await store.runs.commit(_second("apart", apart))

        together, _ = await store.runs.activate("together")
        await store.runs.commit(_before("together", together))
        merged = merge_commits(_first("together", together), _second("together", together))
        assert merged is not None
        offsets = await store.runs.commit(merged)

        # Each commit's Stream offsets, in order: the driver splits them by count.
        assert offsets == first + second
        expected = await _contents(store, "apart")
        found = await _contents(store, "together")
        assert found["active"] == ["apart", "together"]
        expected["active"] = found["active"]
        assert found == expected
        # What the merge leaves out never reaches the store: m3 was appended and consumed.
        assert [m[2] for m in found["messages"]] == ["m2", "m4"]
        assert found["attributes"] == {"a": b"first", "b": b"second", "c": b"second"}


def test_commits_of_another_run_or_epoch_or_two_rpc_responses_do_not_merge() -> None:
    assert merge_commits(_first("a", 1), _second("b", 1)) is None
    assert merge_commits(_first("a", 1), _second("a", 2)) is None
    with_rpc = _second("a", 1)
    with_rpc.rpc_request = ("req-2", b"response-2")
    assert merge_commits(_first("a", 1), with_rpc) is None
    # A second without a run row keeps the first's, and whether it changed.
    bare = Commit(flow_id="a", epoch=1, attribute_upserts={"x": b"1"})
    merged = merge_commits(_first("a", 1), bare)
    assert merged is not None
    assert merged.run == _first("a", 1).run and merged.active_steps_changed
    assert merged.rpc_request == ("req-1", b"response-1")
