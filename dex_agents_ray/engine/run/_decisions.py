"""Applying a Step's decision (or an RPC's next Steps) to a transaction.

Order follows the Dex server: the returning execution's writes are staged
first, then other active executions are snapshotted and the matching ones
cancelled, then the decision's new executions are created (a decision never
cancels its own new Steps).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from dex.dexpb import dex_pb2 as pb

from dex_agents_ray.engine.run._state import Tx
from dex_agents_ray.engine.sdk._invoke import MovementExtras
from dex_agents_ray.engine.store._records import ExecRecord, RunStatus

_CLOSE = pb.CloseDecisionType


def _extras_at(extras: Sequence[MovementExtras], index: int) -> MovementExtras | None:
    return extras[index] if index < len(extras) else None


def create_movements(
    tx: Tx,
    movements: Sequence[pb.StepMovement],
    extras: Sequence[MovementExtras],
    from_exec_id: str,
) -> None:
    for index, movement in enumerate(movements):
        tx.create(movement, _extras_at(extras, index), from_exec_id=from_exec_id)


def cancel_matching(
    tx: Tx,
    origin: ExecRecord | None,
    step_types: Sequence[str],
    sibling_step_types: Sequence[str],
) -> None:
    """Cancel active executions of ``step_types`` (global) and of
    ``sibling_step_types`` that share ``origin``'s parent execution."""
    if not step_types and not sibling_step_types:
        return
    everywhere = set(step_types)
    siblings = set(sibling_step_types)
    origin_id = origin.exec_id if origin is not None else ""
    targets = [
        e
        for e in tx.active_snapshot()
        if e.exec_id != origin_id
        and (
            e.step_type in everywhere
            or (
                origin is not None
                and e.step_type in siblings
                and e.from_exec_id == origin.from_exec_id
            )
        )
    ]
    tx.cancel(targets, f"canceled by {origin_id or 'rpc'}")


def apply_decision(
    tx: Tx,
    origin: ExecRecord,
    decision: pb.StepDecision,
    extras: Sequence[MovementExtras],
    decode_reason: Callable[[pb.Value], Any],
) -> None:
    """Stage ``decision`` of ``origin`` (already marked completed in ``tx``)."""
    cancel_matching(tx, origin, decision.cancel_step_types, decision.cancel_sibling_step_types)
    if not decision.HasField("close_decision"):
        create_movements(tx, decision.next_steps, extras, origin.exec_id)
    else:
        close = decision.close_decision
        kind = close.close_decision_type
        has_output = close.HasField("close_input")
        if kind == _CLOSE.CLOSE_DECISION_TYPE_GRACEFUL_COMPLETE:
            if has_output:
                tx.complete_output(origin.exec_id, origin.step_type, close.close_input)
            tx.run.graceful_completed = True
        elif kind == _CLOSE.CLOSE_DECISION_TYPE_FORCE_COMPLETE:
            if has_output:
                tx.complete_output(origin.exec_id, origin.step_type, close.close_input)
            tx.close(RunStatus.COMPLETED)
        elif kind == _CLOSE.CLOSE_DECISION_TYPE_FORCE_FAIL:
            reason = decode_reason(close.close_input) if has_output else None
            tx.close(RunStatus.FAILED, "step_decision_failed", str(reason or ""))
        elif kind == _CLOSE.CLOSE_DECISION_TYPE_FORCE_COMPLETE_ON_CHANNELS_EMPTY:
            if all(tx.channel_empty(name) for name in close.conditional_channel_names):
                if has_output:
                    tx.complete_output(origin.exec_id, origin.step_type, close.close_input)
                tx.close(RunStatus.COMPLETED)
            else:
                create_movements(tx, decision.next_steps, extras, origin.exec_id)
        elif kind != _CLOSE.CLOSE_DECISION_TYPE_DEAD_END:
            raise ValueError(f"unsupported close decision type {kind}")
    finish_if_idle(tx)


def finish_if_idle(tx: Tx) -> None:
    """A run whose branches all ended, one gracefully, completes."""
    if not tx.closed and tx.run.graceful_completed and not tx.active_snapshot():
        tx.close(RunStatus.COMPLETED)


class LockTable:
    """Attribute locks held by Steps and RPCs of one run.

    Steps wait for their locks; RPCs only try (a conflict raises at once).
    """

    def __init__(self) -> None:
        self._held: dict[str, str] = {}
        self._waiters: list[asyncio.Future[None]] = []

    @property
    def busy(self) -> bool:
        """Whether any lock is held or awaited."""
        return bool(self._held or self._waiters)

    def holder(self, key: str) -> str | None:
        return self._held.get(key)

    def try_acquire(self, keys: Sequence[str], holder: str) -> list[str]:
        """Take every key, or none; returns the conflicting keys."""
        conflicts = [k for k in keys if self._held.get(k, holder) != holder]
        if not conflicts:
            for key in keys:
                self._held[key] = holder
        return conflicts

    async def acquire(self, keys: Sequence[str], holder: str) -> None:
        while self.try_acquire(keys, holder):
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter

    def release(self, keys: Sequence[str], holder: str) -> None:
        for key in keys:
            if self._held.get(key) == holder:
                del self._held[key]
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
