"""The ``FlowStore`` contract for runs, on every backend: epochs, commits, reads."""

from __future__ import annotations

import pytest

from dex_agents_ray.engine import StaleEpochError
from dex_agents_ray.engine.store._records import SCHEMA_VERSION, Commit, ExecStatus, RunStatus
from dex_agents_ray.engine.store._run_rows import PER_RUN_TABLES
from tests.stores.conftest import Backend
from tests.stores.records import completion, entry, execution, message, opened, run


async def test_activation_bumps_the_epoch_and_a_new_run_loads_as_none(backend: Backend) -> None:
    async with opened(backend.config) as store:
        assert await store.runs.activate("a") == (1, None)
        assert await store.runs.activate("a") == (2, None)
        assert await store.runs.activate("b") == (1, None)
        assert await store.runs.get_run("a") is None
        assert await store.runs.list_runs() == []


async def test_a_commit_from_a_superseded_epoch_is_refused_and_changes_nothing(
    backend: Backend,
) -> None:
    async with opened(backend.config) as store:
        first, _ = await store.runs.activate("a")
        second, _ = await store.runs.activate("a")
        stale = Commit(flow_id="a", epoch=first, run=run("a"), attribute_upserts={"k": b"v"})

        with pytest.raises(StaleEpochError) as refused:
            await store.runs.commit(stale)

        assert (refused.value.flow_id, refused.value.epoch) == ("a", first)
        assert refused.value.current == second
        assert await store.runs.get_run("a") is None
        with pytest.raises(StaleEpochError) as never_activated:
            await store.runs.commit(Commit(flow_id="b", epoch=1, run=run("b")))
        assert never_activated.value.current is None
        await store.runs.commit(Commit(flow_id="a", epoch=second, run=run("a")))
        found = await store.runs.get_run("a")
        assert found is not None and found.epoch == second


async def test_commit_contents_round_trip_through_activation(backend: Backend) -> None:
    async with opened(backend.config) as store:
        epoch, _ = await store.runs.activate("a")
        started = run(
            "a",
            counters={"Work": 2},
            next_message_seq=3,
            active_step_types=["Work"],
            search_attributes={"owner": "ann", "n": 2},
            start_request_id="req-0",
            active_step_search_mode="with_wait_for",
        )
        await store.runs.commit(
            Commit(
                flow_id="a",
                epoch=epoch,
                run=started,
                attribute_upserts={"gone": b"1", "kept": b"old", "bin": b"\x00\xff"},
                message_appends=[
                    message("inbox", 1, "m1", b"first"),
                    message("inbox/x", 2, "m2", b"second"),
                ],
                executions=[execution("Work-1"), execution("Wait-1", ExecStatus.WAITING)],
                completions=[completion("Work-0", b"out-0")],
                history=[entry("Work-1", "attempt_started", attempt=1)],
                rpc_request=("req-1", b"response-1"),
            )
        )
        done = execution(
            "Work-1",
            ExecStatus.COMPLETED,
            attempts_started=1,
            locals={"x": b"1"},
            condition_results=b"\x0aresults",
            taken=("m0", "m9"),
        )
        await store.runs.commit(
            Commit(
                flow_id="a",
                epoch=epoch,
                attribute_upserts={"kept": b"new", "added": b"3"},
                attribute_deletes={"gone"},
                # Deletes apply before appends: a re-used message ID survives.
                message_deletes=[("inbox", "m1")],
                message_appends=[message("inbox", 3, "m1", b"again")],
                executions=[done],
                completions=[completion("Work-1", b"out-1"), completion("Work-2", b"")],
                history=[entry("Work-1", "step_completed", nested={"a": [1, None]})],
            )
        )

        epoch2, loaded = await store.runs.activate("a")

        assert epoch2 == epoch + 1 and loaded is not None
        assert loaded.run == run(
            "a",
            epoch=epoch2,
            counters={"Work": 2},
            next_message_seq=3,
            active_step_types=["Work"],
            search_attributes={"owner": "ann", "n": 2},
            start_request_id="req-0",
            active_step_search_mode="with_wait_for",
        )
        assert loaded.attributes == {"kept": b"new", "added": b"3", "bin": b"\x00\xff"}
        assert [(m.channel, m.seq, m.message_id, m.value) for m in loaded.messages] == [
            ("inbox/x", 2, "m2", b"second"),
            ("inbox", 3, "m1", b"again"),
        ]
        # Executions load in the order they were last written.
        assert [e.exec_id for e in loaded.executions] == ["Wait-1", "Work-1"]
        assert loaded.executions[1] == done
        assert loaded.executions[0] == execution("Wait-1", ExecStatus.WAITING)
        assert [(c.exec_id, c.output) for c in loaded.completions] == [
            ("Work-0", b"out-0"),
            ("Work-1", b"out-1"),
            ("Work-2", b""),
        ]
        assert await store.runs.completions("a") == loaded.completions
        history = await store.runs.history("a")
        assert [(h.exec_id, h.event, h.detail) for h in history] == [
            ("Work-1", "attempt_started", {"attempt": 1}),
            ("Work-1", "step_completed", {"nested": {"a": [1, None]}}),
        ]
        assert history[0].at == 1001.25
        assert await store.runs.rpc_response("a", "req-1") == b"response-1"
        assert await store.runs.rpc_response("a", "req-2") is None
        found = await store.runs.get_run("a")
        assert found is not None and found.epoch == epoch2


