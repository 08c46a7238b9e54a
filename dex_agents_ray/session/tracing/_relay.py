"""Spans of Steps in other processes, relayed to the provider of the process that
built the ``AgentTracingOptions`` (the spec's ``tracer_provider``, or that
process's global provider).

The spec's set-up, a ``TracerProvider`` with a ``BatchSpanProcessor`` and an OTLP
exporter, is a live object of one process; Steps run in Ray hosts, executors and
task workers. So when the options are pickled in the process that built them
(``open_relay``), that process starts a small relay actor it owns (``SpanRelay``,
``num_cpus=0``, on its own node when it can) and a daemon thread that long-polls
it. Each process that runs a Step records spans with an SDK provider of its own
whose ``BatchSpanProcessor`` hands a finished batch to ``RelayExporter``, which
puts it on the actor in one Ray call from the processor's thread (a Step never
waits on it). The thread rebuilds each span with its own IDs, parent, links,
times and attributes and ends it in the origin's span processors (``on_end``),
so the origin's resource and exporters apply.

The relay lives as long as its owner: Ray ends an actor with the process that
created it. Afterwards (a ``ray job`` driver that exited while its sessions run
on in detached hosts) each process that tries to relay logs a warning on
``dex_agents_ray.tracing`` and drops its spans (again every few minutes while it
drops more); ``tracer_provider_factory`` and ``worker_process_setup_hook``
export from every process directly and have no such limit.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import pickle
import socket
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any, NamedTuple

import ray
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace import Tracer as SdkTracer
from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.span import TraceState

from dex_agents_ray.engine import on_clean_exit
from dex_agents_ray.session.tracing._failures import report_failure
from dex_agents_ray.session.tracing._relay_address import SpanRelayAddress

logger = logging.getLogger("dex_agents_ray.tracing")

__all__ = [
    "RelayExporter",
    "RelayedSpan",
    "SpanRelay",
    "open_relay",
    "relayed_provider",
]

LONG_POLL_SECONDS = 1.0
"""How long the origin's thread waits for spans in one call to its relay."""
BUFFER_LIMIT = 100_000
"""Spans the relay holds for its owner; beyond it the oldest are dropped (logged)."""
EXPORT_DELAY_MILLIS = 500
"""The batch delay of a relaying process (the origin's own processor batches again)."""
EXPORT_TIMEOUT_SECONDS = 30.0
"""How long one relay call may take before its batch is dropped (logged)."""
GONE_WARNING_INTERVAL_SECONDS = 300.0
"""After the origin has gone, a process warns again at most this often while it drops."""


class RelayedContext(NamedTuple):
    """A ``SpanContext`` as plain data."""

    trace_id: int
    span_id: int
    flags: int
    state: tuple[tuple[str, str], ...]
    remote: bool


class RelayedSpan(NamedTuple):
    """A finished span as plain data (an SDK ``ReadableSpan`` holds locks)."""

    name: str
    context: RelayedContext
    parent: RelayedContext | None
    kind: int
    attributes: dict[str, Any]
    events: tuple[tuple[str, dict[str, Any], int], ...]
    links: tuple[tuple[RelayedContext, dict[str, Any]], ...]
    status: tuple[int, str | None]
    start: int | None
    end: int | None
    scope: tuple[str, str | None, str | None]


def _plain_context(context: SpanContext) -> RelayedContext:
    state = tuple(context.trace_state.items()) if context.trace_state else ()
    flags = int(context.trace_flags)
    return RelayedContext(context.trace_id, context.span_id, flags, state, context.is_remote)


def _span_context(context: RelayedContext) -> SpanContext:
    return SpanContext(
        trace_id=context.trace_id,
        span_id=context.span_id,
        is_remote=context.remote,
        trace_flags=TraceFlags(context.flags),
        trace_state=TraceState(list(context.state)),
    )


