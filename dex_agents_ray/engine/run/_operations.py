"""Client operations on one run: start, RPC, stop."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass

from dex import IdReusePolicy, StopType
from dex.dexpb import dex_pb2 as pb
from dex.runtime_errors import (
    FlowAlreadyStartedError,
    FlowNotActiveOrNotFoundError,
    RpcLockConflictError,
)

from dex_agents_ray.engine import _clock as clock
from dex_agents_ray.engine._errors import service_error, worker_error
from dex_agents_ray.engine.run._decisions import cancel_matching, create_movements
from dex_agents_ray.engine.run._driver import RunDriver
from dex_agents_ray.engine.run._flow_config import DEFAULT_SEARCH_MODE
from dex_agents_ray.engine.run._state import RunState, Tx
from dex_agents_ray.engine.sdk._invoke import MovementExtras, invoke_rpc
from dex_agents_ray.engine.store._records import RunRecord, RunStatus

_RESTARTABLE_AFTER_FAILURE = (RunStatus.FAILED, RunStatus.CANCELED, RunStatus.TERMINATED)


@dataclass(frozen=True, kw_only=True)
class StartRequest:
    """What ``start_flow`` sends to the run's host (only data)."""

    flow_type: str
    flow_hash: str
    input: bytes
    """Serialized ``dex.Value`` of the start Step's input."""
    attribute_writes: list[bytes]
    """Serialized ``dex.AttributeWrite`` initializations."""
    id_reuse_policy: str
    ignore_already_started: bool
    request_id: str
    start_delay: float | None
    active_step_search_mode: str = DEFAULT_SEARCH_MODE
    """``StartFlowOptions.config_override``'s mode, or this engine's default."""


def _already_started(flow_id: str, detail: str) -> FlowAlreadyStartedError:
    return service_error(FlowAlreadyStartedError, detail, "StartFlow", flow_id)


def not_active(flow_id: str, operation: str) -> FlowNotActiveOrNotFoundError:
    return service_error(
        FlowNotActiveOrNotFoundError, f"flow {flow_id!r} is not running", operation, flow_id
    )


def _reuse_refusal(existing: RunRecord, request: StartRequest) -> str | None:
    policy = IdReusePolicy(request.id_reuse_policy)
    if existing.status is RunStatus.RUNNING:
        if policy is IdReusePolicy.ALLOW_TERMINATE_IF_RUNNING:
            return None
        return f"flow {existing.flow_id!r} is already running (run {existing.run_id})"
    if policy in (IdReusePolicy.DISALLOW, IdReusePolicy.DEFAULT):
        # DEFAULT is the Dex server's default, which rejects every used Flow ID.
        return f"flow ID {existing.flow_id!r} was used before and the policy is {policy.name}"
    if (
        policy is IdReusePolicy.ALLOW_IF_PREVIOUS_FAILED
        and existing.status not in _RESTARTABLE_AFTER_FAILURE
    ):
        return (
            f"flow {existing.flow_id!r} completed; the policy allows a restart only after failure"
        )
    return None


async def start_run(driver: RunDriver, request: StartRequest) -> str:
    """Create the run (or return the existing one for a repeated request)."""
    assert driver.definition is not None
    async with driver.commit_lock:
        existing = driver.state.run
        if existing is not None:
            if request.request_id and existing.start_request_id == request.request_id:
                return existing.run_id
            if existing.status is RunStatus.RUNNING and request.ignore_already_started:
                return existing.run_id
            refusal = _reuse_refusal(existing, request)
            if refusal is not None:
                raise _already_started(driver.flow_id, refusal)
        now = clock.now()
        fresh = RunState()
        fresh.run = RunRecord(
            flow_id=driver.flow_id,
            run_id=str(uuid.uuid4()),
            flow_type=request.flow_type,
            flow_hash=request.flow_hash,
            status=RunStatus.RUNNING,
            epoch=driver.epoch,
            started_at=float(int(now)),
            start_request_id=request.request_id,
            active_step_search_mode=request.active_step_search_mode,
        )
        tx = Tx(fresh, driver.epoch, now, stored=False)
        tx.write_attributes(pb.AttributeWrite.FromString(w) for w in request.attribute_writes)
        movement, extras = driver.definition.mapper.start_movement(
            driver.definition.flow, pb.Value.FromString(request.input)
        )
        not_before = now + request.start_delay if request.start_delay else None
        tx.history("", "flow_started", {"run_id": fresh.run.run_id})
        tx.create(movement, extras, from_exec_id="", not_before=not_before)
        had_tasks = existing is not None and existing.status is RunStatus.RUNNING
        if had_tasks:
            await driver.stop()
        await driver.commit(tx, replace_run=True)
        return fresh.run.run_id


