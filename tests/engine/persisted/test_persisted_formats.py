"""A store written before the engine's sub-packages loads and finishes its runs.

``store.db`` was written by ``generate.py`` with the commit in ``store.json``,
whose engine was 47 flat modules: its Step history, run rows, session state and
pickled Flow definitions are the formats of that time. An engine of this
checkout opens a copy and finishes each run: a session mid-turn waiting for an
approval, a passivated session, and a Flow waiting on a durable timer whose
definition names ``taken_channel_messages`` by its old module path.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from dex import FlowStatus

from dex_agents_ray import AgentSessionClient, InterruptKind, ToolEffect
from dex_agents_ray.engine._moved import MOVED
from dex_agents_ray.testing import InvocationLog
from tests.engine.persisted.agents import GREETING, LOOKUP_PROMPT, support_flow
from tests.engine.persisted.reminders import REMINDER_DAYS, REMINDER_TEXT, ReminderFlow
from tests.session.polling import snapshot_when, turn_done

HERE = Path(__file__).resolve().parent
FIXTURE = HERE / "store.db"
OLD_PATH = "dex_agents_ray.engine._invoke"
"""The module path of ``taken_channel_messages`` when the fixture was written."""


def _stored_definitions(store: Path) -> dict[str, bytes]:
    conn = sqlite3.connect(store)
    try:
        rows = conn.execute("SELECT flow_type, blob FROM flow_definitions").fetchall()
    finally:
        conn.close()
    return {flow_type: bytes(blob) for flow_type, blob in rows}


@pytest.fixture
def old_store(tmp_path: Path) -> Path:
    """A copy of the fixture store (an engine writes to the store it opens)."""
    written = json.loads((HERE / "store.json").read_text())
    assert written["changed"] is False, "store.db was written by a checkout with changes"
    store = tmp_path / "store" / "engine.db"
    store.parent.mkdir()
    shutil.copyfile(FIXTURE, store)
    return store


def test_the_fixture_names_a_module_by_its_path_from_before_the_move(old_store: Path) -> None:
    definitions = _stored_definitions(old_store)
    assert sorted(definitions) == ["PersistedSupport", "ReminderFlow"]
    assert OLD_PATH.encode() in definitions["ReminderFlow"]
    assert OLD_PATH.rpartition(".")[2] in MOVED


async def _approve_the_pending_call(sessions: AgentSessionClient, refunds: InvocationLog) -> None:
    """The session waits in ``AwaitToolApproval``; approving runs the tool once."""
    waiting = await sessions.get_agent_snapshot("approval")
    assert [
        (i.interrupt_id, i.kind, i.tool_name, i.effect) for i in waiting.pending_interrupts
    ] == [("refund-1", InterruptKind.APPROVAL, "refund_order", ToolEffect.NON_IDEMPOTENT_WRITE)]
    assert waiting.state is not None and waiting.state.active_turn_id == "turn-1"
    assert refunds.entries() == []

    assert await sessions.resolve_interrupt("approval", "refund-1", approved=True)
    done = await snapshot_when(sessions, "approval", turn_done(1))

    assert done.state is not None and done.state.last_turn_error is None
    assert done.messages[-1].text == '{"order_id": "A7", "refunded": "yes"}'
    assert refunds.entries() == ["approval/turn-1/refund-1/1"]
    assert not await sessions.resolve_interrupt("approval", "refund-1", approved=True)


async def _wake_the_passivated_session(engine: Any, sessions: AgentSessionClient) -> None:
    """The session left memory after its first turn; a user message brings it back."""
    assert await engine.store.passivation.passivated_count() == 1
    before = await engine.store.runs.get_run("passivated")
    assert before is not None and before.active_step_types == ["AwaitUserMessage"]

    assert await sessions.send_user_message("passivated", LOOKUP_PROMPT)
    done = await snapshot_when(sessions, "passivated", turn_done(2))

    assert await engine.store.passivation.passivated_count() == 0
    assert [(m.role.value, m.text, m.tool_output) for m in done.messages] == [
        ("user", GREETING, None),
        ("assistant", f"You said: {GREETING}", None),
        ("user", LOOKUP_PROMPT, None),
        ("assistant", None, None),
        ("tool", None, '{"order_id": "A1", "status": "shipped"}'),
        ("assistant", '{"order_id": "A1", "status": "shipped"}', None),
    ]


async def _let_the_timer_fire(engine: Any, reminders: ReminderFlow) -> None:
    """The stored Flow's code runs (an RPC that calls ``taken_channel_messages``),
    and its timer fires once the engine's clock passes it."""
    assert await engine.client.invoke_rpc(reminders.add_note, "reminder", "bring the card")
    assert await engine.client.invoke_rpc(reminders.notes, "reminder") == ["bring the card"]

    await engine.advance_clock(timedelta(days=REMINDER_DAYS))
    result = await engine.client.wait_for_flow("reminder", timeout=60)

    assert result.status is FlowStatus.COMPLETED
    assert result.completions[0].decode(str) == f"{REMINDER_TEXT} (timer fired: True)"


async def test_the_runs_of_a_store_written_before_the_move_finish(
    engine_factory: Any, old_store: Path, tool_log_dir: Path
) -> None:
    refunds = InvocationLog(tool_log_dir / "refund.log")
    support, reminders = support_flow(), ReminderFlow()
    engine = await engine_factory([support, reminders], store=old_store)
    sessions = AgentSessionClient(engine.client, support)

    await _approve_the_pending_call(sessions, refunds)
    await _wake_the_passivated_session(engine, sessions)
    await _let_the_timer_fire(engine, reminders)

    history = await engine.store.runs.history("approval")
    assert [(h.exec_id, h.event) for h in history][:2] == [
        ("", "flow_started"),
        ("StartAgentSession-1", "step_scheduled"),
    ]
    assert sum(1 for h in history if h.event == "flow_started") == 1
