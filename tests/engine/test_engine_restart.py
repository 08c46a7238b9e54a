"""A whole engine stops while a Step is in flight; the next engine on the same
store and namespace resumes the run by itself (``resume=True``), or leaves it
until a client call touches it (``resume=False``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from dex import FlowStatus

from dex_agents_ray.testing import FileGate, InvocationLog
from tests.engine.flows_crash import CrashFlow, Job
from tests.engine.polling import named_actors, until


def _process_gone(pid: int) -> bool:
    """Whether process ``pid`` (on this machine) has ended (a zombie counts)."""
    try:
        os.kill(pid, 0)
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (ProcessLookupError, FileNotFoundError):
        return True
    return fields[0] in ("Z", "X")


def _events(history: list[Any], exec_id: str, event: str) -> list[Any]:
    return [h for h in history if h.exec_id == exec_id and h.event == event]


async def _stop_engine_during_work(
    engine_factory: Any, namespace: str, state_dir: Path, flow_id: str, *, remote: bool
) -> CrashFlow:
    """Start a run, stop the whole engine while ``Work`` attempt 1 waits at its
    gate, then open every gate: whatever runs next must come from a new engine."""
    flow = CrashFlow()
    engine = await engine_factory([flow])
    await engine.client.start_flow(flow, flow_id, Job(str(state_dir), remote=remote))
    await FileGate(state_dir, "work-1").wait_until_reached(timeout=120)
    host_pid = await engine.host(flow_id).pid.remote()

    await engine.shutdown(stop_hosts=True)

    # Ray kills asynchronously: the names go first, the processes a moment
    # later, and until then the old host could still commit attempt 1
    # (legitimately: no newer epoch exists yet). Open the gates once it is gone.
    async def host_gone() -> bool:
        return named_actors(namespace) == [] and _process_gone(host_pid)

    await until(host_gone, "the end of the host process", timeout=90)
    FileGate(state_dir, "work-1").release()
    FileGate(state_dir, "work-2").release()
    return flow


async def _assert_work_ran_again_once(engine: Any, state_dir: Path, flow_id: str) -> None:
    """The in-flight Step ran again as attempt 2; nothing else ran twice."""
    result = await engine.client.wait_for_flow(flow_id, timeout=60)
    assert result.status is FlowStatus.COMPLETED
    # Only attempt 2's publication was committed: attempt 1 died with its engine.
    assert result.completions[0].decode(list[str]) == ["attempt-2"]
    assert InvocationLog(state_dir / "work.log").entries() == ["Work-1/1", "Work-1/2"]
    firsts = InvocationLog(state_dir / "first.log").entries()
    assert len(firsts) == 2 and len(set(firsts)) == 1  # attempt 2 kept first_attempt_at
    history = await engine.store.runs.history(flow_id)
    assert [(h.exec_id, h.event, h.detail.get("attempt")) for h in history] == [
        ("", "flow_started", None),
        ("Begin-1", "step_scheduled", None),
        ("Begin-1", "attempt_started", 1),
        ("Begin-1", "step_completed", 1),
        ("Work-1", "step_scheduled", None),
        ("Work-1", "attempt_started", 1),
        ("Work-1", "attempt_failed", 1),
        ("Work-1", "attempt_started", 2),
        ("Work-1", "step_completed", 2),
        ("Finish-1", "step_scheduled", None),
        ("Finish-1", "wait_for_completed", None),
        ("Finish-1", "wait_satisfied", None),
        ("Finish-1", "attempt_started", 1),
        ("Finish-1", "step_completed", 1),
        ("", "flow_closed", None),
    ]
    failed = _events(history, "Work-1", "attempt_failed")[0].detail
    assert (failed["error_type"], failed["started"]) == ("HostDiedError", True)


@pytest.mark.parametrize("remote", [False, True], ids=["in-host", "ray-task"])
async def test_a_new_engine_resumes_a_run_with_a_step_in_flight_by_itself(
    engine_factory: Any, namespace: str, state_dir: Path, remote: bool
) -> None:
    flow_id = f"restart-{'task' if remote else 'host'}"
    flow = await _stop_engine_during_work(
        engine_factory, namespace, state_dir, flow_id, remote=remote
    )

    engine = await engine_factory([flow])  # resume=True: the default

    async def completed() -> bool:  # the store only: no client call touches the run
        run = await engine.store.runs.get_run(flow_id)
        return run is not None and run.status.value == "completed"

    await until(completed, "the run's completion after the restart", timeout=90)
    await _assert_work_ran_again_once(engine, state_dir, flow_id)
    assert await engine.client.invoke_rpc(flow.snapshot, flow_id) == "attempt-2|finished"


async def test_without_resume_the_run_waits_for_a_client_call(
    engine_factory: Any, namespace: str, state_dir: Path
) -> None:
    flow = await _stop_engine_during_work(
        engine_factory, namespace, state_dir, "restart-lazy", remote=False
    )

    engine = await engine_factory([flow], resume=False)

    # Nothing hosts the run, so nothing can run it: no actor, no new history.
    assert named_actors(namespace) == []
    run = await engine.store.runs.get_run("restart-lazy")
    assert run is not None and run.status.value == "running"
    assert run.active_step_types == ["Work"]
    history = await engine.store.runs.history("restart-lazy")
    assert _events(history, "Work-1", "attempt_failed") == []
    assert InvocationLog(state_dir / "work.log").entries() == ["Work-1/1"]

    info = await engine.client.describe_flow("restart-lazy")  # reads the store: no activation
    assert info.status is FlowStatus.RUNNING
    assert named_actors(namespace) == []

    assert await engine.client.invoke_rpc(flow.snapshot, "restart-lazy") in (
        "None|None",
        "attempt-2|None",
    )
    assert named_actors(namespace) == [engine.placement.host_name("restart-lazy")]
    await _assert_work_ran_again_once(engine, state_dir, "restart-lazy")
