"""A span sink for tracing tests: Steps run in Ray hosts and executors, so the test
reads their spans from a named sink actor their tracer provider exports to.

``SinkFactory`` is the ``tracer_provider_factory`` of the test Flows: in each
process that runs a Step it builds a real OpenTelemetry SDK ``TracerProvider``
whose ``SimpleSpanProcessor`` hands each finished span to ``SinkExporter``,
which sends a plain record of it to the sink. It also forwards that process's
``dex_agents_ray.tracing`` log records, so a test can count the warnings.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
from dex.dexpb import dex_pb2 as pb

SINK_NAME = "tracing-test-sink"


@ray.remote(num_cpus=0)
class SpanSink:
    """Holds the span records and log records every process sent."""

    def __init__(self) -> None:
        self._spans: list[dict[str, Any]] = []
        self._logs: list[tuple[int, str, str]] = []

    def add(self, spans: list[dict[str, Any]]) -> None:
        self._spans.extend(spans)

    def log(self, pid: int, level: str, message: str) -> None:
        self._logs.append((pid, level, message))

    def spans(self) -> list[dict[str, Any]]:
        return list(self._spans)

    def logs(self) -> list[tuple[int, str, str]]:
        return list(self._logs)


def start_sink(namespace: str) -> Any:
    return SpanSink.options(name=SINK_NAME, namespace=namespace).remote()  # type: ignore[attr-defined]


def _hex(value: int, width: int) -> str:
    return f"{value:0{width}x}"


def span_record(span: Any) -> dict[str, Any]:
    """A picklable record of a finished SDK ``ReadableSpan``."""
    parent = span.parent
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": _hex(span.context.trace_id, 32),
        "span_id": _hex(span.context.span_id, 16),
        "parent_span_id": None if parent is None else _hex(parent.span_id, 16),
        "parent_trace_id": None if parent is None else _hex(parent.trace_id, 32),
        "links": [
            (_hex(link.context.trace_id, 32), _hex(link.context.span_id, 16)) for link in span.links
        ],
        "attributes": {
            k: list(v) if isinstance(v, tuple) else v for k, v in dict(span.attributes).items()
        },
        "status": span.status.status_code.name,
        "events": [event.name for event in span.events],
        "scope": span.instrumentation_scope.name,
        "schema_url": span.instrumentation_scope.schema_url,
        "start": span.start_time,
        "end": span.end_time,
        "pid": os.getpid(),
    }


class SinkExporter:
    """A ``SpanExporter`` sending each span's record to the sink actor."""

    def __init__(self, namespace: str) -> None:
        self._sink = ray.get_actor(SINK_NAME, namespace=namespace)

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        self._sink.add.remote([span_record(span) for span in spans])
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class RaisingProcessor:
    """A span processor whose ``on_end`` raises (tracing must not fail the Step)."""

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        pass

    def on_end(self, span: Any) -> None:
        raise RuntimeError("a broken span processor")

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class _SinkLogHandler(logging.Handler):
    def __init__(self, namespace: str) -> None:
        super().__init__(logging.DEBUG)
        self._sink = ray.get_actor(SINK_NAME, namespace=namespace)

    def emit(self, record: logging.LogRecord) -> None:
        self._sink.log.remote(os.getpid(), record.levelname, record.getMessage())


@dataclass(frozen=True)
class SinkFactory:
    """``tracer_provider_factory`` of the test Flows (picklable, hashable)."""

    namespace: str
    sampled: bool = True
    raising: bool = False

    def __call__(self) -> Any:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, ParentBased

        provider = TracerProvider(sampler=ParentBased(ALWAYS_ON if self.sampled else ALWAYS_OFF))
        if self.raising:
            provider.add_span_processor(RaisingProcessor())  # type: ignore[arg-type]
        provider.add_span_processor(SimpleSpanProcessor(SinkExporter(self.namespace)))  # type: ignore[arg-type]
        tracing_logger = logging.getLogger("dex_agents_ray.tracing")
        if not any(isinstance(h, _SinkLogHandler) for h in tracing_logger.handlers):
            tracing_logger.setLevel(logging.DEBUG)
            tracing_logger.addHandler(_SinkLogHandler(self.namespace))
        return provider


def stored_attribute(engine: Any, store_path: Path, flow_id: str, key: str, type_: Any) -> Any:
    """A stored Attribute of ``flow_id``, decoded as the Flow does; ``None`` when absent."""
    import sqlite3

    with sqlite3.connect(store_path) as db:
        row = db.execute(
            "SELECT value FROM attributes WHERE flow_id=? AND key=?", (flow_id, key)
        ).fetchone()
    if row is None:
        return None
    values = engine.values
    return values.decode(pb.Value.FromString(row[0]), values.codec(type_))


_SHOWN = (
    ("dex.step.execution_id", "step"),
    ("dex.step.attempt", "attempt"),
    ("dex.agent.turn.id", "turn"),
    ("dex.agent.activation.trigger", "trigger"),
    ("dex.agent.interrupt.approved", "approved"),
    ("gen_ai.usage.input_tokens", "in"),
    ("gen_ai.usage.output_tokens", "out"),
    ("dex.agent.requested_tool_call.ids", "requested"),
    ("dex.agent.output_messages.keys", "output"),
    ("gen_ai.tool.call.id", "call"),
    ("dex.agent.tool_call.status", "status"),
)


def _text(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


def render_tree(spans: list[dict[str, Any]], processes: dict[int, str] | None = None) -> str:
    """The spans as one text tree per trace (roots by start time, children under
    their parent, links noted), with the attributes that tell the turn's story."""
    by_id = {s["span_id"]: s for s in spans}
    roots = sorted((s for s in spans if s["parent_span_id"] not in by_id), key=lambda s: s["start"])
    trace_numbers = {root["trace_id"]: n for n, root in enumerate(roots, start=1)}
    lines: list[str] = []

    def describe(span: dict[str, Any]) -> str:
        attributes = span["attributes"]
        shown = [f"{label}={_text(attributes[k])}" for k, label in _SHOWN if k in attributes]
        where = (processes or {}).get(span["pid"], f"pid {span['pid']}")
        status = " ERROR" if span["status"] == "ERROR" else ""
        return f"{span['name']} [{span['kind']}{status}] ({where}) " + " ".join(shown)

    def walk(span: dict[str, Any], prefix: str, last: bool, top: bool) -> None:
        branch = "" if top else ("└─ " if last else "├─ ")
        lines.append(prefix + branch + describe(span))
        children = sorted(
            (s for s in spans if s["parent_span_id"] == span["span_id"]), key=lambda s: s["start"]
        )
        inner = prefix + ("" if top else ("   " if last else "│  "))
        for index, child in enumerate(children):
            walk(child, inner, index == len(children) - 1, False)

    for root in roots:
        links = [
            f"trace {trace_numbers[t]}" for t, _ in root.get("links", []) if t in trace_numbers
        ]
        lines.append(
            f"trace {trace_numbers[root['trace_id']]}"
            + (f" (linked to {', '.join(links)})" if links else "")
        )
        walk(root, "  ", True, True)
    return "\n".join(lines)
