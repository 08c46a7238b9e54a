"""Sessions that an earlier release stored, on real Ray and SQLite (the spec's
"Message storage and retention" and "Steering and turn cancellation"): a session in
the 0.1.0 layout reads as one large window and leaves it over several commits, at
most 4 chunks a Step, and a turn that a Worker without turn control started or
advanced refuses steering and cancellation and runs to its end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dex_agents_ray import (
    AgentSessionClient,
    AgentSessionOptions,
    AgentSnapshot,
)
from dex_agents_ray.testing import FileGate
from tests.session.agents import Reply
from tests.session.legacy_agents import StoredLayout, build_legacy_flow
from tests.session.polling import snapshot_when, turn_done

SMALL_WINDOW = AgentSessionOptions(message_window_size=4, message_chunk_size=2)
CONTINUATIONS = 18
"""Model calls that each store one message, so the first turn stores 20."""


def _texts(snapshot: AgentSnapshot) -> list[str | None]:
    return [m.text for m in snapshot.messages]


async def _layout(engine: Any, flow: Any, session_id: str) -> StoredLayout:
    layout: StoredLayout = await engine.client.invoke_rpc(flow.stored_layout, session_id)
    return layout


async def test_a_session_in_the_0_1_0_layout_reads_whole_and_leaves_the_window_over_commits(
    engine_factory: Any, state_dir: Path
) -> None:
    long_turn = [Reply(continue_with=f"note {n}") for n in range(1, CONTINUATIONS + 1)]
    script = {"start": [*long_turn, Reply()], "again": [Reply()], "more": [Reply()]}
    flow = build_legacy_flow(state_dir, script, options=SMALL_WINDOW)
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("old-1", "start", session_settings={"model": "m"})
    before = await snapshot_when(sessions, "old-1", turn_done(1))
    assert len(before.messages) == CONTINUATIONS + 2
    assert (await _layout(engine, flow, "old-1")).indexed  # this release chunked them

    # The fixture: every message back in AgentMessages, no index, no chunks, no settings.
    window = await engine.client.invoke_rpc(flow.store_as_0_1_0, "old-1")
    assert window == CONTINUATIONS + 2
    legacy = await _layout(engine, flow, "old-1")
    assert legacy == StoredLayout(window=tuple(range(1, 21)), chunks=(), indexed=False)

    # Read as one large window: every message, in order, and pages through it.
    read = await sessions.get_agent_snapshot("old-1")
    assert _texts(read) == _texts(before)
    assert [m.sequence for m in read.messages] == list(range(1, 21))
    assert read.session_settings == {}
    page = await sessions.list_agent_messages("old-1", limit=8)
    assert [m.sequence for m in page.messages] == list(range(13, 21))
    assert page.next_before_sequence == 13 and page.deleted_before_sequence is None
    older = await sessions.list_agent_messages("old-1", before_sequence=13, limit=50)
    assert [m.sequence for m in older.messages] == list(range(1, 13))
    assert older.next_before_sequence is None

    # Each Step that stores a message moves at most 4 chunks out of the window:
    # the user message (21) leaves 13 in it, the answer (22) leaves 6.
    assert await sessions.send_user_message("old-1", "again")
    second = await snapshot_when(sessions, "old-1", turn_done(2))
    after_one = await _layout(engine, flow, "old-1")
    assert after_one.indexed
    assert after_one.chunks == tuple((n, n + 1) for n in range(1, 17, 2))
    assert after_one.window == tuple(range(17, 23))
    # Then the window shrinks to its size and nothing was lost on the way.
    assert await sessions.send_user_message("old-1", "more")
    third = await snapshot_when(sessions, "old-1", turn_done(3))
    settled = await _layout(engine, flow, "old-1")
    assert len(settled.window) <= SMALL_WINDOW.message_window_size
    assert settled.chunks == tuple((n, n + 1) for n in range(1, settled.window[0], 2))
    assert _texts(third)[:20] == _texts(before)
    assert _texts(third)[20:22] == _texts(second)[20:22] == ["again", "no tools"]
    assert [m.sequence for m in third.messages] == list(range(1, 25))


async def test_a_turn_a_worker_without_turn_control_advanced_refuses_steer_and_cancel(
    engine_factory: Any, state_dir: Path
) -> None:
    script = {"go": [Reply(model_gate="one")], "next": [Reply()]}
    flow = build_legacy_flow(state_dir, script)
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("old-2", "go")
    gate = FileGate(state_dir, "model-one")
    await gate.wait_until_reached(timeout=120)
    assert await engine.client.invoke_rpc(flow.advance_turn_as_0_1_0, "old-2")
    assert await sessions.send_user_message("old-2", "next")  # queueing still works

    held = await sessions.get_agent_snapshot("old-2")
    assert held.state is not None and not held.state.accepts_turn_control
    queued = held.queued_messages[0]
    assert not await sessions.steer_user_message("old-2", message_id=queued.message_id)
    assert not await sessions.steer_user_message("old-2", text="stop that")
    assert not await sessions.cancel_turn("old-2", "turn-1")
    assert await sessions.get_agent_snapshot("old-2") == held  # nothing changed

    # The turn runs to its end as before; the queued message starts the next one.
    gate.release()
    done = await snapshot_when(sessions, "old-2", turn_done(2))
    assert _texts(done) == ["go", "no tools", "next", "no tools"]
    assert done.steered_messages == () and done.queued_messages == ()
    assert done.state is not None and done.state.accepts_turn_control
