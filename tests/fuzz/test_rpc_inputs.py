"""Fuzzing every session RPC's input: random and malformed values never corrupt
state. An invalid call returns ``False`` or raises a clear error (a message, no
bare ``KeyError``/``AssertionError``), and the snapshot taken after equals the
one taken before."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dex_agents_ray import AgentSessionClient, AgentSessionOptions, ToolEffect, ToolPolicy
from dex_agents_ray.testing import wait_for_agent_snapshot
from tests.session.agents import Call, Reply, build_flow

SID = "fuzz-1"
REAL_INTERRUPT = "pay-1"

ANY = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=12)
    | st.binary(max_size=6),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=6,
)
IDS = (st.text(max_size=12) | ANY).filter(lambda v: v != REAL_INTERRUPT)
BLANK = st.text(alphabet=" \t\n\r\u3000\u00a0", max_size=6)
NOT_SETTINGS = (
    st.integers()
    | st.text(max_size=5)
    | st.lists(st.integers(), max_size=2)
    | st.dictionaries(st.integers(), st.integers(), min_size=1, max_size=2)
    | st.dictionaries(st.text(max_size=3), st.binary(max_size=3), min_size=1, max_size=2)
    | st.dictionaries(
        st.text(max_size=3), st.sets(st.integers(), max_size=2), min_size=1, max_size=2
    )
)

Rpc = Callable[[AgentSessionClient], Awaitable[object]]

CALLS: st.SearchStrategy[tuple[str, Rpc]] = st.one_of(
    (BLANK | ANY.filter(lambda v: not isinstance(v, str))).map(
        lambda text: ("send_user_message", lambda s: s.send_user_message(SID, text))
    ),
    st.tuples(IDS, ANY, ANY).map(
        lambda a: (
            "resolve_interrupt",
            lambda s: s.resolve_interrupt(SID, a[0], approved=a[1], rejection_message=a[2]),
        )
    ),
    st.tuples(IDS | st.just(REAL_INTERRUPT), ANY).map(
        lambda a: ("answer_question", lambda s: s.answer_question(SID, a[0], a[1]))
    ),
    IDS.map(lambda turn: ("cancel_turn", lambda s: s.cancel_turn(SID, turn))),
    IDS.map(lambda mid: ("delete_queued_message", lambda s: s.delete_queued_message(SID, mid))),
    ANY.map(lambda revision: ("execute_plan", lambda s: s.execute_plan(SID, revision))),
    st.tuples(IDS, BLANK | ANY).map(
        lambda a: (
            "steer_user_message",
            lambda s: s.steer_user_message(SID, message_id=a[0], text=a[1]),
        )
    ),
    NOT_SETTINGS.map(
        lambda value: ("update_session_settings", lambda s: s.update_session_settings(SID, value))
    ),
    IDS.map(lambda other: ("get_agent_snapshot(other)", lambda s: s.get_agent_snapshot(other))),
)

UNCLEAR = (KeyError, AssertionError, IndexError, AttributeError, UnboundLocalError)


async def test_random_rpc_input_changes_nothing(engine_factory: Any, state_dir: Path) -> None:
    options = AgentSessionOptions(
        tool_policies={"pay": ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE, requires_approval=True)}
    )
    flow = build_flow(
        state_dir, {"pay": [Reply(calls=[Call(REAL_INTERRUPT, "pay")]), Reply()]}, options=options
    )
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session(SID, "pay")
    before = await wait_for_agent_snapshot(
        sessions, SID, lambda s: s if s.pending_interrupts else None
    )
    loop = asyncio.get_running_loop()
    outcomes: dict[str, set[str]] = {}

    @settings(
        max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    @given(call=CALLS)
    def check(call: tuple[str, Rpc]) -> None:
        name, rpc = call

        async def run() -> None:
            try:
                result = await rpc(sessions)
            except UNCLEAR as error:
                raise AssertionError(f"{name}: unclear {type(error).__name__}: {error}") from error
            except Exception as error:
                assert str(error), f"{name}: {type(error).__name__} without a message"
                outcomes.setdefault(name, set()).add(type(error).__name__)
            else:
                if name != "get_agent_snapshot(other)":
                    assert result is False, f"{name} accepted invalid input: {result!r}"
                outcomes.setdefault(name, set()).add(repr(result)[:20])
            assert await sessions.get_agent_snapshot(SID) == before, f"{name} changed the session"

        asyncio.run_coroutine_threadsafe(run(), loop).result(timeout=60)

    await asyncio.to_thread(check)

    assert len(outcomes) >= 8, outcomes  # hypothesis reached (nearly) every RPC
    # The real interrupt still works after all that.
    assert await sessions.resolve_interrupt(SID, REAL_INTERRUPT, approved=True)