def relayed_span(span: ReadableSpan) -> RelayedSpan:
    """The plain record of a finished span."""
    scope = span.instrumentation_scope
    assert span.context is not None  # the SDK's finished spans always have one
    return RelayedSpan(
        name=span.name,
        context=_plain_context(span.context),
        parent=None if span.parent is None else _plain_context(span.parent),
        kind=span.kind.value,
        attributes=dict(span.attributes or {}),
        events=tuple((e.name, dict(e.attributes or {}), e.timestamp) for e in span.events),
        links=tuple((_plain_context(k.context), dict(k.attributes or {})) for k in span.links),
        status=(span.status.status_code.value, span.status.description),
        start=span.start_time,
        end=span.end_time,
        scope=("", None, None) if scope is None else (scope.name, scope.version, scope.schema_url),
    )


def readable_span(span: RelayedSpan, resource: Resource) -> ReadableSpan:
    """The record as an SDK span of the origin's ``resource``, ready for ``on_end``."""
    name, version, schema_url = span.scope
    return ReadableSpan(
        name=span.name,
        context=_span_context(span.context),
        parent=None if span.parent is None else _span_context(span.parent),
        resource=resource,
        attributes=span.attributes,
        events=[Event(name, attributes, timestamp) for name, attributes, timestamp in span.events],
        links=[Link(_span_context(context), attributes) for context, attributes in span.links],
        kind=SpanKind(span.kind),
        status=Status(StatusCode(span.status[0]), span.status[1]),
        start_time=span.start,
        end_time=span.end,
        instrumentation_scope=InstrumentationScope(name, version, schema_url),
    )


@ray.remote(num_cpus=0)
class SpanRelay:
    """Holds the spans other processes sent until the owning process takes them."""

    def __init__(self, limit: int) -> None:
        self._spans: list[RelayedSpan] = []
        self._dropped = 0
        self._limit = limit
        self._arrived: asyncio.Event | None = None

    def _event(self) -> asyncio.Event:
        if self._arrived is None:
            self._arrived = asyncio.Event()
        return self._arrived

    async def put(self, spans: list[RelayedSpan]) -> None:
        self._spans.extend(spans)
        overflow = len(self._spans) - self._limit
        if overflow > 0:
            del self._spans[:overflow]
            self._dropped += overflow
        self._event().set()

    async def take(self, wait_seconds: float) -> tuple[list[RelayedSpan], int]:
        """What arrived (waiting up to ``wait_seconds`` for something), and how many
        spans were dropped since the last call."""
        if not self._spans and wait_seconds > 0:
            event = self._event()
            event.clear()
            try:
                await asyncio.wait_for(event.wait(), wait_seconds)
            except TimeoutError:
                pass
        spans, dropped = self._spans, self._dropped
        self._spans, self._dropped = [], 0
        return spans, dropped


