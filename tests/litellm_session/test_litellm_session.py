"""Whole sessions on the engine whose RunModel calls LiteLLM over real HTTP."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from dex_agents_ray import AgentSessionClient, AgentSnapshot
from tests.fake_provider import (
    RESPONSES_PATH,
    ErrorReply,
    FakeProviderServer,
    responses_stream,
)
from tests.litellm_session.agents import build_flow, build_reporting_flow

# LiteLLM 1.110.2 warns inside pydantic on these paths (see tests/litellm/conftest.py).
pytestmark = [
    pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning"),
    pytest.mark.filterwarnings(
        "ignore:Accessing the 'model_(computed_)?fields' attribute on the instance is deprecated"
        ":DeprecationWarning"
    ),
]

ENCRYPTED = "gAAAAB+encrypted/session/reasoning=="
REASONING = {
    "type": "reasoning",
    "id": "rs_1",
    "summary": [{"type": "summary_text", "text": "Needs the weather tool."}],
    "encrypted_content": ENCRYPTED,
}
CALL = {
    "type": "function_call",
    "id": "fc_1",
    "call_id": "call_weather_1",
    "name": "get_weather",
    "arguments": '{"city":"Paris"}',
    "status": "completed",
}
ANSWER = {
    "type": "message",
    "id": "msg_2",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "It is sunny in Paris.", "annotations": []}],
}
USAGE = {"input_tokens": 50, "output_tokens": 10, "total_tokens": 60}


async def _turn_done(sessions: AgentSessionClient, session_id: str) -> AgentSnapshot:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 120
    while True:
        snapshot = await sessions.get_agent_snapshot(session_id)
        state = snapshot.state
        if state is not None and state.turn_count >= 1 and state.active_turn_id is None:
            return snapshot
        assert loop.time() < deadline, f"the turn did not end; last: {snapshot!r}"
        await asyncio.sleep(0.05)


async def test_tool_calling_turn_with_litellm_replays_encrypted_reasoning(
    engine_factory: Any, provider: FakeProviderServer
) -> None:
    flow = build_flow(provider.openai_api_base)
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    provider.enqueue(
        RESPONSES_PATH,
        responses_stream(output=[REASONING, CALL], usage=USAGE),
        responses_stream(output=[ANSWER], usage=USAGE),
    )

    await sessions.start_session("weather-1", "Weather in Paris?")
    snapshot = await _turn_done(sessions, "weather-1")

    assert snapshot.state is not None and snapshot.state.last_turn_error is None
    assert snapshot.messages[-1].text == "It is sunny in Paris."
    bodies = provider.bodies(RESPONSES_PATH)
    assert len(bodies) == 2
    second = json.dumps(bodies[1])
    assert ENCRYPTED in second  # the reasoning item went back byte for byte
    assert "sunny in Paris" in second  # with the tool's result
    assert snapshot.usage.model_calls == 2


async def test_http_500_fails_the_attempt_and_run_model_retries(
    engine_factory: Any, provider: FakeProviderServer
) -> None:
    flow = build_flow(provider.openai_api_base)
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    provider.enqueue(
        RESPONSES_PATH,
        ErrorReply(status=500, body={"error": {"message": "upstream exploded"}}),
        responses_stream(output=[ANSWER], usage=USAGE),
    )

    await sessions.start_session("weather-2", "Weather in Paris?")
    snapshot = await _turn_done(sessions, "weather-2")

    assert snapshot.messages[-1].text == "It is sunny in Paris."
    assert len(provider.bodies(RESPONSES_PATH)) == 2
    history = await engine.client.read_step_history("weather-2")
    failed = [h for h in history if h.event == "attempt_failed"]
    assert [h.step_execution_id for h in failed] == ["RunModel-1"]
    assert "upstream exploded" in failed[0].detail["error"]


REPORT_CALL = {**CALL, "call_id": "call_report_1", "name": "host_report", "arguments": "{}"}


@pytest.mark.parametrize("model_in_task", [False, True], ids=["in-host", "in-task"])
async def test_run_model_in_a_ray_task_keeps_litellm_out_of_the_host(
    engine_factory: Any, provider: FakeProviderServer, model_in_task: bool
) -> None:
    flow = build_reporting_flow(provider.openai_api_base, model_in_task=model_in_task)
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    provider.enqueue(
        RESPONSES_PATH,
        responses_stream(output=[REPORT_CALL], usage=USAGE),
        responses_stream(output=[ANSWER], usage=USAGE),
    )

    await sessions.start_session("report-1", "What does the host hold?")
    snapshot = await _turn_done(sessions, "report-1")

    assert snapshot.state is not None and snapshot.state.last_turn_error is None
    assert snapshot.messages[-1].text == "It is sunny in Paris."
    report = json.loads(next(m.tool_output for m in snapshot.messages if m.tool_output))
    # The inline tool ran in the session's host after the model call asked for it.
    assert report["litellm"] is (not model_in_task)
    assert "host_report" in json.dumps(provider.bodies(RESPONSES_PATH)[1])  # the result went back
