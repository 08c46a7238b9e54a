"""Steps that run as Ray tasks: placement, start acknowledgement, worker deaths."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dex import FlowStatus

from dex_agents_ray.testing import FileGate, InvocationLog, gate_before_ack_env, kill_process
from tests.engine.flows_crash import CrashFlow, Job


async def test_remote_step_runs_in_a_task_worker_and_commits(
    engine_factory: Any, state_dir: Path
) -> None:
    flow = CrashFlow()
    engine = await engine_factory([flow])
    FileGate(state_dir, "work-1").release()
    await engine.client.start_flow(flow, "remote-1", Job(str(state_dir), remote=True))

    result = await engine.client.wait_for_flow("remote-1", timeout=90)

    assert result.status is FlowStatus.COMPLETED
    assert result.completions[0].decode(list[str]) == ["attempt-1"]
    host_pid = await engine.host("remote-1").pid.remote()
    worker_pid = FileGate(state_dir, "work-1").reached_pids()[0]
    assert worker_pid != host_pid
    history = await engine.client.read_step_history("remote-1")
    started = [h.step_execution_id for h in history if h.event == "attempt_started"]
    assert started == ["Begin-1", "Work-1", "Finish-1"]


async def _killed_before_ack(
    engine_factory: Any, state_dir: Path, flow_id: str, *, attempts: int
) -> Any:
    """Start a remote Job whose executor waits before acknowledging attempt 1, and
    kill that executor there; returns the engine."""
    flow = CrashFlow()
    engine = await engine_factory([flow])
    env = gate_before_ack_env(str(state_dir), "ack")
    await engine.client.start_flow(
        flow, flow_id, Job(str(state_dir), attempts=attempts, remote=True, env=env)
    )
    kill_process(await FileGate(state_dir, "ack").wait_until_reached(timeout=120))
    return engine


async def test_worker_killed_before_start_ack_is_not_started(
    engine_factory: Any, state_dir: Path
) -> None:
    engine = await _killed_before_ack(engine_factory, state_dir, "remote-2", attempts=1)

    result = await engine.client.wait_for_flow("remote-2", timeout=90)

    assert result.completions[0].decode(str) == "recovered:not_started"
    assert InvocationLog(state_dir / "work.log").entries() == []
    history = await engine.client.read_step_history("remote-2")
    failed = [h for h in history if h.event == "attempt_failed"]
    assert failed[0].detail["started"] is False
    assert failed[0].detail["error_type"] == "WorkerCrashedError"


async def test_an_early_start_killed_before_its_ack_is_not_started_and_retries(
    engine_factory: Any, state_dir: Path
) -> None:
    # Attempt 1 of 2 starts early (its start is recorded at dispatch; user code
    # would run as the acknowledgement leaves): killed before that, it still
    # fails as not started, and its retry runs.
    engine = await _killed_before_ack(engine_factory, state_dir, "remote-early", attempts=2)
    FileGate(state_dir, "ack").release()
    FileGate(state_dir, "work-2").release()

    result = await engine.client.wait_for_flow("remote-early", timeout=90)

    assert result.completions[0].decode(list[str]) == ["attempt-2"]
    assert InvocationLog(state_dir / "work.log").entries() == ["Work-1/2"]
    history = await engine.client.read_step_history("remote-early")
    failed = [h for h in history if h.event == "attempt_failed"]
    assert [(f.detail["started"], f.detail["error_type"]) for f in failed] == [
        (False, "WorkerCrashedError")
    ]


async def test_worker_killed_after_start_ack_is_not_completed(
    engine_factory: Any, state_dir: Path
) -> None:
    flow = CrashFlow()
    engine = await engine_factory([flow])
    await engine.client.start_flow(flow, "remote-3", Job(str(state_dir), attempts=1, remote=True))
    worker_pid = await FileGate(state_dir, "work-1").wait_until_reached(timeout=120)
    kill_process(worker_pid)

    result = await engine.client.wait_for_flow("remote-3", timeout=90)

    assert result.completions[0].decode(str) == "recovered:not_completed"
    assert InvocationLog(state_dir / "work.log").entries() == ["Work-1/1"]


async def test_worker_death_consumes_an_attempt_and_the_retry_runs(
    engine_factory: Any, state_dir: Path
) -> None:
    flow = CrashFlow()
    engine = await engine_factory([flow])
    FileGate(state_dir, "work-2").release()
    await engine.client.start_flow(flow, "remote-4", Job(str(state_dir), attempts=2, remote=True))
    kill_process(await FileGate(state_dir, "work-1").wait_until_reached(timeout=120))

    result = await engine.client.wait_for_flow("remote-4", timeout=90)

    assert result.completions[0].decode(list[str]) == ["attempt-2"]
    assert InvocationLog(state_dir / "work.log").entries() == ["Work-1/1", "Work-1/2"]
    first, second = InvocationLog(state_dir / "first.log").entries()
    assert first == second  # first_attempt_at is stable across remote attempts


async def test_host_killed_while_remote_step_runs_kills_the_task_and_retries(
    engine_factory: Any, state_dir: Path
) -> None:
    from dex_agents_ray.testing import kill_flow_actor

    flow = CrashFlow()
    engine = await engine_factory([flow])
    FileGate(state_dir, "work-2").release()
    await engine.client.start_flow(flow, "remote-5", Job(str(state_dir), remote=True))
    await FileGate(state_dir, "work-1").wait_until_reached(timeout=120)
    await kill_flow_actor(engine, "remote-5")

    result = await engine.client.wait_for_flow("remote-5", timeout=90)

    # The task died with its owner; the attempt counts as failed, the retry commits.
    assert result.completions[0].decode(list[str]) == ["attempt-2"]
    history = await engine.client.read_step_history("remote-5")
    failed = [h for h in history if h.event == "attempt_failed"]
    assert [f.detail["error_type"] for f in failed] == ["HostDiedError"]


async def _held_after_a_warm_run(
    engine: Any, flow: CrashFlow, state_dir: Path, warm_id: str, flow_id: str
) -> tuple[FileGate, Path]:
    """Run a single-attempt remote Job (``warm_id``) to the end (its answer opens
    the host's socket to the executor), then start ``flow_id``'s, whose executor holds its
    Work call before the start acknowledgement; returns the acknowledgement's gate
    (closed, reached twice) and the held run's state directory."""
    ack = FileGate(state_dir, "ack")
    env = gate_before_ack_env(str(state_dir), "ack")
    warm, main = state_dir / "warm", state_dir / "main"
    for directory in (warm, main):
        FileGate(directory, "work-1").release()
    ack.release()
    await engine.client.start_flow(flow, warm_id, Job(str(warm), attempts=1, remote=True, env=env))
    assert (await engine.client.wait_for_flow(warm_id, timeout=90)).completions
    ack.close()
    await engine.client.start_flow(flow, flow_id, Job(str(main), attempts=1, remote=True, env=env))
    await ack.wait_until_reached(times=2, timeout=120)  # the held run's Work call
    return ack, main


async def _work_ran_once(engine: Any, flow_id: str, main: Path) -> None:
    """``flow_id`` completes with Work's attempt 1, whose user code ran once."""
    result = await engine.client.wait_for_flow(flow_id, timeout=90)
    assert result.completions[0].decode(list[str]) == ["attempt-1"]
    assert InvocationLog(main / "work.log").entries() == ["Work-1/1"]
    history = await engine.client.read_step_history(flow_id)
    started = [h for h in history if h.event == "attempt_started" and h.step_type == "Work"]
    assert len(started) == 1


async def test_an_acknowledgement_from_before_a_host_restart_never_starts_the_attempt(
    engine_factory: Any, state_dir: Path
) -> None:
    """A single-attempt Step's executor holds its start acknowledgement while the
    host dies; Ray restarts the host (same actor ID), which reloads the run and
    sends attempt 1 again. The first call came by the host's socket, so it
    outlives the host, and its acknowledgement then reaches the new incarnation
    through the same Ray handle: it is refused, and user code runs once."""
    from dex_agents_ray.testing import kill_flow_actor

    flow = CrashFlow()
    engine = await engine_factory([flow])
    ack, main = await _held_after_a_warm_run(
        engine, flow, state_dir, "remote-warm", "remote-restart"
    )
    await kill_flow_actor(engine, "remote-restart")
    await ack.wait_until_reached(times=3, timeout=120)  # attempt 1, sent again
    ack.release()

    await _work_ran_once(engine, "remote-restart", main)


async def test_a_call_is_named_by_its_dispatch_not_by_its_attempt_number(
    engine_factory: Any, state_dir: Path
) -> None:
    """An executor names each call by the host's dispatch number, never reused in a
    host, not by its attempt number, which another call of the execution can
    share (a remote Step's ``wait_for`` call and its first ``execute`` call are
    both attempt 1). Here a message names (run, execution, 1): dispatch 1 was an
    earlier run's call, so it is not the call the host waits for. Its
    acknowledgement is refused and records nothing, and the orphan check finds
    it not live; the call sent now starts, and user code runs once."""
    flow = CrashFlow()
    engine = await engine_factory([flow], shared_hosts=1)
    ack, main = await _held_after_a_warm_run(
        engine, flow, state_dir, "dispatch-warm", "dispatch-main"
    )
    host = engine.host("dispatch-main")
    other, sent = ("dispatch-main", "Work-1", 1), ("dispatch-main", "Work-1", 2)

    assert await host.live_attempts.remote([other, sent]) == [False, True]
    assert await host.ack_remote_starts.remote([other]) == [False]
    history = await engine.client.read_step_history("dispatch-main")
    assert not [h for h in history if h.event == "attempt_started" and h.step_type == "Work"]

    ack.release()
    await _work_ran_once(engine, "dispatch-main", main)
