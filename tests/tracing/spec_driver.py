"""A driver that sets tracing up the spec's way with the global tracer provider
(in a process of its own, so the test process's global provider stays unset),
runs one turn, prints ``READY``, and exits when a line arrives on stdin, leaving
its session's (detached) host running.

Its job's ``worker_process_setup_hook`` hands each ``dex_agents_ray.tracing``
log record of the job's workers (the hosts and executors it starts) to the
test's sink actor, so the test can read the warnings those processes log after
this driver has gone.

Usage: python -m tests.tracing.spec_driver <gcs address> <namespace> <store> <state dir>
Environment: ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (the test's receiver) and any
other ``OTEL_*`` variable the SDK reads.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from typing import Any

import ray

SESSION_ID = "g1"
HOOK = "tests.tracing.spec_driver.forward_tracing_logs"


class _SinkHandler(logging.Handler):
    """Sends each record to the test's sink actor of this job's namespace."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self._sink: Any = None

    def emit(self, record: logging.LogRecord) -> None:
        from tests.tracing.support import SINK_NAME

        if self._sink is None:
            self._sink = ray.get_actor(SINK_NAME)
        self._sink.log.remote(os.getpid(), record.levelname, record.getMessage())


def forward_tracing_logs() -> None:
    """``worker_process_setup_hook`` of this driver's job."""
    tracing_logger = logging.getLogger("dex_agents_ray.tracing")
    if not any(isinstance(h, _SinkHandler) for h in tracing_logger.handlers):
        tracing_logger.addHandler(_SinkHandler())


async def main(address: str, namespace: str, store: str, state_dir: str) -> None:
    # The spec's set-up, with the global provider (OTLP/HTTP instead of gRPC).
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)

    from dex_agents_ray import AgentSessionClient, AgentTracingOptions
    from dex_agents_ray.engine import FlowEngine
    from tests.session.polling import snapshot_when, turn_done
    from tests.tracing.agents import AGENT_NAME, build_flow

    ray.init(
        address=address,
        namespace=namespace,
        runtime_env={"worker_process_setup_hook": HOOK},
        log_to_driver=False,
    )
    tracing = AgentTracingOptions(agent_name=AGENT_NAME)  # no provider: the global one
    flow = build_flow(namespace, state_dir, tracing=tracing)
    engine = await FlowEngine.start([flow], store=store, namespace=namespace)
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session(SESSION_ID, "two lookups")
    await snapshot_when(sessions, SESSION_ID, turn_done(1))
    print("READY", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    await engine.shutdown(stop_hosts=False)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