async def run_rpc(
    driver: RunDriver,
    rpc_name: str,
    input_value: bytes | None,
    request_id: str,
    extra: tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]] = ((), (), ()),
    *,
    fresh: bool = False,
) -> bytes:
    """Run one RPC handler and commit its effects atomically; returns the output.

    A request ID is remembered with the output of an RPC that had effects, so
    a retry returns that output instead of applying again; ``fresh`` skips the
    look-up for an ID that cannot have been used yet.
    """
    assert driver.definition is not None and driver.state.run is not None
    if request_id and not fresh:
        remembered = await driver.store.rpc_response(driver.flow_id, request_id)
        if remembered is not None:
            return remembered
    rpc = driver.definition.flow.rpc(rpc_name)
    extra_locks, extra_maps, extra_channel_maps = extra
    keys = [*rpc.locks, *extra_locks]
    holder = f"rpc:{request_id or uuid.uuid4()}"
    conflicts = driver.locks.try_acquire(keys, holder)
    if conflicts:
        raise service_error(
            RpcLockConflictError,
            f"RPC {rpc_name} could not lock {', '.join(conflicts)}: held by "
            f"{', '.join(sorted({driver.locks.holder(k) or '' for k in conflicts}))}",
            "InvokeRPC",
            driver.flow_id,
        )
    try:
        attribute_maps = sorted({*rpc.load_attribute_map_instances, *extra_maps})
        request = driver.state.rpc_request(
            rpc_name,
            None if input_value is None else pb.Value.FromString(input_value),
            attribute_maps,
            rpc.load_channel_names,
            sorted({*rpc.load_channel_map_instances, *extra_channel_maps}),
        )
        values = driver.state.attribute_values(attribute_maps)
        taken = driver.state.taken_messages(rpc.load_channel_names)
        timeout = rpc.options.timeout.total_seconds() if rpc.options.timeout else None
        try:
            outcome = await asyncio.wait_for(
                invoke_rpc(
                    driver.definition.mapper, driver.definition.flow, request, values, taken
                ),
                timeout,
            )
        except Exception as error:  # the handler failed: nothing of it is applied
            detail = f"RPC {rpc_name} failed: {type(error).__name__}: {error}"
            raise worker_error(error, detail, "InvokeRPC", driver.flow_id) from error
        transactional = rpc.options.is_transactional or bool(keys)
        return await _commit_rpc(
            driver, rpc_name, outcome.response, outcome.extras, request_id, transactional
        )
    finally:
        driver.locks.release(keys, holder)


async def _commit_rpc(
    driver: RunDriver,
    rpc_name: str,
    response: pb.InvokeWorkerRPCResponse,
    extras: list[MovementExtras],
    request_id: str,
    transactional: bool,
) -> bytes:
    output: bytes = response.output.SerializeToString()
    has_effects = bool(
        response.upsert_attributes
        or response.publish_to_channel
        or response.delete_from_channel
        or response.HasField("step_decision")
    )
    if not has_effects:
        # Nothing to apply, so nothing to remember: a retry with the same
        # request ID runs the handler again, which is as safe as the first run.
        # What it read is durable before it answers (a deferred commit may not be).
        await driver.durable()
        return output
    async with driver.commit_lock:
        if not driver.state.is_running:
            raise not_active(driver.flow_id, "InvokeRPC")
        tx = driver.tx()
        tx.delete_messages(response.delete_from_channel, strict=transactional)
        tx.write_attributes(response.upsert_attributes)
        tx.publish(response.publish_to_channel)
        decision = response.step_decision
        cancel_matching(tx, None, decision.cancel_step_types, ())
        create_movements(tx, decision.next_steps, extras, "")
        tx.history("", "rpc_applied", {"rpc": rpc_name, "request_id": request_id})
        if request_id:
            tx.commit.rpc_request = (request_id, output)
        await driver.commit(tx)
    return output


async def update_run_config(driver: RunDriver, search_mode: str | None) -> None:
    """Apply ``update_flow_config`` to a running run: store its active-Step search
    mode and index its active Steps by it in the same commit (``None``: the
    config sets nothing this engine applies, and nothing is written)."""
    async with driver.commit_lock:
        if not driver.state.is_running:
            raise not_active(driver.flow_id, "UpdateFlowConfig")
        if search_mode is None:
            return
        tx = driver.tx()
        tx.run.active_step_search_mode = search_mode
        tx.history("", "flow_config_updated", {"active_step_search_mode": search_mode})
        await driver.commit(tx)


async def stop_run(driver: RunDriver, stop_type: str, reason: str | None) -> None:
    """Close a running run as canceled, terminated or failed."""
    async with driver.commit_lock:
        if not driver.state.is_running:
            raise not_active(driver.flow_id, "StopFlow")
        status = {
            StopType.CANCEL: RunStatus.CANCELED,
            StopType.TERMINATE: RunStatus.TERMINATED,
            StopType.FAIL: RunStatus.FAILED,
        }[StopType(stop_type)]
        tx = driver.tx()
        error_type = "client_api_failed" if status is RunStatus.FAILED else ""
        tx.close(status, error_type, reason or f"stopped by client ({stop_type})")
        await driver.commit(tx)