async def test_replace_run_drops_the_earlier_runs_state(
    backend: Backend,
) -> None:
    async with opened(backend.config) as store:
        epoch, _ = await store.runs.activate("a")
        await store.runs.commit(
            Commit(
                flow_id="a",
                epoch=epoch,
                run=run("a", status=RunStatus.COMPLETED, closed_at=1002.0),
                attribute_upserts={"old": b"1"},
                message_appends=[message("inbox", 1, "m1", b"x")],
                executions=[execution("Work-1", ExecStatus.COMPLETED)],
                completions=[completion("Work-1", b"done")],
                history=[entry("Work-1", "step_completed")],
                rpc_request=("req-1", b"r"),
            )
        )
        await store.runs.commit(
            Commit(
                flow_id="a",
                epoch=epoch,
                run=run("a", run_id="run-2", started_at=2000.0),
                attribute_upserts={"new": b"2"},
                executions=[execution("Start-1")],
                history=[entry("Start-1", "execution_created")],
            ),
            replace_run=True,
        )

        _, loaded = await store.runs.activate("a")

        assert loaded is not None
        assert (loaded.run.run_id, loaded.run.status, loaded.run.closed_at) == (
            "run-2",
            RunStatus.RUNNING,
            None,
        )
        assert loaded.attributes == {"new": b"2"}
        assert loaded.messages == [] and loaded.completions == []
        assert [e.exec_id for e in loaded.executions] == ["Start-1"]
        assert await store.runs.rpc_response("a", "req-1") is None
        # Whether history is per run follows the one table list both stores share.
        replaced = ["Work-1"] if "history" not in PER_RUN_TABLES else []
        assert [h.exec_id for h in await store.runs.history("a")] == [*replaced, "Start-1"]


async def test_list_runs_and_runs_with_work(backend: Backend) -> None:
    cases = {
        "ready": (RunStatus.RUNNING, [ExecStatus.COMPLETED, ExecStatus.READY]),
        "waiting": (RunStatus.RUNNING, [ExecStatus.WAITING]),
        "wait-for": (RunStatus.RUNNING, [ExecStatus.WAIT_FOR, ExecStatus.WAITING]),
        "all-done": (RunStatus.RUNNING, [ExecStatus.COMPLETED, ExecStatus.FAILED]),
        "closed": (RunStatus.COMPLETED, [ExecStatus.READY]),
        "no-execs": (RunStatus.RUNNING, []),
    }
    async with opened(backend.config) as store:
        for i, (flow_id, (status, statuses)) in enumerate(cases.items()):
            epoch, _ = await store.runs.activate(flow_id)
            await store.runs.commit(
                Commit(
                    flow_id=flow_id,
                    epoch=epoch,
                    run=run(flow_id, status=status, started_at=float(10 - i // 2)),
                    executions=[execution(f"S-{n}", s) for n, s in enumerate(statuses)],
                )
            )

        assert sorted(await store.runs.runs_with_work()) == ["ready", "wait-for", "waiting"]
        listed = await store.runs.list_runs()
        # Ordered by start time, then flow ID.
        assert [r.flow_id for r in listed] == [
            "closed",
            "no-execs",
            "all-done",
            "wait-for",
            "ready",
            "waiting",
        ]
        assert {r.status for r in listed} == {RunStatus.RUNNING, RunStatus.COMPLETED}


async def test_flow_definitions_are_kept_once(backend: Backend) -> None:
    async with opened(backend.config) as store:
        await store.definitions.put("F", "h1", b"\x80pickle")
        await store.definitions.put("F", "h1", b"ignored")
        await store.definitions.put("F", "h2", b"two")
        assert await store.definitions.get("F", "h1") == b"\x80pickle"
        assert await store.definitions.get("F", "h2") == b"two"
        assert await store.definitions.get("G", "h1") is None


async def test_a_store_from_a_newer_release_is_refused(backend: Backend) -> None:
    async with opened(backend.config) as store:
        epoch, _ = await store.runs.activate("a")
        await store.runs.commit(Commit(flow_id="a", epoch=epoch, run=run("a")))
    async with opened(backend.config) as reopened:  # same version: data is there
        assert await reopened.runs.get_run("a") is not None

    backend.set_schema_version(SCHEMA_VERSION + 1)

    with pytest.raises(RuntimeError, match=f"schema version {SCHEMA_VERSION + 1}"):
        async with opened(backend.config):
            pass
