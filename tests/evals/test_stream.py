"""Cases as a stream: a Ray Dataset read lazily through run_eval, a bounded read-ahead,
errors naming their row, and a rerun of a streamed run going on where it stopped."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dex_agents_ray.evals import (
    CASES_FILE,
    RUN_FILE,
    CaseStatus,
    EvalCase,
    EvalCaseError,
    EvalProgress,
    EvalRunReader,
    EvalRunRecord,
    EvalRunStatus,
    contains,
    eval_run_status,
    run_eval,
)
from dex_agents_ray.evals._results import ResultsFileRows
from dex_agents_ray.testing import FileGate, InvocationLog
from tests.evals.agents import eval_flow


def _case(i: int, text: str = "look") -> EvalCase:
    return EvalCase(id=f"c{i:02}", turns=(f"c{i:02} {text}",), expected="found")


def _dataset(path: Path) -> Any:
    """The JSONL file as a Ray Dataset. Its read tasks ask for no CPU: the test
    session's earlier engines leave executor actors (0.1 CPU each) on the local
    cluster's 2 CPUs, and a read task that waits for a whole one may wait for good."""
    import ray

    return ray.data.read_json(str(path), num_cpus=0)


async def test_a_ray_dataset_streams_through_run_eval_and_every_case_is_scored_once(
    ray_session: None, namespace: str, store_path: Path, state_dir: Path, tmp_path: Path
) -> None:
    count = 24
    source = tmp_path / "cases.jsonl"
    source.write_text(
        "".join(json.dumps(_case(i).to_json()) + "\n" for i in range(count)), encoding="utf-8"
    )
    out = tmp_path / "out"
    seen: list[EvalProgress] = []

    report = await run_eval(
        eval_flow(str(state_dir)),
        EvalCase.iter_dataset(_dataset(source)),
        run_id="streamed",
        concurrency=4,
        scorers=[contains()],
        out=out,
        store=store_path,
        namespace=namespace,
        progress=seen.append,
    )

    # The rows are read back from results.jsonl, in the stream's order.
    assert isinstance(report.results, ResultsFileRows)
    assert [r.case_id for r in report.results] == [f"c{i:02}" for i in range(count)]
    assert all(r.status is CaseStatus.SCORED and r.passed for r in report.results)
    assert report.result("c07").answer == "done: found c07 look"
    assert report.summary()["counts"]["scored"] == count
    # Every case ran once: two model calls each (the lookup, then the answer), one lookup.
    model = InvocationLog(state_dir / "model.log").entries()
    assert len(model) == 2 * count and len(set(model)) == 2 * count
    assert sorted(InvocationLog(state_dir / "lookup.log").entries()) == [
        f"c{i:02} look" for i in range(count)
    ]
    # The progress counted the cases read so far until the stream ended.
    assert not seen[0].total_known and seen[0].total <= 2 * 4 + 1
    assert seen[-1].total_known and seen[-1].total == count and seen[-1].done == count
    # run.json got the count at the end; cases.jsonl holds every case read.
    record = EvalRunRecord.from_json(json.loads((out / RUN_FILE).read_text()))
    assert record.cases == count
    assert [c.id for c in EvalCase.from_jsonl(out / CASES_FILE)] == [
        f"c{i:02}" for i in range(count)
    ]
    assert json.loads((out / "summary.json").read_text())["counts"]["scored"] == count
    reader = EvalRunReader(out)
    reader.refresh()
    assert len(reader.rows) == count and len(reader.cases()) == count


async def test_a_stream_is_read_a_bounded_number_of_cases_ahead(
    ray_session: None, namespace: str, store_path: Path, state_dir: Path, tmp_path: Path
) -> None:
    count, concurrency = 20, 2
    pulled: list[int] = []

    def cases() -> Iterator[EvalCase]:
        for i in range(count):
            pulled.append(i)
            yield _case(i, "GATE")

    gate = FileGate(str(state_dir), "lookup")
    run = asyncio.create_task(
        run_eval(
            eval_flow(str(state_dir)),
            cases(),
            run_id="bounded",
            concurrency=concurrency,
            scorers=[contains()],
            out=tmp_path / "out",
            store=store_path,
            namespace=namespace,
        )
    )
    try:
        # Both slots hold a case waiting at the gate inside its tool.
        await gate.wait_until_reached(concurrency)
        # Running ones, one waiting for a slot, at most ``concurrency`` read ahead.
        assert concurrency < len(pulled) <= 2 * concurrency + 1, pulled
    finally:
        gate.release()
    report = await run

    assert len(pulled) == count
    assert [r.case_id for r in report.results] == [f"c{i:02}" for i in range(count)]
    assert all(r.status is CaseStatus.SCORED for r in report.results)
    lookups = InvocationLog(state_dir / "lookup.log").entries()
    assert len(lookups) == count and len(set(lookups)) == count


