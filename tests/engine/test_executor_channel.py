"""The same-node socket between a host and its executors (``engine/actors/_channel.py``):
calls after the first go there, an executor's death fails the calls in flight on
it as a death over Ray does, and an executor without the Flow definition asks
the host for it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ray
from dex import FlowStatus, StepList

from dex_agents_ray.engine import ExecutorPoolOptions
from dex_agents_ray.testing import FileGate, InvocationLog, kill_process
from tests.engine.flows_pool import Failed, Fan, FanFlow, FanOut, Join, RemoteCall
from tests.engine.polling import eventually


class OtherFanFlow(FanFlow):
    """The same Steps under another Flow type: another definition."""

    def get_steps(self) -> StepList[Fan]:
        return StepList.start_step(FanOut()).other_steps(RemoteCall(), Failed(), Join())


def _executors(namespace: str) -> list[Any]:
    return [
        ray.get_actor(a["name"], namespace=namespace)
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["namespace"] == namespace and a["name"].startswith("dexexec:")
    ]


async def _stats(namespace: str) -> dict[str, Any]:
    (executor,) = _executors(namespace)
    stats: dict[str, Any] = await executor.stats.remote()
    return stats


async def _engine(engine_factory: Any, flows: list[Any], **pool: Any) -> Any:
    """One host (each host process keeps its own sockets) and one executor."""
    options = ExecutorPoolOptions(max_executors=1, **pool)
    return await engine_factory(flows, executor_pool=options, shared_hosts=1)


async def _run(engine: Any, flow: Any, flow_id: str, fan: Fan) -> list[str]:
    await engine.client.start_flow(flow, flow_id, fan)
    result = await engine.client.wait_for_flow(flow_id, timeout=120)
    assert result.status is FlowStatus.COMPLETED
    outputs: list[str] = result.completions[0].decode(list[str])
    return outputs


async def _connected(namespace: str) -> None:
    """Wait until the host has connected to the executor's socket (it does once the
    first call through Ray has answered)."""
    await eventually(lambda: _stats(namespace), lambda s: s["socket_connections"] == 1)


async def test_calls_after_the_first_go_by_the_socket(
    engine_factory: Any, state_dir: Path, namespace: str
) -> None:
    flow = FanFlow()
    engine = await _engine(engine_factory, [flow])

    first = await _run(engine, flow, "fan-first", Fan(str(state_dir), 3))
    assert (await _stats(namespace))["socket_calls"] == 0  # the first batch goes by Ray
    await _connected(namespace)
    second = await _run(engine, flow, "fan-second", Fan(str(state_dir), 3))

    stats = await _stats(namespace)
    assert stats["socket_calls"] == 3 and stats["completed"] == 6
    assert [o.split(":")[0] for o in first] == [o.split(":")[0] for o in second] == ["0", "1", "2"]
    assert sorted(InvocationLog(state_dir / "calls.log").entries()) == sorted(
        f"{i}/1" for i in range(3) for _ in range(2)
    )


async def test_acknowledgements_go_back_by_the_hosts_socket(
    engine_factory: Any, state_dir: Path, namespace: str
) -> None:
    """An executor that gets calls by its socket sends its calls back to their
    host (here start acknowledgements: each call outlives the 25 ms early-ack
    delay) by the host's socket once it has asked for it through Ray."""
    flow = FanFlow()
    engine = await _engine(engine_factory, [flow])
    slow = Fan(str(state_dir), 3, sleep_seconds=0.2)
    await _run(engine, flow, "fan-ray", slow)  # by Ray both ways
    await _connected(namespace)
    await _run(engine, flow, "fan-ask", slow)  # by the socket; an acknowledgement asks
    stats = await _stats(namespace)
    assert stats["socket_calls"] == 3 and stats["acks_sent"] >= 2
    before = stats["host_socket_calls"]

    await _run(engine, flow, "fan-back", slow)

    stats = await _stats(namespace)
    assert stats["socket_calls"] == 6 and stats["completed"] == 9
    assert stats["host_socket_calls"] > before


