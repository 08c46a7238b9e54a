"""The spec's spans of real session turns, with the real OpenTelemetry SDK in every
host and executor process (exported to a sink actor the test reads)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from dex_agents_ray import AgentSessionClient
from dex_agents_ray.testing import FileGate, kill_flow_actor
from tests.session.polling import eventually, snapshot_when, turn_done
from tests.tracing.agents import build_flow
from tests.tracing.story import (
    Spans,
    check_common,
    check_two_lookups_and_an_approval,
    counts,
    named,
    of_session,
)
from tests.tracing.support import start_sink

__all__ = [
    "check_common",
    "counts",
    "named",
    "of_session",
    "spans_when",
]  # shared with the other tests


async def spans_when(
    sink: Any, until: Callable[[list[dict[str, Any]]], bool], description: str
) -> list[dict[str, Any]]:
    async def probe() -> list[dict[str, Any]]:
        return await sink.spans.remote()  # type: ignore[no-any-return]

    return await eventually(probe, until, description=description, timeout=60)


async def test_a_turn_with_two_tools_is_one_trace_and_an_approval_starts_a_linked_one(
    engine_factory: Any, namespace: str, state_dir: Path, store_path: Path
) -> None:
    sink = start_sink(namespace)
    flow = build_flow(namespace, str(state_dir))
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)

    async def read(until: Callable[[Spans], bool], description: str) -> Spans:
        return await spans_when(sink, until, description)

    await check_two_lookups_and_an_approval(engine, sessions, store_path, read, by_process=True)


async def test_a_retried_model_call_is_two_chat_spans_of_one_step_execution(
    engine_factory: Any, namespace: str, state_dir: Path
) -> None:
    sink = start_sink(namespace)
    flow = build_flow(namespace, str(state_dir))
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)

    await sessions.start_session("s2", "flaky")
    snapshot = await snapshot_when(sessions, "s2", turn_done(1))
    assert snapshot.messages[-1].text == "echo: flaky"
    spans = of_session(
        await spans_when(sink, lambda s: counts(of_session(s, "s2"), chat=2), "two chat spans"),
        "s2",
    )
    (root,) = named(spans, "invoke_agent")
    failed, retried = named(spans, "chat")
    assert failed["attributes"]["dex.step.execution_id"] == "RunModel-1"
    assert retried["attributes"]["dex.step.execution_id"] == "RunModel-1"
    assert failed["attributes"]["dex.step.attempt"] == 1
    assert retried["attributes"]["dex.step.attempt"] == 2
    assert failed["status"] == "ERROR" and failed["attributes"]["error.type"] == "RuntimeError"
    assert failed["events"] == ["exception"]
    assert failed["name"] == "chat"  # no ModelCallMetadata from a call that raised
    assert retried["status"] == "UNSET" and "error.type" not in retried["attributes"]
    assert {failed["parent_span_id"], retried["parent_span_id"]} == {root["span_id"]}


async def test_a_model_attempt_whose_host_was_killed_exports_no_chat_span(
    engine_factory: Any, namespace: str, state_dir: Path
) -> None:
    sink = start_sink(namespace)
    flow = build_flow(namespace, str(state_dir))
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)

    await sessions.start_session("s3", "slow lookup")
    gate = FileGate(str(state_dir), "model")
    await gate.wait_until_reached()
    killed = await kill_flow_actor(engine, "s3")
    gate.release()
    await snapshot_when(sessions, "s3", turn_done(1), timeout=120)
    spans = of_session(
        await spans_when(
            sink, lambda s: counts(of_session(s, "s3"), chat=2, execute_tool=1), "the turn"
        ),
        "s3",
    )
    first_call = [
        c for c in named(spans, "chat") if c["attributes"]["dex.step.execution_id"] == "RunModel-1"
    ]
    # Attempt 1 died with its host: only the rerun, in the restarted host, has a span.
    assert [c["attributes"]["dex.step.attempt"] for c in first_call] == [2]
    assert first_call[0]["pid"] != killed
    assert first_call[0]["status"] == "UNSET"
    (root,) = named(spans, "invoke_agent")
    assert root["pid"] == killed  # exported before the kill
    assert first_call[0]["parent_span_id"] == root["span_id"]  # from the stored context
