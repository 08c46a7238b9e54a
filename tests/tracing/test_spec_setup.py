"""Tracing set up as the spec writes it: a ``TracerProvider`` with a
``BatchSpanProcessor`` and an OTLP exporter, given as
``AgentTracingOptions(tracer_provider=...)``, or no provider and the driver's
global one. The Steps run in Ray hosts, executors and task workers; their spans
are relayed to the driver and leave it through the real OTLP/HTTP exporter to a
loopback receiver. After that driver has gone, a host that runs on warns."""

from __future__ import annotations

import asyncio
import copy
import logging
import os
import pickle
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import ray

from dex_agents_ray import AgentSessionClient, AgentTracingOptions
from dex_agents_ray.session.tracing._relay_address import span_relay_address
from tests.session.polling import eventually, snapshot_when, turn_done
from tests.tracing.agents import AGENT_NAME, build_flow
from tests.tracing.otlp_receiver import OtlpReceiver
from tests.tracing.spec_driver import SESSION_ID
from tests.tracing.story import (
    Spans,
    check_common,
    check_two_lookups_and_an_approval,
    counts,
    named,
    of_session,
)
from tests.tracing.support import start_sink

ROOT = Path(__file__).resolve().parents[2]


def spec_provider() -> Any:
    """The spec's example, word for word (OTLP/HTTP for gRPC): the exporter reads
    its endpoint, and the provider its service name, from ``OTEL_*`` variables."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider


def otel_env(receiver: OtlpReceiver, service: str) -> dict[str, str]:
    return {
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.endpoint,
        "OTEL_SERVICE_NAME": service,
        "OTEL_BSP_SCHEDULE_DELAY": "50",  # the driver's own batches, in milliseconds
    }


def reader(receiver: OtlpReceiver) -> Callable[..., Any]:
    async def read(until: Callable[[Spans], bool], description: str) -> Spans:
        async def probe() -> Spans:
            return receiver.spans()

        return await eventually(probe, until, description=description, timeout=60)

    return read


async def test_the_spec_example_gets_every_span_of_hosts_and_executors(
    engine_factory: Any,
    namespace: str,
    state_dir: Path,
    store_path: Path,
    receiver: OtlpReceiver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in otel_env(receiver, "spec-triage").items():
        monkeypatch.setenv(name, value)
    tracing = AgentTracingOptions(tracer_provider=spec_provider(), agent_name=AGENT_NAME)
    flow = build_flow(namespace, str(state_dir), tracing=tracing)
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)

    await check_two_lookups_and_an_approval(
        engine, sessions, store_path, reader(receiver), by_process=False
    )
    spans = of_session(receiver.spans(), "s1")
    # Each span once (3 activations: 5 + 2 + 3), all with the driver provider's resource.
    assert len(spans) == len({s["span_id"] for s in spans}) == 10
    assert {s["resource"]["service.name"] for s in spans} == {"spec-triage"}


async def test_spans_of_ray_task_workers_are_relayed_too(
    engine_factory: Any,
    namespace: str,
    state_dir: Path,
    receiver: OtlpReceiver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``RunModel`` on a pooled executor, each tool attempt in a Ray task."""
    for name, value in otel_env(receiver, "spec-tasks").items():
        monkeypatch.setenv(name, value)
    tracing = AgentTracingOptions(tracer_provider=spec_provider(), agent_name=AGENT_NAME)
    flow = build_flow(
        namespace, str(state_dir), tracing=tracing, tools_as_tasks=True, model_on_executor=True
    )
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("t1", "two lookups")
    await snapshot_when(sessions, "t1", turn_done(1))
    read = reader(receiver)
    spans = of_session(
        await read(
            lambda s: counts(of_session(s, "t1"), invoke_agent=1, chat=2, execute_tool=2),
            "the turn's spans",
        ),
        "t1",
    )
    (root,) = named(spans, "invoke_agent")
    run_id = (await engine.client.describe_flow("t1")).run_id
    assert {s["trace_id"] for s in spans} == {root["trace_id"]}
    assert {s["parent_span_id"] for s in spans if s is not root} == {root["span_id"]}
    for tool in named(spans, "execute_tool"):
        check_common(tool, "t1", run_id, "CallTool")
        assert tool["attributes"]["gen_ai.tool.name"] == "lookup_order"
        assert tool["attributes"]["dex.agent.tool_call.status"] == "succeeded"
    for chat in named(spans, "chat"):
        check_common(chat, "t1", run_id, "RunModel")
        assert chat["kind"] == "CLIENT" and chat["attributes"]["gen_ai.usage.input_tokens"] > 0


def _tail(path: Path) -> str:
    """The end of the driver's stderr, for a failed assertion's message."""
    return path.read_text()[-3000:]


async def _ready(stdout: asyncio.StreamReader) -> bool:
    """Whether the driver printed ``READY`` before its stdout closed."""
    while line := await stdout.readline():
        if line.strip() == b"READY":
            return True
    return False


