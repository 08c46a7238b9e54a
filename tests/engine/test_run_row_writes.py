"""A commit writes the run row (and its active Step types) only when they changed."""

from __future__ import annotations

from dex.dexpb import dex_pb2 as pb

from dex_agents_ray.engine.run._state import RunState, Tx
from dex_agents_ray.engine.store._records import RunRecord, RunStatus


def _state() -> RunState:
    state = RunState()
    state.run = RunRecord(
        flow_id="f",
        run_id="r",
        flow_type="T",
        flow_hash="h",
        status=RunStatus.RUNNING,
        epoch=1,
        started_at=100.0,
    )
    return state


def _write(key: str) -> pb.AttributeWrite:
    return pb.AttributeWrite(key=key, value=pb.Value(string_value="v"))


def test_a_commit_that_changes_no_run_field_writes_no_run_row() -> None:
    tx = Tx(_state(), 1, 200.0)
    tx.write_attributes([_write("a")])

    commit = tx.build()

    assert commit.run is None
    assert commit.active_steps_changed is False
    assert commit.attribute_upserts.keys() == {"a"}


def test_a_changed_run_field_writes_the_row_and_only_changed_step_types_reindex() -> None:
    state = _state()
    tx = Tx(state, 1, 200.0)
    tx.close(RunStatus.COMPLETED)

    commit = tx.build()

    assert commit.run is not None and commit.run.status is RunStatus.COMPLETED
    assert commit.active_steps_changed is False  # no Step was active, none is
    assert state.run is not None and state.run.status is RunStatus.RUNNING  # a working copy

    state.apply(commit)
    assert state.run is commit.run


def test_a_run_being_started_is_written_even_as_it_was_built() -> None:
    tx = Tx(_state(), 1, 200.0, stored=False)

    commit = tx.build()

    assert commit.run is not None
    assert commit.active_steps_changed is True
