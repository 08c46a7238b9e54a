"""Pooled executors: backpressure, timeouts, orphaned calls, Ray-task execution."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import ray
from dex import FlowStatus

from dex_agents_ray.engine import ExecutorPoolOptions, RayTaskOptions, RemoteExecution
from dex_agents_ray.engine.run._remote import YOUNG_COLLECTION_THRESHOLD
from dex_agents_ray.testing import (
    FileGate,
    InvocationLog,
    gate_before_ack_env,
    kill_flow_actor,
    kill_process,
)
from tests.engine.flows_crash import CrashFlow, Job
from tests.engine.flows_pool import Fan, FanFlow
from tests.engine.polling import eventually


def _executors(namespace: str) -> list[Any]:
    return [
        ray.get_actor(a["name"], namespace=namespace)
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["namespace"] == namespace and a["name"].startswith("dexexec:")
    ]


async def _stats(namespace: str) -> list[dict[str, Any]]:
    return [await handle.stats.remote() for handle in _executors(namespace)]


async def test_500_queued_calls_all_run_once_and_queueing_is_not_timed(
    engine_factory: Any, state_dir: Path, namespace: str
) -> None:
    flow = FanFlow()
    engine = await engine_factory([flow], executor_pool=ExecutorPoolOptions(max_executors=1))
    # 5 slots for 500 calls of 20 ms: the last ones wait about 2 s for a slot,
    # twice their 1 s Step timeout, which counts from their start only.
    fan = Fan(str(state_dir), 500, concurrency=5, sleep_seconds=0.02, timeout_seconds=1)
    await engine.client.start_flow(flow, "fan-500", fan)

    result = await engine.client.wait_for_flow("fan-500", timeout=240)

    assert result.status is FlowStatus.COMPLETED
    outputs = result.completions[0].decode(list[str])
    assert sorted(int(o.split(":")[0]) for o in outputs) == list(range(500))
    assert not [o for o in outputs if ":failed:" in o]
    calls = InvocationLog(state_dir / "calls.log").entries()
    assert sorted(calls) == sorted(f"{i}/1" for i in range(500))
    stats = await _stats(namespace)
    assert len(stats) == 1 and stats[0]["concurrency"] == 5
    assert stats[0]["completed"] == 500
    history = await engine.client.read_step_history("fan-500")
    assert not [h for h in history if h.event == "attempt_failed"]


async def test_the_first_call_of_a_shape_starts_the_minimum_of_executors(
    engine_factory: Any, state_dir: Path, namespace: str
) -> None:
    flow = FanFlow()
    pool = ExecutorPoolOptions(min_executors=3, max_executors=4)
    engine = await engine_factory([flow], executor_pool=pool)
    await engine.client.start_flow(flow, "fan-min", Fan(str(state_dir), 4, concurrency=10))

    result = await engine.client.wait_for_flow("fan-min", timeout=120)

    assert result.status is FlowStatus.COMPLETED
    stats = await _stats(namespace)
    assert len(stats) == 3  # started together, before any of them was full
    # The calls go to the first executor with a free slot; the others wait warm.
    assert sorted(s["completed"] for s in stats) == [0, 0, 4]


async def test_idle_executors_drain_to_the_floor_and_the_pool_grows_again(
    engine_factory: Any, state_dir: Path, namespace: str
) -> None:
    """Executors above ``min_executors`` that run nothing for the idle timeout drain
    and exit; the next burst finds the host still holding their handles, sends to
    them, is refused by their absence, and goes elsewhere: the pool grows again and
    no attempt is spent."""
    flow = FanFlow()
    pool = ExecutorPoolOptions(
        min_executors=1,
        max_executors=3,
        executor_idle_timeout=timedelta(seconds=1),
        orphan_check=timedelta(milliseconds=200),
    )
    engine = await engine_factory([flow], executor_pool=pool)

    async def burst(run_id: str) -> int:
        # 6 gated calls on executors of 2 slots: all 6 run at once on 3 executors.
        await engine.client.start_flow(flow, run_id, Fan(str(state_dir), 6, 2, gate=run_id))
        gates = [FileGate(state_dir, f"{run_id}-{i}") for i in range(6)]
        for gate in gates:
            await gate.wait_until_reached(timeout=120)
        executors = await _count(namespace)
        for gate in gates:
            gate.release()
        result = await engine.client.wait_for_flow(run_id, timeout=120)
        assert result.status is FlowStatus.COMPLETED
        assert not [o for o in result.completions[0].decode(list[str]) if ":failed:" in o]
        return executors

    assert await burst("burst-1") == 3
    await eventually(lambda: _count(namespace), lambda n: n == 1, timeout=60)
    assert await burst("burst-2") == 3
    # The host sent some of burst 2 to the two executors that had ended.
    assert await engine.host("burst-2").__ray_call__.remote(_redirected) >= 2
    await eventually(lambda: _count(namespace), lambda n: n == 1, timeout=60)

    calls = InvocationLog(state_dir / "calls.log").entries()
    assert sorted(calls) == sorted(f"{i}/1" for i in range(6) for _ in range(2))
    for run_id in ("burst-1", "burst-2"):
        history = await engine.client.read_step_history(run_id)
        assert not [h for h in history if h.event == "attempt_failed"]


def _redirected(host: Any) -> int:
    return int(host._pool.redirected)


async def _count(namespace: str) -> int:
    """Executors alive by name (one that is ending may be listed, then gone)."""
    return sum(
        a["namespace"] == namespace and a["name"].startswith("dexexec:")
        for a in ray.util.list_named_actors(all_namespaces=True)
    )


def _collector(_: object) -> tuple[int, int, str]:
    import asyncio
    import gc

    policy = type(asyncio.get_event_loop_policy()).__module__
    return gc.get_threshold()[0], gc.get_freeze_count(), policy


async def test_hosts_and_executors_tune_the_garbage_collector_and_run_on_uvloop(
    engine_factory: Any, state_dir: Path, namespace: str
) -> None:
    flow = FanFlow()
    engine = await engine_factory([flow])
    await engine.client.start_flow(flow, "fan-gc", Fan(str(state_dir), 2, concurrency=2))
    assert (await engine.client.wait_for_flow("fan-gc", timeout=120)).status is (
        FlowStatus.COMPLETED
    )

    executors = _executors(namespace)
    assert executors
    for handle in [engine.host("fan-gc"), *executors]:
        threshold, frozen, policy = await handle.__ray_call__.remote(_collector)
        assert threshold == YOUNG_COLLECTION_THRESHOLD
        assert frozen > 10_000  # the modules and the Flow they loaded
        # Ray's workers run their event loops on uvloop when it is installed.
        assert policy.startswith("uvloop"), policy


async def test_every_slot_of_an_executor_has_a_thread_for_sync_code(
    engine_factory: Any, state_dir: Path, namespace: str
) -> None:
    flow = FanFlow()
    engine = await engine_factory([flow], executor_pool=ExecutorPoolOptions(max_executors=1))
    # More calls blocked in threads at once than asyncio's default pool has threads
    # here (min(32, CPUs + 4)): each holds a slot, so each must get a thread.
    count = (os.cpu_count() or 1) + 8
    fan = Fan(str(state_dir), count, concurrency=count, gate="held", in_thread=True)
    await engine.client.start_flow(flow, "fan-threads", fan)
    for i in range(count):
        await FileGate(state_dir, f"held-{i}").wait_until_reached(timeout=120)
    for i in range(count):
        FileGate(state_dir, f"held-{i}").release()

    result = await engine.client.wait_for_flow("fan-threads", timeout=120)

    assert result.status is FlowStatus.COMPLETED
    assert not [o for o in result.completions[0].decode(list[str]) if ":failed:" in o]
    assert [s["completed"] for s in await _stats(namespace)] == [count]


async def test_calls_that_finish_together_commit_in_one_transaction(
    engine_factory: Any, state_dir: Path
) -> None:
    # Three calls of one batch come back in one reply (their executor waits a
    # moment for batch-mates): their results commit together, and the join they
    # satisfy starts in that same commit. A run whose calls came back apart (a
    # stalled machine) commits them one by one, so up to three runs are tried.
    flow = FanFlow()
    engine = await engine_factory([flow])
    grouped = []
    for run in range(3):
        flow_id = f"fan-group-{run}"
        await engine.client.start_flow(flow, flow_id, Fan(str(state_dir), 3))
        result = await engine.client.wait_for_flow(flow_id, timeout=120)
        assert result.status is FlowStatus.COMPLETED
        history = await engine.client.read_step_history(flow_id)
        done = {
            h.at
            for h in history
            if h.event_type == "step_completed" and h.step_type == "RemoteCall"
        }
        join = [h.at for h in history if h.step_type == "Join" and h.event_type == "wait_satisfied"]
        grouped.append((len(done), join[0] in done))
        if grouped[-1] == (1, True):
            break
    assert grouped[-1] == (1, True), grouped
    assert sorted(InvocationLog(state_dir / "calls.log").entries()) == sorted(
        f"{i}/1" for i in range(3) for _ in grouped
    )


async def test_a_batch_delivers_finished_calls_ahead_and_an_executor_death_fails_the_rest(
    engine_factory: Any, state_dir: Path, namespace: str
) -> None:
    flow = FanFlow()
    engine = await engine_factory([flow])
    # Three calls made together go to one executor in one batch; call 0 waits.
    fan = Fan(str(state_dir), 3, gate="slow", gated=(0,))
    await engine.client.start_flow(flow, "fan-batch", fan)
    pid = await FileGate(state_dir, "slow-0").wait_until_reached(timeout=120)

    def completed(history: list[Any]) -> set[str]:
        return {h.step_execution_id for h in history if h.event_type == "step_completed"}

    await eventually(
        lambda: engine.client.read_step_history("fan-batch"),
        lambda h: {"RemoteCall-2", "RemoteCall-3"} <= completed(h),
        timeout=60,
    )
    assert [await h.pid.remote() for h in _executors(namespace)] == [pid]
    kill_process(pid)

    result = await engine.client.wait_for_flow("fan-batch", timeout=120)
    outputs = result.completions[0].decode(list[str])
    assert outputs[0] == "0:failed:WorkerCrashedError"
    assert [o.split(":")[0] for o in outputs[1:]] == ["1", "2"]
    assert sorted(InvocationLog(state_dir / "calls.log").entries()) == ["0/1", "1/1", "2/1"]


async def test_a_step_timeout_cancels_the_call_on_its_executor(
    engine_factory: Any, state_dir: Path, namespace: str
) -> None:
    flow = FanFlow()
    engine = await engine_factory([flow])
    await engine.client.start_flow(
        flow, "fan-timeout", Fan(str(state_dir), 1, gate="never", timeout_seconds=1)
    )

    result = await engine.client.wait_for_flow("fan-timeout", timeout=60)

    assert result.completions[0].decode(list[str]) == ["0:failed:StepTimeoutError"]
    await eventually(lambda: _stats(namespace), lambda s: s and s[0]["running"] == 0)


async def test_an_early_start_that_ends_before_the_ack_delay_sends_no_acknowledgement(
    engine_factory: Any, state_dir: Path, namespace: str
) -> None:
    flow = FanFlow()
    # Attempt 1 of 2 starts early; a no-op call ends long before a minute.
    pool = ExecutorPoolOptions(early_ack_delay=timedelta(minutes=1))
    engine = await engine_factory([flow], executor_pool=pool)
    await engine.client.start_flow(flow, "fan-quick", Fan(str(state_dir), 3, attempts=2))

    result = await engine.client.wait_for_flow("fan-quick", timeout=60)

    assert [o.split(":")[0] for o in result.completions[0].decode(list[str])] == ["0", "1", "2"]
    stats = await _stats(namespace)
    assert [(s["completed"], s["acks_sent"]) for s in stats] == [(3, 0)]
    history = await engine.client.read_step_history("fan-quick")
    started = [h for h in history if h.event == "attempt_started"]
    assert sorted(h.step_execution_id for h in started if h.step_type == "RemoteCall") == [
        "RemoteCall-1",
        "RemoteCall-2",
        "RemoteCall-3",
    ]
    assert not [h for h in history if h.event == "attempt_failed"]


async def test_an_early_start_still_running_after_the_delay_acknowledges_and_times_out(
    engine_factory: Any, state_dir: Path, namespace: str
) -> None:
    flow = FanFlow()
    pool = ExecutorPoolOptions(early_ack_delay=timedelta(milliseconds=50))
    engine = await engine_factory([flow], executor_pool=pool)
    fan = Fan(str(state_dir), 1, attempts=2, gate="never", timeout_seconds=1)
    await engine.client.start_flow(flow, "fan-held", fan)
    await FileGate(state_dir, "never-0").wait_until_reached(timeout=120)

    # Held at its gate past the delay: the start is acknowledged while user code
    # runs, and the Step timeout (which counts from it) ends both attempts.
    await eventually(lambda: _stats(namespace), lambda s: bool(s) and s[0]["acks_sent"] >= 1)
    result = await engine.client.wait_for_flow("fan-held", timeout=60)

    assert result.completions[0].decode(list[str]) == ["0:failed:StepTimeoutError"]
    assert InvocationLog(state_dir / "calls.log").entries() == ["0/1", "0/2"]
    stats = await _stats(namespace)
    assert stats[0]["acks_sent"] == 2
    history = await engine.client.read_step_history("fan-held")
    failed = [h.detail for h in history if h.event == "attempt_failed"]
    assert [(f["error_type"], f["started"]) for f in failed] == [
        ("StepTimeoutError", True),
        ("StepTimeoutError", True),
    ]


async def test_a_call_whose_host_died_is_cancelled_on_its_executor(
    engine_factory: Any, state_dir: Path, namespace: str
) -> None:
    flow = CrashFlow()
    engine = await engine_factory(
        [flow], executor_pool=ExecutorPoolOptions(orphan_check=timedelta(milliseconds=200))
    )
    await engine.client.start_flow(flow, "orphan-1", Job(str(state_dir), remote=True))
    await FileGate(state_dir, "work-1").wait_until_reached(timeout=120)
    await kill_flow_actor(engine, "orphan-1")

    # The new incarnation counts the attempt as failed and retries it; the first
    # attempt, still at its gate on the executor, is cancelled as an orphan.
    await FileGate(state_dir, "work-2").wait_until_reached(timeout=120)
    stats = await eventually(
        lambda: _stats(namespace), lambda s: sum(x["running"] for x in s) == 1, timeout=60
    )
    assert sum(x["running"] for x in stats) == 1
    FileGate(state_dir, "work-2").release()
    result = await engine.client.wait_for_flow("orphan-1", timeout=90)
    assert result.completions[0].decode(list[str]) == ["attempt-2"]
    FileGate(state_dir, "work-1").release()
    assert InvocationLog(state_dir / "work.log").entries() == ["Work-1/1", "Work-1/2"]


async def test_an_early_start_the_host_refuses_is_cancelled_on_its_executor(
    engine_factory: Any, state_dir: Path, namespace: str
) -> None:
    flow = CrashFlow()
    # Orphan checks far apart: only the host's refusal can stop the attempt here.
    engine = await engine_factory(
        [flow], executor_pool=ExecutorPoolOptions(orphan_check=timedelta(minutes=10))
    )
    env = gate_before_ack_env(str(state_dir), "ack")
    await engine.client.start_flow(
        flow, "early-1", Job(str(state_dir), attempts=2, remote=True, env=env)
    )
    await FileGate(state_dir, "ack").wait_until_reached(timeout=120)
    # Attempt 1 of 2 starts early; the run stops while it waits to acknowledge.
    await engine.client.stop_flow("early-1")
    result = await engine.client.wait_for_flow("early-1", timeout=90)
    assert result.status is not FlowStatus.COMPLETED
    FileGate(state_dir, "ack").release()

    # The host refuses the acknowledgement: whatever of the attempt's user code
    # ran is cancelled at its gate (never released).
    stats = await eventually(
        lambda: _stats(namespace),
        lambda s: bool(s) and s[0]["completed"] == 1 and s[0]["running"] == 0,
        timeout=60,
    )
    assert stats[0]["running"] == 0


async def test_task_execution_runs_each_attempt_in_a_task_worker(
    engine_factory: Any, state_dir: Path, namespace: str
) -> None:
    flow = FanFlow()
    engine = await engine_factory([flow])
    await engine.client.start_flow(flow, "fan-task", Fan(str(state_dir), 3, task=True))

    result = await engine.client.wait_for_flow("fan-task", timeout=120)

    outputs = result.completions[0].decode(list[str])
    assert [o.split(":")[0] for o in outputs] == ["0", "1", "2"]
    host_pid = await engine.host("fan-task").pid.remote()
    assert host_pid not in {int(o.split(":")[1]) for o in outputs}
    assert _executors(namespace) == []


def test_executor_options_are_checked_and_shapes_share_a_reservation() -> None:
    light = RayTaskOptions(num_cpus=0.1)
    assert light.execution is RemoteExecution.POOL
    assert light.executor_concurrency() == 1000
    assert RayTaskOptions(num_gpus=1).executor_concurrency() == 1
    assert RayTaskOptions(resources={"browser": 1}).executor_concurrency() == 1
    assert RayTaskOptions(num_cpus=2, max_concurrency=4).executor_concurrency() == 4
    assert light.executor_actor_options() == {"num_cpus": 0.1, "num_gpus": 0.0}
    assert RayTaskOptions.from_json(light.to_json()) == light
    assert light.shape_key() != RayTaskOptions(num_cpus=0.2).shape_key()
    for bad, field in (
        (lambda: RayTaskOptions(max_concurrency=0), "max_concurrency"),
        (lambda: RayTaskOptions(execution="fork"), "fork"),  # type: ignore[arg-type]
        (lambda: ExecutorPoolOptions(max_executors=0), "max_executors"),
        (lambda: ExecutorPoolOptions(min_executors=0), "min_executors"),
        (lambda: ExecutorPoolOptions(min_executors=9), "min_executors"),
        (lambda: ExecutorPoolOptions(orphan_check=timedelta(0)), "orphan_check"),
        (lambda: ExecutorPoolOptions(early_ack_delay=timedelta(seconds=-1)), "early_ack_delay"),
        (lambda: ExecutorPoolOptions(early_ack_delay=0.1), "early_ack_delay"),  # type: ignore[arg-type]
        (lambda: ExecutorPoolOptions(orphan_check=2), "orphan_check"),  # type: ignore[arg-type]
    ):
        try:
            bad()
        except (TypeError, ValueError) as error:
            assert field in str(error)
        else:
            raise AssertionError(f"{field} was accepted")


async def test_a_batch_ray_refuses_at_once_fails_its_attempts_unsent() -> None:
    """A batch whose actor call raises as it is made (nothing was sent) fails each of
    its attempts with that error instead of leaving them waiting."""
    import asyncio

    from dex_agents_ray.engine.actors._pool import ExecutorPool

    class _Refusing:
        def remote(self, *args: Any) -> Any:
            raise TypeError("cannot send this call")

    class _Handle:
        run = _Refusing()
        run_many = _Refusing()

    options = RayTaskOptions(num_cpus=0)
    pool = ExecutorPool("ns", ExecutorPoolOptions(min_executors=1, max_executors=1))
    shape = pool._shape(options, options.to_json())
    shape.handles.append(_Handle())
    shape.in_flight.append(0)
    args = ("key", [None], "execute", (b"", {}), "", "host", "flow", "exec", 1)
    first, _ = pool.submit(options, options.to_json(), args, ("flow", "exec", 1), print)
    second, _ = pool.submit(options, options.to_json(), args, ("flow", "exec2", 1), print)

    for future in (first, second):
        try:
            await asyncio.wait_for(future, 5)
        except TypeError as error:
            assert str(error) == "cannot send this call"
        else:
            raise AssertionError("the attempt did not fail")
    assert shape.in_flight == [0]


def test_a_light_shape_gets_one_executor_per_cpu_and_keeps_its_slots() -> None:
    from dex_agents_ray.engine._options import DEFAULT_IO_CONCURRENCY
    from dex_agents_ray.engine.actors._pool import light_shape_layout

    options = ExecutorPoolOptions()  # max_executors 8
    assert light_shape_layout(options, 2) == (4 * DEFAULT_IO_CONCURRENCY, 2)
    assert light_shape_layout(options, 3) == (3 * DEFAULT_IO_CONCURRENCY, 3)
    assert light_shape_layout(options, 64) == (DEFAULT_IO_CONCURRENCY, 8)
    assert light_shape_layout(options, 0) == (DEFAULT_IO_CONCURRENCY, 8)  # unknown: no cap
    # Never fewer than min_executors.
    floor = ExecutorPoolOptions(min_executors=3, max_executors=4)
    assert light_shape_layout(floor, 2) == (2 * DEFAULT_IO_CONCURRENCY, 3)


def test_the_pool_stops_growing_a_light_shape_at_the_clusters_cpus(ray_session: None) -> None:
    """On the tests' Ray (2 CPUs) a light shape that saw queueing on both of its
    executors sends to the less busy one instead of starting a third; a shape with
    slots of its own still grows to ``max_executors``."""
    from dex_agents_ray.engine.actors._pool import ExecutorPool

    assert ray.cluster_resources()["CPU"] == 2
    pool = ExecutorPool("ns", ExecutorPoolOptions())
    light = RayTaskOptions(num_cpus=0.1)
    shape = pool._shape(light, light.to_json())
    assert (shape.concurrency, shape.limit) == (4000, 2)
    shape.handles += [object(), object()]
    shape.in_flight += [4000, 3999]
    shape.saw_queueing = True
    assert pool._pick(shape) == 1
    assert len(shape.handles) == 2

    own = RayTaskOptions(num_cpus=0.1, max_concurrency=1000)
    other = pool._shape(own, own.to_json())
    assert (other.concurrency, other.limit) == (1000, 8)
