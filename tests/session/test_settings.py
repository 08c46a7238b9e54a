"""Session settings (the spec's "Session settings"), on real Ray and SQLite: stored
at the start, replaced by ``update_session_settings``, copied into each turn so a
running turn keeps its own, and checked for size and shape by the client and by
the session."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import dex
import pytest
from dex.dexpb import dex_pb2 as pb
from dex.runtime_errors import FlowNotFoundError

from dex_agents_ray import (
    INVALID_START_SESSION_SETTINGS_REASON,
    MAX_SESSION_SETTINGS_BYTES,
    SESSION_SETTINGS_SIZE_TOLERANCE_BYTES,
    TURN_SESSION_SETTINGS,
    AgentSessionClient,
    AgentSessionStartInput,
    TurnSessionSettings,
    UpdateSessionSettingsRequest,
    session_settings_size,
    validate_session_settings,
)
from tests.session.polling import has_interrupt, snapshot_when, turn_done
from tests.session.settings_agents import build_flow


def _texts(snapshot: Any) -> list[str | None]:
    return [m.text for m in snapshot.messages if m.role.value == "assistant"]


def test_size_is_compact_utf8_json_and_the_limit_is_checked() -> None:
    assert session_settings_size({"model": "a"}) == len('{"model":"a"}')
    assert session_settings_size({"k": "é"}) == len('{"k":"é"}'.encode())  # unescaped
    assert MAX_SESSION_SETTINGS_BYTES == 16 * 1024
    assert SESSION_SETTINGS_SIZE_TOLERANCE_BYTES == 1024
    at_limit = {"k": "x" * (MAX_SESSION_SETTINGS_BYTES - len('{"k":""}'))}
    validate_session_settings(at_limit)
    with pytest.raises(ValueError, match="MAX_SESSION_SETTINGS_BYTES"):
        validate_session_settings({"k": "x" * MAX_SESSION_SETTINGS_BYTES})
    with pytest.raises(TypeError, match="key 1"):
        validate_session_settings({1: "a"})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="set"):
        validate_session_settings({"k": {1, 2}})
    with pytest.raises(ValueError, match="nan"):
        validate_session_settings({"k": float("nan")})


async def test_settings_choose_the_model_and_a_running_turn_keeps_its_own(
    engine_factory: Any, store_path: Path
) -> None:
    flow = build_flow()
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)

    await sessions.start_session("s1", "refund A1", session_settings={"model": "a"})
    waiting = await snapshot_when(sessions, "s1", has_interrupt, description="approval")
    assert waiting.session_settings == {"model": "a"}

    # Replaced while the turn waits for its approval: the turn keeps model a.
    assert await sessions.update_session_settings("s1", {"model": "b", "tier": [1, None]})
    assert (await sessions.get_agent_snapshot("s1")).session_settings == {
        "model": "b",
        "tier": [1, None],
    }
    interrupt = waiting.pending_interrupts[0]
    assert await sessions.resolve_interrupt("s1", interrupt.interrupt_id, approved=True)
    first = await snapshot_when(sessions, "s1", turn_done(1), description="turn 1")
    assert first.state is not None and first.state.last_turn_error is None
    assert _texts(first)[-1] == "a: refunded A1"

    # The next turn starts with the new settings, and copies them for itself.
    assert await sessions.send_user_message("s1", "hello")
    second = await snapshot_when(sessions, "s1", turn_done(2), description="turn 2")
    assert _texts(second)[-1] == "b: answered"
    copy = _turn_copy(engine, store_path)
    assert copy == TurnSessionSettings(
        turn_id="turn-2", session_settings={"model": "b", "tier": [1, None]}
    )

    # {} clears them.
    assert await sessions.update_session_settings("s1", {})
    assert (await sessions.get_agent_snapshot("s1")).session_settings == {}


def _turn_copy(engine: Any, store_path: Path) -> TurnSessionSettings:
    """The stored ``TurnSessionSettings`` of session ``s1``, decoded as the Flow does."""
    with sqlite3.connect(store_path) as db:
        (raw,) = db.execute(
            "SELECT value FROM attributes WHERE flow_id='s1' AND key=?",
            (TURN_SESSION_SETTINGS.name,),
        ).fetchone()
    values = engine.values
    copy: TurnSessionSettings = values.decode(
        pb.Value.FromString(raw), values.codec(TurnSessionSettings)
    )
    return copy


async def test_bad_settings_are_refused_by_the_client_and_by_the_session(
    engine_factory: Any,
) -> None:
    flow = build_flow()
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    too_big = {"k": "x" * MAX_SESSION_SETTINGS_BYTES}
    far_too_big = {"k": "x" * (MAX_SESSION_SETTINGS_BYTES + SESSION_SETTINGS_SIZE_TOLERANCE_BYTES)}

    with pytest.raises(ValueError, match="MAX_SESSION_SETTINGS_BYTES"):
        await sessions.start_session("s0", "hi", session_settings=too_big)
    with pytest.raises(FlowNotFoundError):
        await engine.client.describe_flow("s0")  # nothing was started

    await sessions.start_session("s1", "", session_settings={"model": "b"})
    await snapshot_when(sessions, "s1", lambda s: s.state is not None, description="started")
    with pytest.raises(ValueError, match="MAX_SESSION_SETTINGS_BYTES"):
        await sessions.update_session_settings("s1", too_big)
    with pytest.raises(TypeError):
        await sessions.update_session_settings("s1", {"k": object()})
    # Past the client (another core, a hand-made request): the session accepts the
    # tolerance beyond the limit, and refuses more, or None, changing nothing.
    assert await engine.client.invoke_rpc(
        flow.update_session_settings, "s1", UpdateSessionSettingsRequest(session_settings=too_big)
    )
    for refused in (far_too_big, None):
        request = UpdateSessionSettingsRequest(session_settings=refused)
        assert not await engine.client.invoke_rpc(flow.update_session_settings, "s1", request)
    assert await sessions.update_session_settings("s1", None) is False
    assert (await sessions.get_agent_snapshot("s1")).session_settings == too_big

    # Start settings over the limit and the tolerance fail the session at once.
    start = AgentSessionStartInput(initial_message="hi", session_settings=far_too_big)
    await engine.client.start_flow(flow, "s2", start)
    result = await engine.client.wait_for_flow("s2", timeout=60)
    assert result.status is dex.FlowStatus.FAILED
    assert (result.error_message or "").startswith(INVALID_START_SESSION_SETTINGS_REASON)


async def test_a_resolver_that_raises_fails_the_turn_without_the_settings(
    engine_factory: Any,
) -> None:
    flow = build_flow()
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("s1", "hello", session_settings={"model": "secret-zzz"})
    failed = await snapshot_when(
        sessions,
        "s1",
        lambda s: s.state is not None and s.state.last_turn_error is not None,
        description="the failed turn",
    )
    assert failed.state is not None and failed.state.last_turn_error is not None
    assert "no such model is configured" in failed.state.last_turn_error
    assert "secret-zzz" not in failed.state.last_turn_error
    # The next turn with settings the resolver knows works.
    assert await sessions.update_session_settings("s1", {"model": "b"})
    assert await sessions.send_user_message("s1", "again")
    done = await snapshot_when(sessions, "s1", turn_done(2), description="turn 2")
    assert _texts(done)[-1] == "b: answered"