async def test_a_duplicate_id_in_a_stream_names_its_row_and_a_rerun_goes_on(
    ray_session: None, namespace: str, store_path: Path, state_dir: Path, tmp_path: Path
) -> None:
    flow = eval_flow(str(state_dir))
    out = tmp_path / "out"
    kwargs: dict[str, Any] = {
        "run_id": "dup",
        "concurrency": 2,
        "scorers": [contains()],
        "out": out,
        "store": store_path,
        "namespace": namespace,
    }
    bad = (_case(i) for i in (0, 1, 2, 1, 3))

    with pytest.raises(EvalCaseError) as raised:
        await run_eval(flow, bad, **kwargs)

    assert (raised.value.source, raised.value.line, raised.value.field) == ("cases", 4, "id")
    assert str(raised.value) == ("cases:4: field 'id': duplicate case id 'c01' (first on row 2)")
    # The cases before it ran and their rows are on disk; the run says why it stopped.
    reader = EvalRunReader(out)
    reader.refresh()
    assert sorted(reader.rows) == ["c00", "c01", "c02"]
    assert reader.record is not None and not reader.record.cases_known
    assert reader.summary is not None and "duplicate case id" in reader.summary["stopped"]
    assert (
        eval_run_status(None, rows=3, cases=3, stopped=reader.summary["stopped"], cases_known=False)
        is EvalRunStatus.DONE
    )
    calls = len(InvocationLog(state_dir / "model.log").entries())
    assert calls == 6

    # The same run ID with the stream fixed: the scored cases are skipped, the rest run.
    report = await run_eval(flow, (_case(i) for i in range(5)), **kwargs)

    assert [r.case_id for r in report.results] == ["c00", "c01", "c02", "c03", "c04"]
    assert all(r.status is CaseStatus.SCORED and r.passed for r in report.results)
    model = InvocationLog(state_dir / "model.log").entries()
    assert len(model) == calls + 4 and len(set(model)) == len(model)
    assert report.summary()["counts"]["scored"] == 5
    assert json.loads((out / RUN_FILE).read_text())["cases"] == 5


async def test_a_bad_row_of_a_dataset_names_its_row(
    ray_session: None, namespace: str, store_path: Path, state_dir: Path, tmp_path: Path
) -> None:
    rows = [_case(i).to_json() for i in range(6)]
    rows[4] = {"id": "c04", "input": "   "}  # row 5: a blank input
    source = tmp_path / "cases.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")

    with pytest.raises(EvalCaseError) as raised:
        await run_eval(
            eval_flow(str(state_dir)),
            EvalCase.iter_dataset(_dataset(source)),
            run_id="bad-row",
            concurrency=2,
            out=tmp_path / "out",
            store=store_path,
            namespace=namespace,
        )

    assert (raised.value.source, raised.value.line, raised.value.field) == ("dataset", 5, "input")
    assert str(raised.value).startswith("dataset:5: field 'input'")
    # The four rows before it ran; nothing after it was read into a session.
    lookups = InvocationLog(state_dir / "lookup.log").entries()
    assert sorted(lookups) == [f"c{i:02} look" for i in range(4)]


def test_from_dataset_keeps_returning_a_list_and_iter_dataset_is_lazy(
    ray_session: None, tmp_path: Path
) -> None:
    source = tmp_path / "cases.jsonl"
    source.write_text(
        "".join(json.dumps(_case(i).to_json()) + "\n" for i in range(3))
        + json.dumps({"id": "c00", "input": "again"})
        + "\n",
        encoding="utf-8",
    )
    dataset = _dataset(source)

    with pytest.raises(EvalCaseError, match=r"dataset:4: field 'id': duplicate"):
        EvalCase.from_dataset(dataset)
    stream = EvalCase.iter_dataset(dataset)
    assert not isinstance(stream, list)
    assert [c.id for c in stream] == ["c00", "c01", "c02", "c00"]  # run_eval finds the duplicate


