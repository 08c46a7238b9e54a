"""Tracing options on real sessions: message content on and off, both semantic
conventions versions, a sampled-out root, a span processor that raises, and
tracing disabled. One engine serves a Flow type per variant."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dex_agents_ray import AgentSessionClient, AgentSessionFlow, GenAISemanticConventionsVersion
from dex_agents_ray.session._schema import AGENT_TRACE_CONTEXT
from tests.session.polling import snapshot_when, turn_done
from tests.tracing.agents import build_flow
from tests.tracing.support import start_sink, stored_attribute
from tests.tracing.test_session_spans import counts, named, of_session, spans_when


def _content(span: dict[str, Any], key: str) -> Any:
    return json.loads(span["attributes"][key])


async def test_content_versions_sampling_broken_processors_and_disabled_tracing(
    engine_factory: Any, namespace: str, state_dir: Path, store_path: Path
) -> None:
    sink = start_sink(namespace)
    legacy = GenAISemanticConventionsVersion.V1_36_0
    flows: dict[str, AgentSessionFlow] = {
        "captured": build_flow(namespace, str(state_dir), capture=True, flow_type="Captured"),
        "legacy": build_flow(
            namespace, str(state_dir), capture=True, version=legacy, flow_type="Legacy"
        ),
        "sampled_out": build_flow(namespace, str(state_dir), sampled=False, flow_type="Unsampled"),
        "broken": build_flow(namespace, str(state_dir), raising=True, flow_type="Broken"),
        "disabled": build_flow(namespace, str(state_dir), enabled=False, flow_type="Untraced"),
    }
    engine = await engine_factory(list(flows.values()))
    clients = {name: AgentSessionClient(engine.client, flow) for name, flow in flows.items()}
    for name, sessions in clients.items():
        await sessions.start_session(name, "two lookups")
    await clients["legacy"].start_session("legacy-usage", "cached")
    await clients["captured"].start_session("captured-usage", "cached")
    for name, sessions in clients.items():
        snapshot = await snapshot_when(sessions, name, turn_done(1))
        answer = snapshot.messages[-1].text
        assert answer is not None and "shipped" in answer, (name, answer)
    await snapshot_when(clients["legacy"], "legacy-usage", turn_done(1))
    await snapshot_when(clients["captured"], "captured-usage", turn_done(1))

    def done(spans: list[dict[str, Any]]) -> bool:
        return (
            counts(of_session(spans, "captured"), invoke_agent=1, chat=2, execute_tool=2)
            and counts(of_session(spans, "legacy"), invoke_agent=1, chat=2, execute_tool=2)
            and counts(of_session(spans, "legacy-usage"), chat=1)
            and counts(of_session(spans, "captured-usage"), chat=1)
        )

    spans = await spans_when(sink, done, "the captured and legacy spans")

    # -- content on ----------------------------------------------------------------------
    captured = of_session(spans, "captured")
    (root,) = named(captured, "invoke_agent")
    assert _content(root, "gen_ai.input.messages") == [
        {"role": "user", "parts": [{"type": "text", "content": "two lookups"}]}
    ]
    first, second = named(captured, "chat")
    assert _content(first, "gen_ai.input.messages") == [
        {"role": "user", "parts": [{"type": "text", "content": "two lookups"}]}
    ]
    requested = _content(first, "gen_ai.output.messages")
    assert [p["id"] for p in requested[0]["parts"]] == ["call-a", "call-b"]
    assert json.loads(requested[0]["parts"][0]["arguments"]) == {"order_id": "A1"}
    inputs = _content(second, "gen_ai.input.messages")
    responses = [p for m in inputs for p in m["parts"] if p["type"] == "tool_call_response"]
    assert [r["id"] for r in responses] == ["call-a", "call-b"]
    assert '"status": "shipped"' in responses[0]["response"]
    outputs = _content(second, "gen_ai.output.messages")
    assert outputs[-1]["role"] == "assistant" and "shipped" in outputs[-1]["parts"][0]["content"]
    tool = named(captured, "execute_tool")[0]
    assert json.loads(tool["attributes"]["gen_ai.tool.call.arguments"])["order_id"] in ("A1", "B2")
    assert '"status": "shipped"' in tool["attributes"]["gen_ai.tool.call.result"]
    (cached,) = named(of_session(spans, "captured-usage"), "chat")
    assert cached["attributes"]["gen_ai.usage.cache_read.input_tokens"] == 30
    assert cached["attributes"]["gen_ai.usage.reasoning.output_tokens"] == 5
    assert cached["attributes"]["gen_ai.usage.input_tokens"] == 40

    # -- V1_36_0: gen_ai.system, no cache or reasoning counts, never content ------------
    old = of_session(spans, "legacy") + of_session(spans, "legacy-usage")
    for span in old:
        assert span["schema_url"] == "https://opentelemetry.io/schemas/1.36.0"
        for key in ("gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.provider.name"):
            assert key not in span["attributes"], (span["name"], key)
        assert "gen_ai.tool.call.arguments" not in span["attributes"]
        assert "gen_ai.tool.call.result" not in span["attributes"]
    for chat in named(old, "chat"):
        assert chat["attributes"]["gen_ai.system"] == "scripted"
    (old_cached,) = named(of_session(spans, "legacy-usage"), "chat")
    assert old_cached["attributes"]["gen_ai.usage.input_tokens"] == 40
    assert "gen_ai.usage.cache_read.input_tokens" not in old_cached["attributes"]
    assert "gen_ai.usage.reasoning.output_tokens" not in old_cached["attributes"]

    # -- a sampled-out root: no spans, its unsampled context stored ---------------------
    assert of_session(spans, "sampled_out") == []
    stored = stored_attribute(engine, store_path, "sampled_out", AGENT_TRACE_CONTEXT.name, str)
    assert stored is not None and stored.startswith("00-") and int(stored[-2:], 16) & 1 == 0

    # -- a span processor that raises: the session is unaffected, one warning a process -
    assert of_session(spans, "broken") == []
    logs = await sink.logs.remote()
    warnings = [pid for pid, level, _ in logs if level == "WARNING"]
    assert warnings and len(warnings) == len(set(warnings))  # the first failure of a process
    assert all("failed; the span is skipped" in message for _, _, message in logs)
    debug = [pid for pid, level, _ in logs if level == "DEBUG"]
    assert debug and set(debug) <= set(warnings)  # later ones at debug
    assert stored_attribute(engine, store_path, "broken", AGENT_TRACE_CONTEXT.name, str)

    # -- tracing disabled: no spans, nothing stored -------------------------------------
    assert of_session(spans, "disabled") == []
    assert stored_attribute(engine, store_path, "disabled", AGENT_TRACE_CONTEXT.name, str) is None
