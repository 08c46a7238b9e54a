"""Every OpenTelemetry call of the session, each one guarded.

Imported only when tracing is enabled and ``opentelemetry-api`` is installed.
A failure inside OpenTelemetry (a span processor or exporter that raises) is
logged (``_failures``) and that span is skipped; the Step never sees it.
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)

from dex_agents_ray.session.tracing._failures import report_failure
from dex_agents_ray.session.tracing._relay_address import span_relay_address

if TYPE_CHECKING:
    from dex_agents_ray.session.tracing._options import AgentTracingOptions

logger = logging.getLogger("dex_agents_ray.tracing")

__all__ = [
    "INSTRUMENTATION_SCOPE",
    "OtelTracer",
    "flush_providers",
    "format_traceparent",
    "parse_traceparent",
]

INSTRUMENTATION_SCOPE = "dex_agents_ray"
"""The tracer's instrumentation scope name."""
_VERSION = "0.1.0"

AttributeValue = str | bool | int | float | Sequence[str]

_lock = threading.Lock()
_providers: dict[Any, Any] = {}
_atexit_registered = False


def format_traceparent(span_context: SpanContext) -> str:
    """The W3C ``traceparent`` of a valid span context."""
    flags = int(span_context.trace_flags) & 0xFF
    return f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}-{flags:02x}"


def parse_traceparent(value: str | None) -> SpanContext | None:
    """The remote span context of a stored ``traceparent``; ``None`` when invalid."""
    if not value:
        return None
    parts = value.split("-")
    if len(parts) != 4 or parts[0] != "00" or len(parts[1]) != 32 or len(parts[2]) != 16:
        return None
    try:
        trace_id, span_id, flags = int(parts[1], 16), int(parts[2], 16), int(parts[3], 16)
    except ValueError:
        return None
    span_context = SpanContext(
        trace_id=trace_id, span_id=span_id, is_remote=True, trace_flags=TraceFlags(flags)
    )
    return span_context if span_context.is_valid else None


def _provider_key(factory: Any) -> Any:
    try:
        hash(factory)
    except TypeError:
        return ("id", id(factory))
    return factory


def _factory_provider(factory: Any) -> Any:
    """The provider ``factory`` made in this process (made once, flushed at exit)."""
    key = _provider_key(factory)
    with _lock:
        provider = _providers.get(key)
    if provider is not None:
        return provider
    made = factory()
    if not callable(getattr(made, "get_tracer", None)):
        raise TypeError(f"tracer_provider_factory returned a {type(made).__name__}")
    return _keep_provider(key, made)


def _relayed_provider(options: AgentTracingOptions) -> Any:
    """For a pickled copy of options that named no factory: the provider relaying
    to the process that built them (made once per process and relay, flushed at
    exit); ``None``: this process's global provider."""
    address = span_relay_address(options)
    if address is None:
        return None
    key = ("relay", address.actor_name)
    with _lock:
        provider = _providers.get(key)
    if provider is not None:
        return provider
    try:
        from dex_agents_ray.session.tracing._relay import relayed_provider
    except ImportError:
        logger.warning(
            "tracing: opentelemetry-sdk is not installed in this process, so its spans "
            "cannot be relayed to the tracer provider of %s; it uses its global provider",
            address.origin,
            exc_info=True,
        )
        return None
    made = relayed_provider(address)
    return None if made is None else _keep_provider(key, made)


def _keep_provider(key: Any, made: Any) -> Any:
    global _atexit_registered
    with _lock:
        provider = _providers.setdefault(key, made)
        if not _atexit_registered:
            atexit.register(flush_providers)
            _atexit_registered = True
    return provider


def flush_providers() -> None:
    """Flush every provider this process made, and the global one (before a clean exit)."""
    with _lock:
        providers = list(_providers.values())
    try:
        global_provider = trace.get_tracer_provider()
    except Exception:
        global_provider = None
    if global_provider is not None and all(p is not global_provider for p in providers):
        providers.append(global_provider)
    for provider in providers:
        flush = getattr(provider, "force_flush", None)
        if callable(flush):
            try:
                flush(5_000)
            except Exception:
                report_failure("flushing the tracer provider")


