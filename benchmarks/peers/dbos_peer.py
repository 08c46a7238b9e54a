"""DBOS with its SQLite system database.

One ``@DBOS.workflow`` per session; each model call and each tool call is an async
``@DBOS.step`` (the tool steps of a turn run together under ``asyncio.gather``).

Variants:
    default: DBOS as it comes: the SQLite system database in the rollback journal,
        synchronous=FULL.
    wal: the same with journal_mode=WAL set on the system database first.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing
from pathlib import Path

from dbos import DBOS

from .workload import TURNS, Message, ToolCall, run_tool, scripted_model, user_message

# Distributions whose versions a job reports.
PACKAGES: tuple[str, ...] = ("dbos", "SQLAlchemy")


@DBOS.step()
async def model_step(messages: list[Message]) -> Message:
    return scripted_model(messages)


@DBOS.step()
async def tool_step(call: ToolCall) -> Message:
    return run_tool(call)


@DBOS.workflow()
async def agent_session(session_id: str) -> int:
    """One session; ``session_id`` is its input (DBOS picks the workflow ID)."""
    messages: list[Message] = []
    for turn in range(TURNS):
        messages.append(user_message(turn))
        reply = await model_step(messages)
        messages.append(reply)
        messages += await asyncio.gather(*(tool_step(c) for c in reply.get("tool_calls", [])))
        messages.append(await model_step(messages))
    return len(messages)


class DbosPeer:
    """One step is one ``operation_outputs`` row."""

    async def session(self, session_id: str) -> None:
        await agent_session(session_id)


@asynccontextmanager
async def open_system(workdir: Path, variant: str) -> AsyncIterator[DbosPeer]:
    path = workdir / "dbos.sqlite"
    if variant == "wal":
        # journal_mode=WAL is stored in the database file, so DBOS's connections keep it.
        with closing(sqlite3.connect(path)) as conn:
            conn.execute("PRAGMA journal_mode=WAL").fetchall()
    DBOS(
        config={
            "name": "dex-peers",
            "system_database_url": f"sqlite:///{path}",
            "log_level": "WARNING",
        }
    )
    DBOS.launch()
    try:
        yield DbosPeer()
    finally:
        DBOS.destroy()
