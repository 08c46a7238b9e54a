"""Compaction and retention on the built-in loop, on real Ray and SQLite: a small
context window summarized again and again, never separating a tool call from its
result, with retention deleting summarized chunks; and a host killed during
``CompactContext`` reruns only the summary call."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dex_agents_ray import AgentEventType, AgentSessionClient, ContextSummaryRequest
from dex_agents_ray.builtin_loop import (
    AgentDefinition,
    BuiltinLoopAgentRunner,
    ModelRequest,
    ModelSettings,
    ScriptedModelClient,
    ScriptedModelReply,
)
from dex_agents_ray.testing import (
    ContextWindowSessionScenario,
    FileGate,
    InvocationLog,
    kill_flow_actor,
)
from tests.builtin_loop.agents import build_compacting_flow
from tests.builtin_loop.turns import Transcript
from tests.session.polling import eventually, read_events, snapshot_when, turn_done

QUESTION = "Where is my order A1? " + "I ordered a desk lamp last week and it has not come. " * 3


async def _turns(sessions: AgentSessionClient, session_id: str, count: int) -> Any:
    await sessions.start_session(session_id, QUESTION)
    snapshot = await snapshot_when(sessions, session_id, turn_done(1), timeout=120)
    for turn in range(2, count + 1):
        assert await sessions.send_user_message(session_id, QUESTION)
        snapshot = await snapshot_when(sessions, session_id, turn_done(turn), timeout=120)
    return snapshot


async def test_a_long_session_compacts_and_keeps_its_state_bounded(
    engine_factory: Any, state_dir: Path
) -> None:
    flow = build_compacting_flow(str(state_dir), window_tokens=900)
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    done = await _turns(sessions, "long", 16)
    assert done.state is not None and done.state.last_turn_error is None

    calls = InvocationLog(state_dir / "model.log").entries()
    summaries = calls.count("summary")
    assert summaries >= 2  # compacted again and again
    model_calls = [c.split("/") for c in calls if c != "summary"]
    assert len(model_calls) == 32  # 16 turns x 2 calls: a compaction adds no model call
    assert all(unknown == "0" for _, _, _, unknown, _ in model_calls)  # every call has its result
    after = model_calls[calls.index("summary") :]
    assert all(seen == "True" for _, _, seen, _, _ in after)  # the summary note leads the input
    assert max(int(items) for _, items, _, _, _ in after) < 30  # the input stays bounded

    # Retention: summarized chunks are gone, the newest messages stay.
    page = await sessions.list_agent_messages("long", limit=200)
    assert page.deleted_before_sequence is not None and page.deleted_before_sequence > 1
    assert page.messages[0].sequence == page.deleted_before_sequence
    assert page.messages[-1].sequence == done.state.last_sequence
    assert len(page.messages) < done.state.last_sequence
    events = await read_events(sessions, "long", until_type=AgentEventType.TURN_COMPLETED)
    kinds = [e.type for e in events]
    assert AgentEventType.COMPACTION_STARTED not in kinds  # turn 1 never compacts


async def test_a_host_killed_during_compact_context_reruns_only_the_summary(
    engine_factory: Any, state_dir: Path
) -> None:
    flow = build_compacting_flow(str(state_dir), window_tokens=900)
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    gate, turn = await _until_a_summary_waits(sessions, state_dir, "kill")
    before = InvocationLog(state_dir / "model.log").entries()
    await kill_flow_actor(engine, "kill")
    gate.release()
    done = await snapshot_when(sessions, "kill", turn_done(turn), timeout=120)
    assert done.state is not None and done.state.last_turn_error is None

    after = InvocationLog(state_dir / "model.log").entries()[len(before) :]
    # The killed summary call ran again, then the turn's model calls; nothing else repeated.
    assert after[0] == "summary"
    assert after[1:].count("summary") == 0
    assert len([c for c in before if c != "summary"]) + len(after[1:]) == 2 * turn


async def _until_a_summary_waits(
    sessions: AgentSessionClient, state_dir: Path, session_id: str
) -> tuple[FileGate, int]:
    """Start ``session_id`` with summary calls gated and send turns until one waits at
    the gate; the gate and the turn that compacts."""
    (state_dir / "gate-summary").write_text("")
    gate = FileGate(state_dir, "summary")
    await sessions.start_session(session_id, QUESTION)
    turn = 1
    while not gate.reached_pids():
        await snapshot_when(sessions, session_id, turn_done(turn), timeout=120)
        turn += 1
        assert turn < 20, "no compaction"
        assert await sessions.send_user_message(session_id, QUESTION)

        async def summary_or_turn(turn: int = turn) -> bool:
            if gate.reached_pids():
                return True
            return bool(turn_done(turn)(await sessions.get_agent_snapshot(session_id)))

        await eventually(summary_or_turn, timeout=120, description=f"turn {turn} or a summary")
    await gate.wait_until_reached(timeout=120)
    return gate, turn


async def test_cancel_turn_during_compaction_drops_the_summary(
    engine_factory: Any, state_dir: Path
) -> None:
    flow = build_compacting_flow(str(state_dir), window_tokens=900)
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    gate, turn = await _until_a_summary_waits(sessions, state_dir, "stop")
    compacting = await sessions.get_agent_snapshot("stop")
    assert compacting.state is not None
    assert compacting.state.status.value == "compacting_context"
    assert await sessions.cancel_turn("stop", f"turn-{turn}")
    done = await snapshot_when(
        sessions, "stop", lambda s: s.state is not None and s.state.active_turn_id is None
    )
    gate.release()
    assert done.state is not None and done.state.last_turn_error is None
    events = await read_events(sessions, "stop", until_type=AgentEventType.TURN_CANCELLED)
    kinds = [e.type for e in events]
    assert AgentEventType.COMPACTION_STARTED in kinds
    assert AgentEventType.COMPACTION_FINISHED not in kinds  # its answer was dropped


async def test_a_turn_with_many_tool_calls_compacts_mid_turn_keeping_calls_whole(
    engine_factory: Any, state_dir: Path
) -> None:
    flow = build_compacting_flow(str(state_dir), window_tokens=700, calls_per_turn=12)
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    done = await _turns(sessions, "many", 2)
    assert done.state is not None and done.state.last_turn_error is None

    calls = InvocationLog(state_dir / "model.log").entries()
    # A summary between two calls of one turn (the k-th and k+1-th lookup of a turn).
    mid = [
        i
        for i, entry in enumerate(calls)
        if entry == "summary"
        and 0 < i < len(calls) - 1
        and calls[i - 1].split("/")[-1] not in ("0", "12")
    ]
    assert mid, calls
    model_calls = [c.split("/") for c in calls if c != "summary"]
    assert all(unknown == "0" for _, _, _, unknown, _ in model_calls)  # no call lost its result
    assert [int(done) for *_, done in model_calls] == list(range(13)) * 2  # in order, no repeat


async def test_the_context_window_scenario_drives_a_session_past_its_window(
    engine_factory: Any, state_dir: Path
) -> None:
    flow = build_compacting_flow(str(state_dir), window_tokens=900)
    engine = await engine_factory([flow])
    scenario = ContextWindowSessionScenario(
        sessions=AgentSessionClient(engine.client, flow), turns=12
    )
    result = await scenario.run()
    assert result.compactions >= 1 and result.summary_generation == result.compactions
    assert result.deleted_before_sequence is not None  # retention deleted summarized chunks
    assert result.last_sequence == 4 * 12

    # A window the session never reaches fails the scenario, naming why.
    roomy = build_compacting_flow(str(state_dir), window_tokens=1_000_000)
    roomy_engine = await engine_factory(
        [roomy], namespace=f"{engine.namespace}-roomy", store=state_dir / "roomy.db"
    )
    with pytest.raises(AssertionError, match="without compacting"):
        await ContextWindowSessionScenario(
            sessions=AgentSessionClient(roomy_engine.client, roomy), session_id="roomy", turns=2
        ).run()


async def test_the_summary_request_fits_the_window_with_its_instructions_and_output() -> None:
    """The spec: the summary request plus ``max_output_tokens`` fits
    ``input_token_budget``; the instructions are part of that request."""
    requests: list[ModelRequest] = []

    def respond(request: ModelRequest) -> ScriptedModelReply:
        requests.append(request)
        return ScriptedModelReply(text="The user asked about orders.")

    model = ScriptedModelClient(respond)
    agent = AgentDefinition(
        name="summaries",
        instructions="You help customers with their orders.",
        model=model,
        model_settings=ModelSettings(max_output_tokens=100),
    )
    runner = BuiltinLoopAgentRunner(agent)
    transcript = Transcript()
    transcript.store([runner.build_user_message(f"{QUESTION} ({i})") for i in range(40)])
    for window in (300, 600, 2000):
        request = ContextSummaryRequest(
            flow_id="s",
            turn_id="turn-1",
            attempt=1,
            previous_summary=None,
            messages=tuple(transcript.messages),
            through_sequence=len(transcript.messages),
            input_token_budget=window,
        )
        await runner.summarize_context(request)
        assert model.estimate_input_tokens(requests[-1]) + 100 <= window
