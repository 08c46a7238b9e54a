"""Builders of store records for the contract tests, and an opened-store helper."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from dex_agents_ray.engine import StoreConfig
from dex_agents_ray.engine.store._open import open_store
from dex_agents_ray.engine.store._records import (
    ChannelMessageRecord,
    CompletionRecord,
    ExecRecord,
    ExecStatus,
    HistoryRecord,
    RunRecord,
    RunStatus,
)
from dex_agents_ray.engine.store._store import FlowStore


@asynccontextmanager
async def opened(config: StoreConfig) -> AsyncIterator[FlowStore]:
    store = open_store(config)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


def run(
    flow_id: str,
    *,
    status: RunStatus = RunStatus.RUNNING,
    started_at: float = 1000.0,
    run_id: str = "run-1",
    epoch: int = 0,
    **fields: Any,
) -> RunRecord:
    return RunRecord(
        flow_id=flow_id,
        run_id=run_id,
        flow_type="TestFlow",
        flow_hash="h" * 32,
        status=status,
        epoch=epoch,
        started_at=started_at,
        **fields,
    )


def execution(
    exec_id: str,
    status: ExecStatus = ExecStatus.READY,
    *,
    options: bytes = b"\x01options",
    **fields: Any,
) -> ExecRecord:
    return ExecRecord(
        exec_id=exec_id,
        step_type=exec_id.split("-")[0],
        number=int(exec_id.split("-")[1]),
        input=b"\x00input\xff",
        options=options,
        from_exec_id="",
        status=status,
        created_at=1000.5,
        **fields,
    )


def message(channel: str, seq: int, message_id: str, value: bytes) -> ChannelMessageRecord:
    return ChannelMessageRecord(channel=channel, seq=seq, message_id=message_id, value=value)


def completion(exec_id: str, output: bytes) -> CompletionRecord:
    return CompletionRecord(step_type=exec_id.split("-")[0], exec_id=exec_id, output=output)


def entry(exec_id: str, event: str, **detail: Any) -> HistoryRecord:
    return HistoryRecord(at=1001.25, exec_id=exec_id, event=event, detail=detail)
