"""RPCs: reads and writes, Attribute locks, transactions, load options, next Steps,
request IDs."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from dex import (
    ChannelMessageNotFoundError,
    FlowStatus,
    RPCInvokeOptions,
    RpcLockConflictError,
    WorkerInvocationError,
)

from dex_agents_ray.testing import FileGate
from tests.engine.flows_rpc import Gate, Note, Notes, RpcFlow
from tests.engine.polling import details, wait_for_event

TIMEOUT = 60
# An RPC that conflicts must fail at once; one that waited for the lock would
# outlast this and fail the test.
AT_ONCE = 20


async def _parked(engine_factory: Any, flow_id: str) -> tuple[Any, RpcFlow]:
    flow = RpcFlow()
    engine = await engine_factory([flow])
    await engine.client.start_flow(flow, flow_id, Gate("", ""))
    await wait_for_event(engine.client, flow_id, "Parked-1", "wait_for_completed")
    return engine, flow


async def test_rpcs_read_and_write_attributes(engine_factory: Any) -> None:
    engine, flow = await _parked(engine_factory, "rw")
    client = engine.client
    assert await client.invoke_rpc(flow.counter, "rw") == 0
    assert await client.invoke_rpc(flow.add, "rw", 5) == 5
    assert await client.invoke_rpc(flow.add, "rw", 2) == 7
    assert await client.invoke_rpc(flow.counter, "rw") == 7


async def test_a_step_holding_a_lock_makes_a_locking_rpc_conflict_at_once(
    engine_factory: Any, state_dir: Path
) -> None:
    flow = RpcFlow()
    engine = await engine_factory([flow])
    client = engine.client
    gate = FileGate(state_dir, "hold")
    await client.start_flow(flow, "locks", Gate(str(state_dir), "hold"))
    await gate.wait_until_reached()
    with pytest.raises(RpcLockConflictError, match="counter"):
        await asyncio.wait_for(client.invoke_rpc(flow.locked_add, "locks", 1), AT_ONCE)
    assert await client.invoke_rpc(flow.counter, "locks") == 0  # reads need no lock
    gate.release()
    await wait_for_event(client, "locks", "Holder-1", "step_completed")
    assert await client.invoke_rpc(flow.locked_add, "locks", 1) == 101


async def test_an_rpc_holding_a_lock_makes_another_locking_rpc_conflict(
    engine_factory: Any, state_dir: Path
) -> None:
    engine, flow = await _parked(engine_factory, "rpc-locks")
    client = engine.client
    gate = FileGate(state_dir, "rpc")
    slow = asyncio.ensure_future(
        client.invoke_rpc(flow.slow_locked_add, "rpc-locks", Gate(str(state_dir), "rpc"))
    )
    await gate.wait_until_reached()
    with pytest.raises(RpcLockConflictError):
        await asyncio.wait_for(client.invoke_rpc(flow.locked_add, "rpc-locks", 1), AT_ONCE)
    gate.release()
    assert await slow == 1000
    assert await client.invoke_rpc(flow.locked_add, "rpc-locks", 1) == 1001


async def test_a_transactional_rpc_with_a_missing_message_applies_nothing(
    engine_factory: Any,
) -> None:
    engine, flow = await _parked(engine_factory, "tx")
    client = engine.client
    await client.invoke_rpc(flow.fill, "tx", 3)
    ids = await client.invoke_rpc(flow.inbox_ids, "tx")
    assert len(ids) == 3
    with pytest.raises(ChannelMessageNotFoundError):
        await client.invoke_rpc(flow.take, "tx", [ids[0], "no-such-message"])
    assert await client.invoke_rpc(flow.inbox_ids, "tx") == ids
    assert await client.invoke_rpc(flow.state, "tx") == ["<unset>", "0"]
    assert await client.invoke_rpc(flow.take, "tx", [ids[0]]) == 2
    assert await client.invoke_rpc(flow.inbox_ids, "tx") == ids[1:]
    assert await client.invoke_rpc(flow.state, "tx") == ["took", "1"]


async def test_a_plain_rpc_skips_a_missing_message_and_applies_the_rest(
    engine_factory: Any,
) -> None:
    engine, flow = await _parked(engine_factory, "loose")
    client = engine.client
    await client.invoke_rpc(flow.fill, "loose", 2)
    ids = await client.invoke_rpc(flow.inbox_ids, "loose")
    await client.invoke_rpc(flow.take_loosely, "loose", [ids[1], "no-such-message"])
    assert await client.invoke_rpc(flow.inbox_ids, "loose") == ids[:1]
    assert await client.invoke_rpc(flow.state, "loose") == ["took loosely", "1"]


async def test_rpc_load_options_select_attribute_map_instances(engine_factory: Any) -> None:
    engine, flow = await _parked(engine_factory, "loads")
    client = engine.client
    await client.invoke_rpc(flow.set_note, "loads", Note("a", "A"))
    await client.invoke_rpc(flow.set_note, "loads", Note("b", "B"))
    assert await client.invoke_rpc(flow.all_notes, "loads") == ["a=A", "b=B"]
    assert await client.invoke_rpc(flow.note, "loads", "b") == "AttributeMapNotLoadedError"
    selected = RPCInvokeOptions(load_attribute_map_instances=(Notes.load("b"),))
    assert await client.invoke_rpc(flow.note, "loads", "b", options=selected) == "B"


async def test_rpc_result_moves_and_cancels_steps(engine_factory: Any) -> None:
    engine, flow = await _parked(engine_factory, "redirect")
    client = engine.client
    assert await client.invoke_rpc(flow.redirect, "redirect", "x") == "redirected"
    result = await client.wait_for_flow("redirect", timeout=TIMEOUT)
    assert result.status is FlowStatus.COMPLETED
    assert result.single_output(str) == "finished:x:"
    history = await client.read_step_history("redirect")
    assert len(details(history, "Parked-1", "step_canceled")) == 1
    assert details(history, "Finisher-1", "step_scheduled") == [{"from": ""}]


async def test_a_retried_rpc_returns_its_first_result_and_applies_once(
    engine_factory: Any,
) -> None:
    engine, flow = await _parked(engine_factory, "retry")
    client = engine.client
    assert await client.invoke_rpc(flow.add, "retry", 1, request_id="r-1") == 1
    assert await client.invoke_rpc(flow.add, "retry", 1, request_id="r-2") == 2
    assert await client.invoke_rpc(flow.add, "retry", 1, request_id="r-1") == 1
    assert await client.invoke_rpc(flow.counter, "retry") == 2
    history = await client.read_step_history("retry")
    applied = [h.detail["request_id"] for h in history if h.event == "rpc_applied"]
    assert applied == ["r-1", "r-2"]


async def test_a_failing_rpc_raises_worker_invocation_error_and_applies_nothing(
    engine_factory: Any,
) -> None:
    engine, flow = await _parked(engine_factory, "explode")
    client = engine.client
    with pytest.raises(WorkerInvocationError) as raised:
        await client.invoke_rpc(flow.explode, "explode", 5)
    assert raised.value.worker_error_type == "RuntimeError"
    assert raised.value.worker_error_detail == "the handler failed after a write"
    assert raised.value.flow_id == "explode"
    assert await client.invoke_rpc(flow.counter, "explode") == 0