class _OriginRelay:
    """The owning side: the relay actor, its provider and the thread draining it."""

    def __init__(self, provider: SdkTracerProvider, address: SpanRelayAddress, actor: Any) -> None:
        self.provider = provider
        self.address = address
        self.actor = actor
        self.closed = threading.Event()
        self._tracers: dict[tuple[str, str | None, str | None], Any] = {}
        self._thread = threading.Thread(
            target=self._pump, name="dex-agents-ray-span-relay", daemon=True
        )
        self._thread.start()

    def _pump(self) -> None:
        failed = False
        while not self.closed.is_set():
            try:
                spans, dropped = ray.get(
                    self.actor.take.remote(LONG_POLL_SECONDS), timeout=LONG_POLL_SECONDS + 60
                )
            except SystemExit:  # ray.shutdown() in another thread
                return self._close()
            except ray.exceptions.GetTimeoutError:
                continue
            except ray.exceptions.RayActorError:
                if ray.is_initialized():
                    logger.warning(
                        "tracing: the span relay %s died; spans of Steps in other processes "
                        "that use it are dropped (each logs a warning)",
                        self.address.actor_name,
                    )
                return self._close()
            except Exception:
                if not ray.is_initialized():
                    return self._close()
                logger.log(
                    logging.DEBUG if failed else logging.WARNING,
                    "tracing: reading the span relay failed; retrying",
                    exc_info=True,
                )
                failed = True
                self.closed.wait(LONG_POLL_SECONDS)
                continue
            if dropped:
                logger.warning(
                    "tracing: the span relay dropped %d spans: more than %d waited for this "
                    "process to take them",
                    dropped,
                    BUFFER_LIMIT,
                )
            self.deliver(spans)

    def deliver(self, spans: Sequence[RelayedSpan]) -> None:
        """End each span in the origin provider's span processors."""
        for span in spans:
            try:
                tracer = self._tracer(span.scope)
                if tracer is not None:
                    tracer.span_processor.on_end(readable_span(span, tracer.resource))
            except Exception:
                report_failure(f"relaying span {span.name!r}")

    def _tracer(self, scope: tuple[str, str | None, str | None]) -> SdkTracer | None:
        tracer = self._tracers.get(scope)
        if tracer is None:
            name, version, schema_url = scope
            made = self.provider.get_tracer(name, version, schema_url=schema_url)
            if not isinstance(made, SdkTracer):
                return None  # a disabled SDK (OTEL_SDK_DISABLED) records nothing
            tracer = self._tracers[scope] = made
        return tracer

    def stop(self, timeout: float) -> None:
        """Stop the thread (it wakes within a long poll) and wait for it."""
        self.closed.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def drain(self, *, force: bool = False) -> None:
        """Deliver what the relay holds now (before this process exits); ``force``
        also after :meth:`stop`."""
        if (self.closed.is_set() and not force) or not ray.is_initialized():
            return
        try:
            spans, _ = ray.get(self.actor.take.remote(0), timeout=5)
        except Exception:
            logger.debug("tracing: the last read of the span relay failed", exc_info=True)
            return
        self.deliver(spans)

    def _close(self) -> None:
        self.closed.set()
        with _lock:
            for key, relay in list(_by_provider.items()):
                if relay is self:
                    del _by_provider[key]
            _by_name.pop(self.address.actor_name, None)


_lock = threading.Lock()
_by_provider: dict[tuple[int, bool], _OriginRelay] = {}
_by_name: dict[str, _OriginRelay] = {}
_atexit_registered = False


def _pickled_sampler(provider: SdkTracerProvider) -> bytes | None:
    from ray import cloudpickle

    try:
        data: bytes = cloudpickle.dumps(provider.sampler)  # type: ignore[no-untyped-call]
        return data
    except Exception:
        logger.warning(
            "tracing: the tracer provider's sampler %r does not pickle; Steps in other "
            "processes sample with ParentBased(ALWAYS_ON)",
            provider.sampler,
            exc_info=True,
        )
        return None


def open_relay(explicit: Any) -> SpanRelayAddress | None:
    """The address of this process's relay to ``explicit`` (or, ``None``, to the
    global provider), started on first use; ``None`` when nothing is to relay:
    Ray is not connected, or the global provider is the API's no-op proxy."""
    global _atexit_registered
    if not ray.is_initialized():
        return None
    provider = explicit if explicit is not None else trace.get_tracer_provider()
    if not isinstance(provider, SdkTracerProvider):
        if explicit is not None:
            logger.warning(
                "tracing: tracer_provider is a %s, not an opentelemetry-sdk TracerProvider, "
                "so Steps in other processes cannot relay their spans to it; they use "
                "their own global provider (see tracer_provider_factory)",
                type(explicit).__name__,
            )
        return None
    key = (id(provider), explicit is not None)
    with _lock:
        relay = _by_provider.get(key)
        if relay is not None and relay.provider is provider and not relay.closed.is_set():
            return relay.address
    context = ray.get_runtime_context()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    address = SpanRelayAddress(
        actor_name=f"dex-agents-ray-span-relay-{uuid.uuid4().hex}",
        namespace=context.namespace,
        origin=f"pid {os.getpid()} on {socket.gethostname()}",
        explicit=explicit is not None,
        sampler=_pickled_sampler(provider),
    )
    actor = SpanRelay.options(  # type: ignore[attr-defined]
        name=address.actor_name,
        namespace=address.namespace,
        scheduling_strategy=NodeAffinitySchedulingStrategy(context.get_node_id(), soft=True),
    ).remote(BUFFER_LIMIT)
    relay = _OriginRelay(provider, address, actor)
    with _lock:
        _by_provider[key] = relay
        _by_name[address.actor_name] = relay
        if not _atexit_registered:
            # Registered after ray.init's own atexit shutdown, so it runs before it.
            atexit.register(close_span_relays)
            on_clean_exit(close_span_relays)  # FlowEngine.shutdown, before ray.shutdown
            _atexit_registered = True
    return address


