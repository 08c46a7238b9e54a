"""A queued message consumed while a steer of it runs (the spec's "Steering and turn
cancellation"): the RPC raises ``ChannelMessageNotFoundError`` and changes nothing,
on real Ray and SQLite.

Two steers of the same queued message read the session before either commits:
the test holds SQLite's write lock, so the first steer's commit waits in the
store, and the second has read the queue once a later read-only RPC on the same
connection answers (the host starts a connection's calls in order). The first
steer consumes the message; the second finds it gone at its commit."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dex import ChannelMessageNotFoundError

from dex_agents_ray import AgentSessionClient, AgentSnapshot
from dex_agents_ray.testing import FileGate
from tests.session.agents import Reply, build_flow
from tests.session.polling import snapshot_when, turn_done

WAIT = 60.0
"""Seconds a call may take while the store is locked: well under the store's retry
deadline (60 s by default counts from the first try, and the lock is held far less)."""


@contextlib.contextmanager
def _store_write_locked(path: Path) -> Iterator[None]:
    """Hold SQLite's write lock on the engine's store (as another program's writer would)."""
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        yield
        other.execute("ROLLBACK")
    finally:
        other.close()


async def _steer_outcome(call: asyncio.Future[bool]) -> bool | ChannelMessageNotFoundError:
    try:
        return await asyncio.wait_for(call, WAIT)
    except ChannelMessageNotFoundError as error:
        return error


def _user_texts(snapshot: AgentSnapshot, turn_id: str) -> list[str | None]:
    return [m.text for m in snapshot.messages if m.turn_id == turn_id and m.role.value == "user"]


async def test_a_steer_of_a_message_consumed_meanwhile_raises_and_changes_nothing(
    engine_factory: Any, state_dir: Path, store_path: Path
) -> None:
    flow = build_flow(state_dir, {"go": [Reply(model_gate="one")], "later": [Reply()]})
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("s-1", "go")
    gate = FileGate(state_dir, "model-one")
    await gate.wait_until_reached(timeout=120)
    assert await sessions.send_user_message("s-1", "later")
    queued = (await sessions.get_agent_snapshot("s-1")).queued_messages
    assert [q.text for q in queued] == ["later"]
    message_id = queued[0].message_id

    with _store_write_locked(store_path):
        first = asyncio.ensure_future(sessions.steer_user_message("s-1", message_id=message_id))
        second = asyncio.ensure_future(sessions.steer_user_message("s-1", message_id=message_id))
        # Answered from memory while both steers wait: each has read the queue by now.
        meanwhile = await asyncio.wait_for(sessions.get_agent_snapshot("s-1"), WAIT)
        assert [q.message_id for q in meanwhile.queued_messages] == [message_id]
        assert meanwhile.steered_messages == ()
    outcomes = [await _steer_outcome(first), await _steer_outcome(second)]

    # Exactly one steer moved the message; the other raised and applied nothing.
    assert sorted(type(o).__name__ for o in outcomes) == ["ChannelMessageNotFoundError", "bool"]
    assert True in outcomes
    steered = await sessions.get_agent_snapshot("s-1")
    assert steered.queued_messages == ()
    assert [m.text for m in steered.steered_messages] == ["later"]
    assert not await sessions.steer_user_message("s-1", message_id=message_id)  # gone now

    # The model call finishes; the next turn's user messages hold the message once.
    gate.release()
    done = await snapshot_when(sessions, "s-1", turn_done(2))
    assert _user_texts(done, "turn-2") == ["later"]
    assert done.steered_messages == () and done.queued_messages == ()
