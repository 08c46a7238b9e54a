"""The ``runs`` table's rows as both stores read them, and the per-run tables."""

from __future__ import annotations

import json
from typing import Any

from dex_agents_ray.engine.store._records import RunRecord, RunStatus

PER_RUN_TABLES = (
    "attributes",
    "messages",
    "executions",
    "completions",
    "rpc_requests",
    "history",
)
"""The tables holding one run's rows beside ``runs`` (both stores)."""

RUN_COLUMNS = (
    "flow_id",
    "run_id",
    "flow_type",
    "flow_hash",
    "status",
    "started_at",
    "closed_at",
    "error_type",
    "error_message",
    "active_step_types",
    "search_attributes",
    "extra",
)


def runs_query(
    flow_type: str | None, active_step_type: str | None, limit: int | None, mark: str
) -> tuple[str, tuple[Any, ...]]:
    """The runs that ``list_runs`` filters, oldest first, as SQL for either store
    (``mark`` is the parameter placeholder); an index serves each filter."""
    columns = ", ".join(f"r.{c}" for c in RUN_COLUMNS)
    sql = f"SELECT {columns} FROM runs r"
    params: list[Any] = []
    if active_step_type is not None:
        sql += f" JOIN active_steps a ON a.flow_id = r.flow_id AND a.step_type = {mark}"
        params.append(active_step_type)
    if flow_type is not None:
        sql += f" WHERE r.flow_type = {mark}"
        params.append(flow_type)
    order = "a.started_at, a.flow_id" if active_step_type is not None else "r.started_at, r.flow_id"
    sql += f" ORDER BY {order}"
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    return sql, tuple(params)


def run_from_row(row: tuple[Any, ...], epoch: int) -> RunRecord:
    """The ``RunRecord`` of a ``runs`` row (``RUN_COLUMNS`` order) at ``epoch``."""
    (
        flow_id,
        run_id,
        flow_type,
        flow_hash,
        status,
        started_at,
        closed_at,
        error_type,
        error_message,
        active,
        search,
        extra,
    ) = row
    extra_d = json.loads(extra)
    return RunRecord(
        flow_id=flow_id,
        run_id=run_id,
        flow_type=flow_type,
        flow_hash=flow_hash,
        status=RunStatus(status),
        epoch=epoch,
        started_at=started_at,
        closed_at=closed_at,
        error_type=error_type,
        error_message=error_message,
        counters=dict(extra_d["counters"]),
        next_message_seq=int(extra_d["next_message_seq"]),
        graceful_completed=bool(extra_d["graceful_completed"]),
        start_request_id=str(extra_d["start_request_id"]),
        # Rows written before search modes existed index every active Step.
        active_step_search_mode=str(extra_d.get("active_step_search_mode", "default")),
        active_step_types=list(json.loads(active)),
        search_attributes=dict(json.loads(search)),
    )