async def _run_spec_driver(
    namespace: str, store_path: Path, state_dir: Path, receiver: OtlpReceiver, err: Path
) -> Spans:
    """Start ``spec_driver``, read its turn's spans, then let it exit."""
    address = ray.get_runtime_context().gcs_address
    env = {**os.environ, "PYTHONPATH": str(ROOT), **otel_env(receiver, "spec-global")}
    with err.open("wb") as stderr:
        driver = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "tests.tracing.spec_driver", address, namespace),
            *(str(store_path), str(state_dir)),
            cwd=ROOT,
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
        )
    assert driver.stdin is not None and driver.stdout is not None
    try:
        # Ray forwards its workers' log lines to the driver's stdout too.
        assert await asyncio.wait_for(_ready(driver.stdout), timeout=180), _tail(err)
        spans = await reader(receiver)(
            lambda s: counts(of_session(s, SESSION_ID), invoke_agent=1, chat=2, execute_tool=2),
            "the driver's turn over OTLP",
        )
        driver.stdin.write(b"exit\n")
        await driver.stdin.drain()
        assert await asyncio.wait_for(driver.wait(), timeout=120) == 0, _tail(err)
    finally:
        if driver.returncode is None:
            driver.kill()
            await driver.wait()
    return of_session(spans, SESSION_ID)


async def test_the_global_provider_gets_the_spans_and_a_gone_driver_is_warned_about(
    engine_factory: Any,
    namespace: str,
    state_dir: Path,
    store_path: Path,
    receiver: OtlpReceiver,
    tmp_path: Path,
) -> None:
    sink = start_sink(namespace)  # the driver's job forwards its workers' tracing logs here
    spans = await _run_spec_driver(namespace, store_path, state_dir, receiver, tmp_path / "err")
    (root,) = named(spans, "invoke_agent")
    assert root["parent_span_id"] is None and root["kind"] == "INTERNAL"
    assert {s["trace_id"] for s in spans} == {root["trace_id"]}
    assert {s["parent_span_id"] for s in spans if s is not root} == {root["span_id"]}
    assert {s["resource"]["service.name"] for s in spans} == {"spec-global"}
    assert sorted(s["attributes"]["gen_ai.tool.call.id"] for s in named(spans, "execute_tool")) == [
        "call-a",
        "call-b",
    ]

    # The driver has gone; the session's detached host serves its next turn.
    flow = build_flow(namespace, str(state_dir), tracing=AgentTracingOptions(agent_name=AGENT_NAME))
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    assert await sessions.send_user_message(SESSION_ID, "after the driver")
    snapshot = await snapshot_when(sessions, SESSION_ID, turn_done(2))
    assert snapshot.messages[-1].text == "echo: after the driver"  # tracing failed no Step

    async def warnings() -> list[str]:
        logs = await sink.logs.remote()
        return [message for _, level, message in logs if level == "WARNING"]

    gone = await eventually(
        warnings,
        lambda found: any("has gone" in m for m in found),
        description="the host's warning that the driver has gone",
        timeout=60,
    )
    assert any("spans of this process dropped" in m and "pid " in m for m in gone)
    turn_two = [
        s
        for s in of_session(receiver.spans(), SESSION_ID)
        if s["attributes"]["dex.agent.turn.id"] == "turn-2"
    ]
    assert turn_two == []  # dropped, with the warning above


def test_a_copy_in_the_process_that_built_the_options_uses_its_provider(
    ray_session: None,
) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind

    from dex_agents_ray.session.tracing._otel import OtelTracer

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    options = AgentTracingOptions(tracer_provider=provider)
    assert copy.deepcopy(options).tracer_provider is provider  # copies stay here

    pickled = pickle.loads(pickle.dumps(options))
    assert pickled.tracer_provider is None
    address = span_relay_address(pickled)
    assert address is not None and address.explicit
    assert address.origin.startswith(f"pid {os.getpid()} on ")
    assert address.sampler is not None  # the relaying processes sample as the provider does
    sampler = pickle.loads(address.sampler)
    assert sampler.get_description() == provider.sampler.get_description()
    assert span_relay_address(pickle.loads(pickle.dumps(pickled))) == address  # passed on
    tracer = OtelTracer(pickled)
    tracer.end(tracer.start("probe", kind=SpanKind.INTERNAL, parent=None, attributes={}))
    assert [span.name for span in exporter.get_finished_spans()] == ["probe"]


def test_no_relay_without_a_provider_to_relay_to(
    ray_session: None, caplog: pytest.LogCaptureFixture
) -> None:
    from opentelemetry import trace

    from tests.tracing.support import SinkFactory

    quiet = [
        AgentTracingOptions(),  # the global provider here is the API's no-op proxy
        AgentTracingOptions(is_enabled=False),
        AgentTracingOptions(tracer_provider_factory=SinkFactory("ns")),  # exports directly
    ]
    with caplog.at_level(logging.WARNING, logger="dex_agents_ray.tracing"):
        for options in quiet:
            assert span_relay_address(pickle.loads(pickle.dumps(options))) is None
        assert caplog.records == []
        foreign = AgentTracingOptions(tracer_provider=trace.NoOpTracerProvider())
        assert span_relay_address(pickle.loads(pickle.dumps(foreign))) is None
    assert "not an opentelemetry-sdk TracerProvider" in caplog.text