def close_span_relays(timeout: float = 5.0) -> None:
    """Stop this process's relay threads, then deliver what their relays still hold.

    Runs at exit, before Ray's own shutdown; call it before an explicit
    ``ray.shutdown()`` too: a thread blocked in a Ray call while Ray shuts down
    can end the process (Ray's core worker exits with status 1).
    """
    with _lock:
        relays = list(_by_name.values())
    for relay in relays:
        relay.stop(timeout)
    for relay in relays:
        relay.drain(force=True)


class RelayExporter:
    """The ``SpanExporter`` of a relaying process: each batch to the relay actor."""

    def __init__(self, address: SpanRelayAddress) -> None:
        self._address = address
        self._actor: Any = None
        self._gone = False
        self._dropped = 0
        self._warned_at: float | None = None
        self._failed = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        records = [relayed_span(span) for span in spans]
        if self._gone:
            return self._drop_gone(len(records))
        try:
            if self._actor is None:
                self._actor = ray.get_actor(
                    self._address.actor_name, namespace=self._address.namespace
                )
            ray.get(self._actor.put.remote(records), timeout=EXPORT_TIMEOUT_SECONDS)
        except (ValueError, ray.exceptions.ActorDiedError):  # no such actor / it died
            self._gone = True
            return self._drop_gone(len(records))
        except Exception:
            level = logging.DEBUG if self._failed else logging.WARNING
            self._failed = True
            logger.log(
                level,
                "tracing: relaying %d spans to %s failed; they are dropped",
                len(records),
                self._address.origin,
                exc_info=True,
            )
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def _drop_gone(self, count: int) -> SpanExportResult:
        self._dropped += count
        now = time.monotonic()
        warn = self._warned_at is None or now - self._warned_at >= GONE_WARNING_INTERVAL_SECONDS
        if warn:
            self._warned_at = now
        logger.log(
            logging.WARNING if warn else logging.DEBUG,
            "tracing: the process that built this Flow's AgentTracingOptions (%s) has gone, "
            "and with it its span relay: %d spans of this process dropped so far. Its "
            "tracer provider was the only way out for them; tracer_provider_factory or a "
            "worker_process_setup_hook provider exports from every process directly",
            self._address.origin,
            self._dropped,
        )
        return SpanExportResult.FAILURE

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


def _sampler(address: SpanRelayAddress) -> Any:
    if address.sampler is not None:
        try:
            return pickle.loads(address.sampler)
        except Exception:
            logger.warning(
                "tracing: the origin's sampler does not unpickle here; sampling with "
                "ParentBased(ALWAYS_ON)",
                exc_info=True,
            )
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased

    return ParentBased(ALWAYS_ON)


def relayed_provider(address: SpanRelayAddress) -> Any:
    """The provider this process emits with for a relayed copy of the options:
    the origin's own in the origin; ``None`` (use the global one) when the options
    named no provider and this process has a global one of its own; else a
    provider that relays its spans to the origin."""
    with _lock:
        origin = _by_name.get(address.actor_name)
    if origin is not None:
        return origin.provider
    if not address.explicit and not isinstance(
        trace.get_tracer_provider(), trace.ProxyTracerProvider
    ):
        return None
    provider = SdkTracerProvider(sampler=_sampler(address), resource=Resource.get_empty())
    processor = BatchSpanProcessor(
        RelayExporter(address),  # type: ignore[arg-type]
        schedule_delay_millis=EXPORT_DELAY_MILLIS,
    )
    provider.add_span_processor(processor)
    return provider
