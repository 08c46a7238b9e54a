"""Spans from where Steps run (a session host, pooled tool executors) reach an
OTLP/HTTP receiver through the real exporter, in one trace; a host that exits
cleanly flushes what its batch processor still held."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from dex_agents_ray import AgentSessionClient
from tests.session.polling import eventually, snapshot_when, turn_done
from tests.tracing.agents import build_flow
from tests.tracing.otlp_receiver import OtlpFactory, OtlpReceiver
from tests.tracing.test_session_spans import counts, named, of_session


async def _spans(receiver: OtlpReceiver, session_id: str, **wanted: int) -> list[dict[str, Any]]:
    async def probe() -> list[dict[str, Any]]:
        return of_session(receiver.spans(), session_id)

    return await eventually(
        probe, lambda s: counts(s, **wanted), description=f"{wanted} over OTLP", timeout=60
    )


@pytest.mark.parametrize("placement", ["executors", "tasks"])
async def test_host_and_worker_spans_arrive_over_otlp_in_one_trace(
    engine_factory: Any, namespace: str, state_dir: Path, receiver: OtlpReceiver, placement: str
) -> None:
    """``executors``: RunModel in the host, tools on pooled executors; ``tasks``: RunModel
    on a pooled executor, each tool attempt in a Ray task."""
    tasks = placement == "tasks"
    flow = build_flow(
        namespace,
        str(state_dir),
        factory=OtlpFactory(receiver.endpoint),
        tools_as_tasks=tasks,
        model_on_executor=tasks,
    )
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("s1", "two lookups")
    await snapshot_when(sessions, "s1", turn_done(1))

    spans = await _spans(receiver, "s1", invoke_agent=1, chat=2, execute_tool=2)
    (root,) = named(spans, "invoke_agent")
    assert {s["trace_id"] for s in spans} == {root["trace_id"]}
    assert {s["parent_span_id"] for s in spans if s is not root} == {root["span_id"]}
    chats, tools = named(spans, "chat"), named(spans, "execute_tool")
    model_pids = {c["pid"] for c in chats}
    assert len(model_pids) == 1
    if tasks:
        assert root["pid"] not in model_pids  # RunModel on an executor, not in the host
    else:
        assert model_pids == {root["pid"]}  # RunModel in the session's host
    assert {t["pid"] for t in tools}.isdisjoint(model_pids | {root["pid"]})
    assert all(s["scope"] == "dex_agents_ray" for s in spans)
    assert tools[0]["attributes"]["gen_ai.tool.name"] == "lookup_order"
    assert chats[0]["attributes"]["gen_ai.usage.input_tokens"] > 0


async def test_a_host_that_exits_cleanly_flushes_its_spans(
    engine_factory: Any, namespace: str, state_dir: Path, receiver: OtlpReceiver
) -> None:
    # A ten-minute batch delay: only the exit flush can deliver within the deadline.
    factory = OtlpFactory(receiver.endpoint, schedule_delay_millis=600_000)
    flow = build_flow(namespace, str(state_dir), factory=factory)
    engine = await engine_factory(
        [flow], placement="dedicated", passivate_after=timedelta(seconds=1)
    )
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("s2", "hello")
    await snapshot_when(sessions, "s2", turn_done(1))
    assert of_session(receiver.spans(), "s2") == []  # still in the batch processor
    # The run only waits: it passivates and its dedicated host exits.
    spans = await _spans(receiver, "s2", invoke_agent=1, chat=1)
    assert {s["trace_id"] for s in spans} == {named(spans, "invoke_agent")[0]["trace_id"]}
