"""A client's socket to a shared host of its node (``engine/actors/_channel.py``): calls
after the first go there, a host that dies under a call on it is retried through
Ray with the same request ID, and ``local_channels=False`` keeps every call on Ray."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from dex_agents_ray.engine import FlowEngine
from dex_agents_ray.testing import FileGate, kill_flow_actor
from tests.engine.flows_rpc import Gate, RpcFlow
from tests.engine.polling import eventually, wait_for_event


async def _parked(engine_factory: Any, flow_id: str, **options: Any) -> tuple[Any, RpcFlow]:
    flow = RpcFlow()
    engine = await engine_factory([flow], shared_hosts=1, **options)
    await engine.client.start_flow(flow, flow_id, Gate("", ""))
    await wait_for_event(engine.client, flow_id, "Parked-1", "wait_for_completed")
    return engine, flow


async def _sockets(engine: Any, flow_id: str) -> dict[str, int]:
    sockets: dict[str, int] = await engine.host(flow_id).client_sockets.remote()
    return sockets


async def _connected(engine: Any, flow_id: str) -> None:
    await eventually(lambda: _sockets(engine, flow_id), lambda s: s["connections"] == 1)


async def test_client_calls_after_the_first_go_by_the_hosts_socket(engine_factory: Any) -> None:
    engine, flow = await _parked(engine_factory, "sock-rpc")
    await _connected(engine, "sock-rpc")
    before = (await _sockets(engine, "sock-rpc"))["calls"]

    for expected in (1, 2, 3):
        assert await engine.client.invoke_rpc(flow.add, "sock-rpc", 1) == expected
    assert await engine.client.invoke_rpc(flow.counter, "sock-rpc") == 3

    assert (await _sockets(engine, "sock-rpc"))["calls"] - before == 4


async def test_without_local_channels_every_client_call_goes_by_ray(engine_factory: Any) -> None:
    engine, flow = await _parked(engine_factory, "ray-rpc", local_channels=False)

    for expected in (1, 2, 3):
        assert await engine.client.invoke_rpc(flow.add, "ray-rpc", 1) == expected

    assert await _sockets(engine, "ray-rpc") == {"connections": 0, "calls": 0}


async def test_a_host_killed_under_a_socket_call_is_retried_through_ray_and_applies_once(
    engine_factory: Any, state_dir: Path
) -> None:
    engine, flow = await _parked(engine_factory, "sock-kill")
    await _connected(engine, "sock-kill")
    gate = FileGate(state_dir, "slow")
    slow = asyncio.ensure_future(
        engine.client.invoke_rpc(
            flow.slow_locked_add, "sock-kill", Gate(str(state_dir), "slow"), request_id="slow-1"
        )
    )
    await gate.wait_until_reached()
    assert (await _sockets(engine, "sock-kill"))["calls"] >= 1
    await kill_flow_actor(engine, "sock-kill")
    # The retry reaches the restarted host through Ray and waits at the gate again.
    await eventually(lambda: asyncio.to_thread(lambda: len(gate.reached_pids())), lambda n: n == 2)
    gate.release()

    assert await asyncio.wait_for(slow, 60) == 1000
    assert await engine.client.invoke_rpc(flow.counter, "sock-kill") == 1000
    history = await engine.client.read_step_history("sock-kill")
    assert [h.detail["request_id"] for h in history if h.event == "rpc_applied"] == ["slow-1"]


async def test_local_channels_must_be_a_bool(ray_session: None) -> None:
    with pytest.raises(TypeError, match="local_channels"):
        await FlowEngine.start([RpcFlow()], local_channels="yes")  # type: ignore[arg-type]


async def test_a_client_dropped_without_closing_closes_its_socket(engine_factory: Any) -> None:
    """A client that goes away without ``close_channels`` (a second client of the
    engine, dropped) closes its socket as it is collected, instead of leaving it for
    the garbage collector to find open (a ResourceWarning, an error here)."""
    import gc

    from dex_agents_ray.engine import EngineClient

    engine, flow = await _parked(engine_factory, "sock-drop")
    await _connected(engine, "sock-drop")
    other = EngineClient(engine)
    assert await other.invoke_rpc(flow.add, "sock-drop", 1) == 1
    await eventually(lambda: _sockets(engine, "sock-drop"), lambda s: s["connections"] == 2)

    channels = other._channels._channels

    async def opened() -> list[Any]:
        return list(channels.values())

    [channel] = await eventually(opened, lambda open_now: len(open_now) == 1)
    assert not channel.closed
    del other
    gc.collect()

    assert channel.closed
    assert await engine.client.invoke_rpc(flow.add, "sock-drop", 1) == 2
