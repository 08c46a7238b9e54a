"""A loopback OTLP/HTTP trace receiver for tests: decodes each protobuf
``ExportTraceServiceRequest`` the real exporter posts to ``/v1/traces``."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


def _name(enum: Any, value: int, prefix: str) -> str:
    """A protobuf enum value by the SDK's name (``SPAN_KIND_CLIENT``: ``CLIENT``)."""
    return str(enum.Name(value)).removeprefix(prefix)


class OtlpReceiver:
    """Serves on a free loopback port until ``close``; ``spans`` lists what arrived."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: list[dict[str, Any]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
                receiver._add(request)
                reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1/traces"

    def _add(self, request: Any) -> None:
        spans = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    spans.append(
                        {
                            "name": span.name,
                            "kind": _name(span.SpanKind, span.kind, "SPAN_KIND_"),
                            "trace_id": span.trace_id.hex(),
                            "span_id": span.span_id.hex(),
                            "parent_span_id": span.parent_span_id.hex() or None,
                            "links": [(k.trace_id.hex(), k.span_id.hex()) for k in span.links],
                            "attributes": {a.key: _value(a.value) for a in span.attributes},
                            "status": _name(
                                span.status.StatusCode, span.status.code, "STATUS_CODE_"
                            ),
                            "events": [event.name for event in span.events],
                            "scope": scope_spans.scope.name,
                            "schema_url": scope_spans.schema_url,
                            "resource": resource,
                            "pid": resource.get("process.pid"),
                            "start": span.start_time_unix_nano,
                            "end": span.end_time_unix_nano,
                        }
                    )
        with self._lock:
            self._spans.extend(spans)

    def spans(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._spans)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


@dataclass(frozen=True)
class OtlpFactory:
    """``tracer_provider_factory``: the real SDK with a ``BatchSpanProcessor`` and the
    real OTLP/HTTP exporter, in each process that runs a Step."""

    endpoint: str
    schedule_delay_millis: int = 50

    def __call__(self) -> Any:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        resource = Resource.create({"service.name": "dex-test", "process.pid": os.getpid()})
        provider = TracerProvider(resource=resource)
        exporter = OTLPSpanExporter(endpoint=self.endpoint, timeout=10)
        provider.add_span_processor(
            BatchSpanProcessor(exporter, schedule_delay_millis=self.schedule_delay_millis)
        )
        return provider
