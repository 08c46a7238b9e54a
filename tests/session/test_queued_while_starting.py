"""A queued message ``AwaitUserMessage`` has taken is in the snapshot until its turn
starts, so a client that checks what it sent never sends it twice.

The engine hands the message to the Step when its wait is satisfied, which
removes it from ``QueuedUserMessages``; the turn that stores it starts when the
Step's ``execute`` commits. A runner whose ``build_user_message`` waits at a
gate holds the session at exactly that point, on real Ray and SQLite.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dex_agents_ray import AgentSessionClient, FrameworkMessage, MessageRole
from dex_agents_ray.testing import FileGate
from tests.session.agents import Reply, ScriptedRunner, build_flow, user_message
from tests.session.polling import snapshot_when, turn_done

TIMEOUT = 120.0


class GatedBuildRunner(ScriptedRunner):
    """Builds a user message ``gated ...`` only once gate ``build`` is released."""

    def build_user_message(self, text: str) -> FrameworkMessage:
        if text.startswith("gated"):
            FileGate(self.state_dir, "build").wait_for_release_sync()
        return user_message(text)


async def test_a_taken_message_stays_in_the_snapshot_until_its_turn_starts(
    engine_factory: Any, state_dir: Path
) -> None:
    flow = build_flow(
        state_dir, {"go": [Reply()], "gated one": [Reply()]}, runner_class=GatedBuildRunner
    )
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("s-1", "go")
    await snapshot_when(sessions, "s-1", turn_done(1))
    gate = FileGate(state_dir, "build")

    assert await sessions.send_user_message("s-1", "gated one")
    await gate.wait_until_reached(timeout=TIMEOUT)

    # AwaitUserMessage took the message; its turn has not started.
    taking = await sessions.get_agent_snapshot("s-1")
    assert taking.state is not None and taking.state.active_turn_id is None
    assert taking.state.turn_count == 1
    assert "gated one" not in [m.text for m in taking.messages]
    assert [q.text for q in taking.queued_messages] == ["gated one"]
    assert taking.queued_message_count == 1
    taken_id = taking.queued_messages[0].message_id
    assert taken_id
    # It is no longer the queue's to give up: deleting it changes nothing.
    assert not await sessions.delete_queued_message("s-1", taken_id)

    gate.release()
    started = await snapshot_when(sessions, "s-1", turn_done(2), timeout=TIMEOUT)

    user_texts = [m.text for m in started.messages if m.role is MessageRole.USER]
    assert user_texts == ["go", "gated one"]  # once, in its own turn
    assert started.queued_messages == () and started.queued_message_count == 0


async def test_a_message_sent_while_one_is_taken_queues_behind_it(
    engine_factory: Any, state_dir: Path
) -> None:
    flow = build_flow(
        state_dir,
        {"go": [Reply()], "gated one": [Reply()], "two": [Reply()]},
        runner_class=GatedBuildRunner,
    )
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("s-1", "go")
    await snapshot_when(sessions, "s-1", turn_done(1))
    gate = FileGate(state_dir, "build")
    assert await sessions.send_user_message("s-1", "gated one")
    await gate.wait_until_reached(timeout=TIMEOUT)

    assert await sessions.send_user_message("s-1", "two")

    both = await sessions.get_agent_snapshot("s-1")
    assert [q.text for q in both.queued_messages] == ["gated one", "two"]
    assert both.queued_message_count == 2
    two_id = both.queued_messages[1].message_id
    assert await sessions.delete_queued_message("s-1", two_id)  # still the queue's
    gate.release()
    done = await snapshot_when(sessions, "s-1", turn_done(2), timeout=TIMEOUT)
    assert [m.text for m in done.messages if m.role is MessageRole.USER] == ["go", "gated one"]
    assert done.queued_messages == ()
