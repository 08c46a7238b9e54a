"""The activations and spans of turn control and long sessions: ``ApplyTurnControl``
starting a turn with a steered message is an activation root, and
``CompactContext`` emits a ``chat`` span for its summary call."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dex_agents_ray import AgentSessionClient
from dex_agents_ray.testing import FileGate
from tests.session.polling import snapshot_when, turn_done
from tests.tracing.agents import build_flow
from tests.tracing.support import start_sink
from tests.tracing.test_session_spans import check_common, counts, named, of_session, spans_when


async def test_a_steered_turn_starts_an_activation_in_apply_turn_control(
    engine_factory: Any, namespace: str, state_dir: Path
) -> None:
    sink = start_sink(namespace)
    flow = build_flow(namespace, str(state_dir))
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("s1", "slow lookup")
    await FileGate(str(state_dir), "model").wait_until_reached()
    assert await sessions.steer_user_message("s1", text="steered")
    FileGate(str(state_dir), "model").release()
    snapshot = await snapshot_when(sessions, "s1", turn_done(2))
    assert snapshot.state is not None and snapshot.state.last_turn_error is None

    spans = of_session(
        await spans_when(sink, lambda s: counts(of_session(s, "s1"), invoke_agent=2), "roots"),
        "s1",
    )
    first, steered = named(spans, "invoke_agent")
    run_id = (await engine.client.describe_flow("s1")).run_id
    check_common(steered, "s1", run_id, "ApplyTurnControl")
    assert steered["attributes"]["dex.agent.activation.trigger"] == "user_message"
    assert steered["attributes"]["dex.agent.turn.id"] == "turn-2"
    (steered_message,) = [m for m in snapshot.messages if m.text == "steered"]
    assert steered["attributes"]["dex.agent.user_message.key"] == f"{steered_message.sequence:012d}"
    assert steered["links"] == [(first["trace_id"], first["span_id"])]
    spans = of_session(
        await spans_when(
            sink,
            lambda s: any(
                c["attributes"].get("dex.agent.turn.id") == "turn-2"
                for c in named(of_session(s, "s1"), "chat")
            ),
            "turn 2's chat",
        ),
        "s1",
    )
    (chat,) = [c for c in named(spans, "chat") if c["attributes"]["dex.agent.turn.id"] == "turn-2"]
    assert chat["trace_id"] == steered["trace_id"]
    assert chat["parent_span_id"] == steered["span_id"]


async def test_compact_context_emits_a_chat_span_for_its_summary_call(
    engine_factory: Any, namespace: str, state_dir: Path
) -> None:
    sink = start_sink(namespace)
    flow = build_flow(namespace, str(state_dir), capture=True, compaction_window=900)
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)

    def summaries(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            s
            for s in named(of_session(spans, "s1"), "chat")
            if s["attributes"]["dex.step.type"] == "CompactContext"
        ]

    await sessions.start_session("s1", "two lookups")
    for turn in range(1, 12):
        await snapshot_when(sessions, "s1", turn_done(turn))
        if summaries(await sink.spans.remote()):
            break
        assert await sessions.send_user_message("s1", "two lookups")
    spans = await spans_when(sink, lambda s: bool(summaries(s)), "a CompactContext chat span")
    summary = summaries(spans)[0]
    assert summary["name"] == "chat scripted" and summary["kind"] == "CLIENT"
    roots = {r["span_id"]: r for r in named(of_session(spans, "s1"), "invoke_agent")}
    root = roots[summary["parent_span_id"]]
    assert root["trace_id"] == summary["trace_id"]
    assert summary["attributes"]["dex.agent.turn.id"] == root["attributes"]["dex.agent.turn.id"]
    assert summary["attributes"]["dex.agent.input_messages.last_key"].isdigit()
    output = json.loads(summary["attributes"]["gen_ai.output.messages"])
    assert output == [
        {"role": "assistant", "parts": [{"type": "text", "content": "The user looked up orders."}]}
    ]
    summarized = json.loads(summary["attributes"]["gen_ai.input.messages"])
    last = int(summary["attributes"]["dex.agent.input_messages.last_key"])
    assert summarized and len(summarized) <= last
    assert "dex.agent.output_messages.keys" not in summary["attributes"]