async def test_without_the_local_channel_every_call_goes_by_ray(
    engine_factory: Any, state_dir: Path, namespace: str
) -> None:
    flow = FanFlow()
    engine = await _engine(engine_factory, [flow], local_channel=False)

    for run in range(3):
        await _run(engine, flow, f"fan-ray-{run}", Fan(str(state_dir), 3))

    stats = await _stats(namespace)
    assert stats["completed"] == 9
    assert stats["socket_connections"] == stats["socket_calls"] == 0
    assert stats["host_socket_calls"] == 0  # nor do its calls back to the host


async def test_an_executor_killed_under_socket_calls_fails_them_as_a_death_over_ray(
    engine_factory: Any, state_dir: Path, namespace: str
) -> None:
    flow = FanFlow()
    engine = await _engine(engine_factory, [flow])
    await _run(engine, flow, "fan-warm", Fan(str(state_dir), 2))
    await _connected(namespace)
    # Three calls by the socket; call 0 waits at its gate while 1 and 2 finish.
    fan = Fan(str(state_dir), 3, gate="slow", gated=(0,))
    await engine.client.start_flow(flow, "fan-killed", fan)
    pid = await FileGate(state_dir, "slow-0").wait_until_reached(timeout=120)
    await eventually(
        lambda: engine.client.read_step_history("fan-killed"),
        lambda h: (
            {"RemoteCall-2", "RemoteCall-3"}
            <= {e.step_execution_id for e in h if e.event_type == "step_completed"}
        ),
        timeout=60,
    )
    assert (await _stats(namespace))["socket_calls"] == 3
    kill_process(pid)

    result = await engine.client.wait_for_flow("fan-killed", timeout=120)
    outputs = result.completions[0].decode(list[str])
    assert outputs[0] == "0:failed:WorkerCrashedError"
    assert [o.split(":")[0] for o in outputs[1:]] == ["1", "2"]
    # Ray restarted the executor: the next calls go by Ray, then by its new socket.
    after = await _run(engine, flow, "fan-after", Fan(str(state_dir), 2))
    assert [o.split(":")[0] for o in after] == ["0", "1"]
    assert int(after[0].split(":")[1]) != pid
    await _connected(namespace)
    await _run(engine, flow, "fan-after-2", Fan(str(state_dir), 2))
    assert (await _stats(namespace))["socket_calls"] == 2


async def test_an_executor_without_the_flow_definition_gets_it_from_the_host(
    engine_factory: Any, state_dir: Path, namespace: str
) -> None:
    flow, other = FanFlow(), OtherFanFlow()
    engine = await _engine(engine_factory, [flow, other])
    await _run(engine, flow, "fan-one", Fan(str(state_dir), 2))
    await _connected(namespace)

    # The other Flow's first calls come by the socket, without its definition.
    outputs = await _run(engine, other, "fan-other", Fan(str(state_dir), 3))

    assert [o.split(":")[0] for o in outputs] == ["0", "1", "2"]
    assert (await _stats(namespace))["socket_calls"] == 3


async def test_a_batch_the_socket_cannot_send_fails_its_attempts_unsent() -> None:
    """A batch that cannot go out by the socket (its request does not pickle)
    fails each of its attempts with that error, as a refused Ray call does."""
    import asyncio

    from dex_agents_ray.engine import RayTaskOptions
    from dex_agents_ray.engine.actors._pool import ExecutorPool

    class _Unsendable:
        closed = False

        def request(self, request: Any) -> Any:
            raise TypeError("cannot pickle this request")

    options = RayTaskOptions(num_cpus=0)
    pool = ExecutorPool("ns", ExecutorPoolOptions(min_executors=1, max_executors=1))
    shape = pool._shape(options, options.to_json())
    shape.handles.append(object())
    shape.in_flight.append(0)
    shape.channels[0] = _Unsendable()  # type: ignore[assignment]
    args = ("key", [None], "execute", (b"", {}), "", "host", "flow", "exec", 1)
    first, _ = pool.submit(options, options.to_json(), args, ("flow", "exec", 1), print)
    second, _ = pool.submit(options, options.to_json(), args, ("flow", "exec2", 1), print)

    for future in (first, second):
        try:
            await asyncio.wait_for(future, 5)
        except TypeError as error:
            assert str(error) == "cannot pickle this request"
        else:
            raise AssertionError("the attempt did not fail")
    assert shape.in_flight == [0]