class OtelTracer:
    """The session's tracer in this process, for one Flow definition's options."""

    def __init__(self, options: AgentTracingOptions) -> None:
        version = options.semantic_conventions_version
        provider = options.tracer_provider
        if provider is None and options.tracer_provider_factory is not None:
            provider = _factory_provider(options.tracer_provider_factory)
        if provider is None:
            provider = _relayed_provider(options)
        self._uses_global = provider is None
        if provider is None:
            self._tracer = trace.get_tracer(
                INSTRUMENTATION_SCOPE, _VERSION, schema_url=version.schema_url
            )
        else:
            self._tracer = provider.get_tracer(
                INSTRUMENTATION_SCOPE, _VERSION, schema_url=version.schema_url
            )
        if not _atexit_registered and self._uses_global:
            _register_atexit()

    def active(self) -> bool:
        """Whether spans can have a valid context here (not the API's proxy without an SDK)."""
        if not self._uses_global:
            return True
        try:
            return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
        except Exception:
            report_failure("reading the global tracer provider")
            return False

    def start(
        self,
        name: str,
        *,
        kind: SpanKind,
        parent: str | None,
        root: bool = False,
        attributes: Mapping[str, AttributeValue],
        links: Sequence[str] = (),
        start_time: int | None = None,
    ) -> Span | None:
        """Start a span under the stored ``parent`` (``root``: no parent at all)."""
        try:
            if root:
                ctx = otel_context.Context()
            else:
                parent_context = parse_traceparent(parent)
                ctx = (
                    trace.set_span_in_context(NonRecordingSpan(parent_context))
                    if parent_context is not None
                    else otel_context.Context()
                )
            span_links = [
                Link(link_context) for link_context in map(parse_traceparent, links) if link_context
            ]
            return self._tracer.start_span(
                name,
                context=ctx,
                kind=kind,
                attributes=dict(attributes),
                links=span_links,
                start_time=start_time,
            )
        except Exception:
            report_failure(f"starting span {name!r}")
            return None

    def attach(self, span: Span | None = None, *, parent: str | None = None) -> object | None:
        """Make ``span`` (or the stored ``parent``) current; the token for ``detach``."""
        try:
            if span is None:
                parent_context = parse_traceparent(parent)
                if parent_context is None:
                    return None
                span = NonRecordingSpan(parent_context)
            return otel_context.attach(trace.set_span_in_context(span))
        except Exception:
            report_failure("changing the current context")
            return None

    def detach(self, token: object | None) -> None:
        if token is None:
            return
        try:
            otel_context.detach(token)  # type: ignore[arg-type]
        except Exception:
            report_failure("restoring the current context")

    def end(
        self,
        span: Span | None,
        *,
        attributes: Mapping[str, AttributeValue] | None = None,
        error: BaseException | None = None,
        error_type: str | None = None,
    ) -> None:
        """Annotate and end ``span``: ``error`` (or ``error_type``) sets status ``ERROR``."""
        if span is None:
            return
        try:
            if attributes:
                span.set_attributes(dict(attributes))
            if error is not None:
                error_type = type(error).__name__
                span.record_exception(error)
            if error_type is not None:
                span.set_attribute("error.type", error_type)
                span.set_status(Status(StatusCode.ERROR, error_type))
        except Exception:
            report_failure("annotating a span")
        try:
            span.end()
        except Exception:
            report_failure("ending a span")

    def traceparent(self, span: Span | None) -> str | None:
        """The span's ``traceparent`` when its context is valid (sampled or not)."""
        if span is None:
            return None
        try:
            span_context = span.get_span_context()
            return format_traceparent(span_context) if span_context.is_valid else None
        except Exception:
            report_failure("reading a span context")
            return None


def _register_atexit() -> None:
    global _atexit_registered
    with _lock:
        if not _atexit_registered:
            atexit.register(flush_providers)
            _atexit_registered = True
