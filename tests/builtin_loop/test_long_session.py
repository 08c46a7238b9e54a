"""The long-session guard, on real Ray and SQLite: 800 turns with compaction, a
retention limit of 100 messages and engine retention, and the run's stored state
stops growing. ``DEX_AGENTS_LONG_TESTS=1`` runs 2,000 turns instead."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

from dex_agents_ray import AgentSessionClient
from dex_agents_ray.engine import RetentionOptions
from tests.builtin_loop.agents import build_compacting_flow

TURNS = 2000 if os.environ.get("DEX_AGENTS_LONG_TESTS") == "1" else 800
QUESTION = "Where is my order A1? It has not come yet."
_TABLES = {
    "runs": "LENGTH(flow_id) + 200",
    "attributes": "LENGTH(key) + LENGTH(value)",
    "messages": "LENGTH(value) + LENGTH(message_id)",
    "executions": "LENGTH(doc)",
    "completions": "LENGTH(output)",
    "history": "LENGTH(detail) + LENGTH(event) + LENGTH(exec_id)",
    "rpc_requests": "LENGTH(request_id) + LENGTH(response)",
    "streams": "LENGTH(value) + LENGTH(source)",
    "active_steps": "LENGTH(step_type)",
}


def stored(store: Path, flow_id: str) -> tuple[int, dict[str, int]]:
    """The run's stored bytes (its rows in every store table) and rows per table."""
    total, rows = 0, {}
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        for table, size in _TABLES.items():
            count, nbytes = db.execute(
                f"SELECT COUNT(*), COALESCE(SUM({size}), 0) FROM {table} WHERE flow_id = ?",
                (flow_id,),
            ).fetchone()
            rows[table] = int(count)
            total += int(nbytes)
    return total, rows


async def _turn(sessions: AgentSessionClient, session_id: str, turn: int, token: str) -> str:
    if turn == 1:
        await sessions.start_session(session_id, QUESTION)
    else:
        assert await sessions.send_user_message(session_id, QUESTION)
    while True:
        message = await sessions.read_event(session_id, token, timeout=120)
        token = message.resume_token
        if message.value.type.value in ("turn_completed", "turn_failed"):
            assert message.value.type.value == "turn_completed", message.value.payload
            return token


async def test_stored_state_stays_bounded_over_hundreds_of_turns(
    engine_factory: Any, state_dir: Path, store_path: Path
) -> None:
    flow = build_compacting_flow(
        str(state_dir),
        window_tokens=900,
        retained_message_limit=100,
        event_stream_capacity_bytes=64 * 1024,
        inline_tools=True,
    )
    retention = RetentionOptions(
        keep_finished_executions=100, keep_rpc_requests=50, prune_every_commits=50
    )
    engine = await engine_factory([flow], retention=retention)
    sessions = AgentSessionClient(engine.client, flow)
    token, sizes = "", {}
    for turn in range(1, TURNS + 1):
        token = await _turn(sessions, "long", turn, token)
        if turn in (TURNS // 4, TURNS // 2, TURNS):
            sizes[turn] = stored(store_path, "long")
    (quarter, _), (half, _), (last, last_rows) = (
        sizes[TURNS // 4],
        sizes[TURNS // 2],
        sizes[TURNS],
    )
    # Bounded: the second half of the session added (almost) nothing.
    assert last <= 1.25 * half, (quarter, half, last, last_rows)
    assert last_rows["executions"] <= 100 + 50 * 8, last_rows
    assert last_rows["rpc_requests"] <= 50 + 50, last_rows
    page = await sessions.list_agent_messages("long", limit=200)
    assert page.deleted_before_sequence is not None
    assert len(page.messages) <= 200 and page.messages[-1].sequence == 4 * TURNS
    # Model Steps load the window and only the chunks after the summary.
    loads = latest_model_loads(store_path, "long")
    assert "AgentMessages/" in loads and "AgentMessageChunks/" not in loads
    loaded = [k for k in loads if k.startswith("AgentMessageChunks/")]
    assert len(loaded) < len(_index_chunks(store_path, "long")), loaded
    history = await engine.client.read_step_history("long")
    assert 0 < len(history) < 100 * 12 + 50  # the kept executions' entries and 50 more


def latest_model_loads(store: Path, flow_id: str) -> list[str]:
    """What the newest ``RunModel`` execution of ``flow_id`` loads."""
    from dex.dexpb import dex_pb2 as pb

    from dex_agents_ray.engine.store._records import ExecRecord

    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        docs = [
            ExecRecord.from_json(doc)
            for (doc,) in db.execute(
                "SELECT doc FROM executions WHERE flow_id = ? ORDER BY rowid", (flow_id,)
            )
        ]
    model = [d for d in docs if d.step_type == "RunModel"][-1]
    return list(pb.StepOptions.FromString(model.options).execute_load_attribute_map_instances)


def _index_chunks(store: Path, flow_id: str) -> list[object]:
    """The chunks ``AgentMessageIndex`` lists (its stored JSON)."""
    import json

    from dex.dexpb import dex_pb2 as pb

    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        (raw,) = db.execute(
            "SELECT value FROM attributes WHERE flow_id = ? AND key = 'AgentMessageIndex'",
            (flow_id,),
        ).fetchone()
    chunks: list[object] = json.loads(pb.Value.FromString(raw).obj_value.payload)["chunks"]
    return chunks