def test_a_streamed_run_record_has_no_count_until_the_stream_ends(tmp_path: Path) -> None:
    from dex_agents_ray.evals import write_run_record

    record = write_run_record(tmp_path, run_id="s", agent="A", cases=None)

    data = json.loads((tmp_path / RUN_FILE).read_text())
    assert data["cases_known"] is False and data["cases"] == 0 and data["schema_version"] == 1
    assert EvalRunRecord.from_json(data) == record and not record.cases_known
    assert (tmp_path / CASES_FILE).read_text() == ""
    # No driver and no stop: an interrupted stream (the rows cannot tell).
    assert eval_run_status(None, rows=7, cases=7, stopped=None, cases_known=False) is (
        EvalRunStatus.INTERRUPTED
    )
    # A live driver of a stream: running while its total is not known, even at rows == total.
    live = {"state": "running", "total": 3, "total_known": False, "running": 0, "done": 3}
    assert eval_run_status(live, rows=3, cases=None, stopped=None) is EvalRunStatus.RUNNING
    assert eval_run_status({**live, "total_known": True}, rows=3, cases=None, stopped=None) is (
        EvalRunStatus.DONE
    )


def test_rows_read_back_from_the_results_file(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from dex_agents_ray.evals import CaseResult, EvalReport
    from dex_agents_ray.evals._results import ResultsWriter

    writer = ResultsWriter(tmp_path)
    rows = [
        CaseResult(
            case_id=f"c{i}",
            session_id=f"eval:r:c{i}",
            status=CaseStatus.SCORED if i % 2 else CaseStatus.FAILED,
            scores={"contains": 1.0} if i % 2 else {},
            passed=True if i % 2 else None,
            latency_s=float(i) if i else None,
            error=None if i % 2 else "boom",
        )
        for i in range(5)
    ]
    offsets = writer.append_many(rows[:2]) + writer.append_many(rows[2:])
    # The report's order is the offsets' order, not the file's.
    order = [4, 0, 3, 1, 2]
    view = ResultsFileRows(writer.path, [offsets[i] for i in order])

    assert len(view) == 5 and view[0] == rows[4] and view[-1] == rows[2]
    assert list(view[1:3]) == [rows[0], rows[3]]
    assert list(view) == [rows[i] for i in order]
    on_disk = EvalReport(run_id="r", results=view)
    in_memory = EvalReport(run_id="r", results=tuple(rows[i] for i in order))
    assert on_disk.summary() == in_memory.summary()
    assert on_disk.result("c3") == rows[3]
    # results.parquet is written a batch at a time, with the same columns either way.
    assert writer.write_parquet(view)
    table = pq.read_table(tmp_path / "results.parquet")
    assert table.column("case_id").to_pylist() == [f"c{i}" for i in order]
    assert table.column("latency_s").to_pylist() == [4.0, None, 3.0, 1.0, 2.0]
    assert str(table.schema.field("error").type) == "string"


def test_the_eval_pages_count_a_streams_cases_so_far(tmp_path: Path) -> None:
    from dex_agents_ray.evals import CaseResult, write_run_record
    from dex_agents_ray.evals._results import ResultsWriter
    from dex_agents_ray.evals._runs import CasesLog
    from dex_agents_ray.serve._evals import EvalRuns

    out = tmp_path / "streamed"
    write_run_record(out, run_id="streamed", agent="A", cases=None)
    log = CasesLog(out)
    log.write([json.dumps(_case(i).to_json()) + "\n" for i in range(3)])
    ResultsWriter(out).append(
        CaseResult(case_id="c00", session_id="eval:streamed:c00", status=CaseStatus.SCORED)
    )
    runs = EvalRuns(tmp_path, None)
    (reader,) = runs.readers()

    # No driver: the cases read so far, marked not known; the run reads as interrupted.
    summary = runs.summary(reader, None)
    assert (summary["cases"], summary["cases_known"], summary["rows"]) == (3, False, 1)
    assert summary["status"] == "interrupted"
    # A live driver: its count so far, still running when every case read has a row.
    live = {"state": "running", "total": 1, "total_known": False, "running": 0, "done": 1}
    summary = runs.summary(reader, live)
    assert (summary["cases"], summary["cases_known"], summary["status"]) == (1, False, "running")
