"""``EngineClient``: the ``dex.AsyncClient`` surface over the engine."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from dex import (
    Attribute,
    AttributeMap,
    AttributeMapLoad,
    Flow,
    FlowConfig,
    FlowInfo,
    FlowResult,
    FlowStatus,
    Registry,
    RPCInvokeOptions,
    SearchFlowEntry,
    SearchFlowsPage,
    StartFlowOptions,
    StopFlowOptions,
    Stream,
    StreamMessage,
    StreamMessagesPage,
)
from dex.dexpb import dex_pb2 as pb
from dex.flow_result import StepCompletion
from dex.runtime_errors import (
    FlowErrorType,
    FlowNotActiveOrNotFoundError,
    FlowNotFoundError,
    LongPollTimeoutError,
    RequestTimeoutError,
)

from dex_agents_ray.engine._errors import (
    HostNotStartedError,
    HostPassivatedError,
    InvalidStreamTokenError,
    service_error,
    unwrap,
)
from dex_agents_ray.engine._polls import SharedPolls
from dex_agents_ray.engine._query import Term, matcher, parse_query
from dex_agents_ray.engine.actors._channel import ChannelClosed, HostChannels
from dex_agents_ray.engine.actors._placement import Placement, PlacementMode
from dex_agents_ray.engine.run._flow_config import (
    DEFAULT_SEARCH_MODE,
    attribute_keys,
    search_mode,
)
from dex_agents_ray.engine.run._operations import StartRequest
from dex_agents_ray.engine.sdk._sdk import (
    RegisteredFlow,
    ValueMapper,
    attribute_initializations,
    flow_by_type,
    resolve_rpc_invoke_options,
    rpc_for_method,
)
from dex_agents_ray.engine.sdk._sdk import (
    apply_attribute_store_sync as _apply_attribute_store_sync,
)
from dex_agents_ray.engine.sdk._sdk import (
    apply_hard_delete_on_null as _apply_hard_delete_on_null,
)
from dex_agents_ray.engine.store._records import RunRecord, RunStatus, StreamRecord
from dex_agents_ray.engine.store._store import FlowStore


class EngineHandle(Protocol):
    """What a client uses of its engine (``FlowEngine``), which builds it."""

    registry: Registry
    store: FlowStore
    values: ValueMapper
    placement: Placement
    local_channels: bool

    def registered(self, flow: Flow[Any]) -> tuple[RegisteredFlow, str]:
        """The registered form and stored version of ``flow``; refuses unknown flows."""
        ...

    def host(self, flow_id: str) -> Any:
        """The host actor of ``flow_id``, created on demand."""
        ...

    def forget_host(self, flow_id: str) -> None:
        """Drop the handle of ``flow_id``'s host (the next call looks it up again)."""
        ...


_HOST_RETRY_SECONDS = 60.0
READ_AHEAD = 16
"""Stream messages one read takes from the store (the rest wait for the next call)."""
READ_AHEAD_KEYS = 1024
"""Read-ahead entries a client keeps (the oldest go first)."""


EXECUTE_COMPLETED_EVENT = "step_completed"
"""The ``StepHistoryEntry.event_type`` of a Step whose ``execute`` completed."""


@dataclass(frozen=True, kw_only=True)
class StepHistoryEntry:
    """One entry of a run's Step history, oldest first.

    The spec's fields are ``event_type``, ``step_type``, ``step_execution_id``
    and ``final_attempt``; ``at``, ``detail`` and ``event`` (the same as
    ``event_type``) are the engine's own.
    """

    at: datetime
    """When the commit that wrote the entry was made."""
    step_execution_id: str
    """The Step execution (``"{StepType}-{n}"``); empty for run-level events."""
    event_type: str
    """``flow_started``, ``step_scheduled``, ``wait_for_completed``, ``wait_satisfied``,
    ``attempt_started``, ``attempt_failed``, ``step_completed``
    (:data:`EXECUTE_COMPLETED_EVENT`), ``step_failed``, ``step_canceled``,
    ``rpc_applied`` or ``flow_closed``."""
    detail: dict[str, Any]
    """The event's own fields (attempt, error, what it routed to, ...)."""
    step_type: str = ""
    """The Step's type; empty for run-level events."""
    final_attempt: int | None = None
    """The attempt the event is about (for ``step_completed``, the attempt that
    completed); ``None`` for events that concern no attempt."""

    @property
    def event(self) -> str:
        """The same as :attr:`event_type`."""
        return self.event_type


def _seconds(value: timedelta | float | None, name: str) -> float | None:
    """A timeout as seconds; refuses what is neither a duration nor a number."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a timedelta, seconds or None, got {type(value).__name__}")
    return float(value)


def _indexed(terms: list[Term]) -> tuple[str | None, str | None, list[Term]]:
    """The ``FlowType`` and ``ActiveStepTypes`` equalities a store index can
    answer, and the terms left for the client to check."""
    flow_type: str | None = None
    step_type: str | None = None
    rest: list[Term] = []
    for term in terms:
        if term.op == "=" and isinstance(term.value, str):
            if term.field == "FlowType" and flow_type is None:
                flow_type = term.value
                continue
            if term.field == "ActiveStepTypes" and step_type is None:
                step_type = term.value
                continue
        rest.append(term)
    return flow_type, step_type, rest


def _attempt_of(detail: dict[str, Any]) -> int | None:
    attempt = detail.get("attempt")
    return attempt if isinstance(attempt, int) else None


def _dex_status(status: RunStatus) -> FlowStatus:
    return FlowStatus(status.value)


def _not_found(flow_id: str, operation: str) -> FlowNotFoundError:
    return service_error(FlowNotFoundError, f"flow {flow_id!r} does not exist", operation, flow_id)


class EngineClient:
    """Start, signal, inspect and wait for flow runs (mirrors ``dex.AsyncClient``)."""

    def __init__(self, engine: EngineHandle) -> None:
        self._engine = engine
        self._values = engine.values
        self._read_ahead: OrderedDict[tuple[str, str, int], list[StreamRecord]] = OrderedDict()
        """Stream messages read past the one returned, keyed by the run, the
        Stream and the offset they follow (a reader's next resume token)."""
        self._known_runs: OrderedDict[str, None] = OrderedDict()
        """Flow IDs with a run (never deleted): RPCs, stops and long polls on them
        skip the store read that refuses a flow ID that never ran."""
        self._live_tails: OrderedDict[tuple[str, str, int], None] = OrderedDict()
        """Stream positions a long poll answered as the newest then: a reader
        there polls the host again at once (a store read would find nothing)."""
        self._channels = HostChannels(
            engine.local_channels and engine.placement.mode is PlacementMode.SHARED
        )
        """Sockets to the shared hosts of this node (``FlowEngine.start(local_channels=)``)."""
        self._polls = SharedPolls(
            lambda flow_id, *args: self._call(flow_id, "wait_streams", *args),
            engine.placement.host_name,
            READ_AHEAD,
        )
        """Long polls shared by the readers waiting on the same host."""

    # -- host calls --------------------------------------------------------------------

    def close_channels(self) -> None:
        """Close this client's sockets to hosts (the engine shuts down)."""
        self._channels.close()

    async def _call(
        self, flow_id: str, method: str, *args: Any, retry_args: tuple[Any, ...] | None = None
    ) -> Any:
        """Call a host method, retrying while Ray restarts a crashed host.

        Every mutating call carries a request ID, so a retried call whose first
        try did apply returns the first result instead of applying again.
        ``retry_args`` replace ``args`` from the second try on.
        """
        import ray.exceptions

        loop = asyncio.get_running_loop()
        deadline = loop.time() + _HOST_RETRY_SECONDS
        while True:
            host_name = self._engine.placement.host_name(flow_id)
            channel = self._channels.get(host_name)
            try:
                host = self._engine.host(flow_id)
                if channel is not None:  # the host's socket: see ``_channel``
                    return unwrap(await channel.request((method, flow_id, args)))
                answer = await getattr(host, method).remote(flow_id, *args)
                self._channels.answered(host_name, host)
                return unwrap(answer)
            except (
                ray.exceptions.ActorUnavailableError,
                ray.exceptions.ActorDiedError,
                HostPassivatedError,
                HostNotStartedError,
                ChannelClosed,
            ):
                # A crashed host restarts; a passivating one exits and is re-created;
                # a killed worker's hosts come back with its replacement.
                if loop.time() > deadline:
                    raise
                if retry_args is not None:
                    args = retry_args
                self._channels.forget(host_name)
                self._engine.forget_host(flow_id)
                await asyncio.sleep(0.05)

    # -- starting and signalling -------------------------------------------------------

    async def start_flow(
        self,
        flow: Flow[Any],
        flow_id: str,
        input: object,
        options: StartFlowOptions | None = None,
    ) -> str:
        """Start a run of ``flow`` with ID ``flow_id``; returns the run ID."""
        options = options or StartFlowOptions()
        registered, flow_hash = self._engine.registered(flow)
        _refuse_unsupported(options)
        mode = search_mode(options.config_override, "StartFlowOptions.config_override")
        start = registered.start_step
        if start is None:
            raise ValueError(f"Flow {registered.name} has no start Step")
        encoded = self._values.encode(input, start.input_codec)
        request = StartRequest(
            flow_type=registered.name,
            flow_hash=flow_hash,
            input=encoded.SerializeToString(),
            attribute_writes=self._initial_writes(registered, options),
            id_reuse_policy=options.id_reuse_policy.value,
            ignore_already_started=options.ignore_already_started,
            request_id=options.request_id or str(uuid.uuid4()),
            start_delay=None
            if options.start_delay is None
            else options.start_delay.total_seconds(),
            active_step_search_mode=mode or DEFAULT_SEARCH_MODE,
        )
        run_id = str(await self._call(_require_id(flow_id), "start_flow", request))
        self._known(flow_id)
        return run_id

    def _initial_writes(self, registered: Any, options: StartFlowOptions) -> list[bytes]:
        writes = []
        for init in attribute_initializations(options):
            definition = init.definition
            if registered.persistence.get(definition.name) is not definition:
                raise ValueError(
                    f"StartFlowOptions.with_attribute: {definition.name!r} is not an Attribute "
                    f"of Flow {registered.name}"
                )
            key = (
                f"{definition.name}/{_quote(init.instance)}"
                if isinstance(definition, AttributeMap) and init.instance is not None
                else definition.name
            )
            write = pb.AttributeWrite(
                key=key,
                value=self._values.encode(init.value, self._values.codec(definition.value_type)),
            )
            index = self._values.index_config(
                definition.index, isinstance(definition, AttributeMap)
            )
            if index is not None:
                write.index_config.CopyFrom(index)
            _apply_attribute_store_sync(write, definition)
            _apply_hard_delete_on_null(write, definition)
            writes.append(write.SerializeToString())
        return writes

    async def invoke_rpc(
        self,
        rpc_method: Callable[..., Any],
        flow_id: str,
        input: object = None,
        *,
        run_id: str = "",
        options: RPCInvokeOptions | None = None,
        request_id: str | None = None,
    ) -> Any:
        """Invoke an ``@rpc`` of a running flow (pass the bound method)."""
        registry = self._engine.registry
        registered, rpc = rpc_for_method(registry, rpc_method)
        locks, attribute_loads, channel_loads = resolve_rpc_invoke_options(
            registry, registered, options or RPCInvokeOptions()
        )
        encoded = (
            self._values.encode(input, rpc.input_codec).SerializeToString()
            if rpc.input_codec is not None
            else None
        )
        await self._existing(flow_id, "InvokeRPC")
        extra = (tuple(locks), tuple(attribute_loads), tuple(channel_loads))
        # A request ID made here is new on the first try: nothing to look up.
        fresh = request_id is None
        request_id = request_id or str(uuid.uuid4())
        output = await self._call(
            flow_id,
            "invoke_rpc",
            rpc.name,
            encoded,
            request_id,
            extra,
            fresh,
            retry_args=(rpc.name, encoded, request_id, extra, False),
        )
        value = pb.Value.FromString(output)
        if rpc.output_codec is None:
            return None
        return self._values.decode(value, rpc.output_codec)

    async def stop_flow(self, flow_id: str, options: StopFlowOptions | None = None) -> None:
        """Cancel, terminate or fail a running flow."""
        options = options or StopFlowOptions()
        await self._existing(flow_id, "StopFlow")
        await self._call(flow_id, "stop_flow", options.type.value, options.reason)

    async def update_flow_config(self, flow_id: str, config: FlowConfig) -> None:
        """Replace mutable configuration for an active Flow (``dex.AsyncClient``'s).

        ``config.active_step_search_mode`` applies at once: ``DISABLED`` takes the
        run out of the ``ActiveStepTypes`` search, ``WITH_WAIT_FOR`` lists only its
        active Steps that have a ``wait_for``, ``ALL`` and ``DEFAULT`` every one;
        a ``None`` field keeps the current setting. ``step_durability`` changes
        nothing (every Step commits synchronously here).

        Raises:
            FlowNotActiveOrNotFoundError: The Flow is missing or closed.
            ValueError: ``config`` sets a field this engine does not apply.
            TypeError: ``config`` is not a ``dex.FlowConfig``.
        """
        mode = search_mode(config, "FlowConfig")
        await self._existing(flow_id, "UpdateFlowConfig")
        await self._call(flow_id, "update_flow_config", mode)

    async def get_attributes(
        self, flow_id: str, reads: Sequence[Attribute[Any] | AttributeMapLoad]
    ) -> tuple[Any, ...]:
        """Committed Attribute values of the current or latest run of ``flow_id``.

        Reads Flow state from outside the Flow without an RPC. Not in
        ``dex.AsyncClient`` 1.23 (its protocol has ``GetAttributes``); the shape
        follows the SDK's typed Attribute selectors and the later SDKs' reads:
        each read is a registered ``Attribute`` or one ``AttributeMap`` instance
        as ``the_map.load(instance)`` (the selector RPC loads use), and the
        result has one value per read, in order: the value when set, ``None``
        when not. A Step's writes show once its result commits, and what is read
        is durable. A closed run's values stay readable.

        Example::

            state, first = await client.get_attributes(
                "session-42", [AGENT_STATE, AGENT_MESSAGES.load(message_sequence_key(1))]
            )

        Raises:
            FlowNotFoundError: ``flow_id`` never ran.
            ValueError: A read is not an Attribute of the run's Flow.
            TypeError: A read is neither an Attribute nor an instance selection.
            FlowDefinitionError: The run's Flow is not registered with this engine.
        """
        run = await self._run(flow_id, "GetAttributes")
        registered = flow_by_type(self._engine.registry, run.flow_type)
        keys = attribute_keys(reads, registered.persistence, run.flow_type)
        if not keys:
            return ()
        stored = await self._call(flow_id, "get_attributes", [key for key, _ in keys])
        return tuple(
            None
            if value is None
            else self._values.decode(pb.Value.FromString(value), self._values.codec(kind))
            for value, (_, kind) in zip(stored, keys, strict=True)
        )

    # -- reading -----------------------------------------------------------------------

    async def _existing(self, flow_id: str, operation: str) -> None:
        """Refuse an operation on a flow ID that never ran (no host is created for it).

        A flow ID that had a run keeps its runs (none is ever deleted), so one
        this client saw is not looked up again.
        """
        if flow_id in self._known_runs:
            self._known_runs.move_to_end(flow_id)
            return
        if await self._engine.store.runs.get_run(_require_id(flow_id)) is None:
            raise service_error(
                FlowNotActiveOrNotFoundError,
                f"flow {flow_id!r} does not exist",
                operation,
                flow_id,
            )
        self._known(flow_id)

    def _known(self, flow_id: str) -> None:
        """``flow_id`` has a run in the store."""
        self._known_runs[flow_id] = None
        self._known_runs.move_to_end(flow_id)
        while len(self._known_runs) > READ_AHEAD_KEYS:
            self._known_runs.popitem(last=False)

    async def _run(self, flow_id: str, operation: str) -> RunRecord:
        run = await self._engine.store.runs.get_run(_require_id(flow_id))
        if run is None:
            raise _not_found(flow_id, operation)
        return run

    async def describe_flow(self, flow_id: str) -> FlowInfo:
        run = await self._run(flow_id, "DescribeFlow")
        return FlowInfo(
            flow_id=run.flow_id,
            run_id=run.run_id,
            flow_type=run.flow_type,
            status=_dex_status(run.status),
            started_at=datetime.fromtimestamp(run.started_at, UTC),
        )

    async def wait_for_flow(
        self, flow_id: str, timeout: timedelta | float | None = None
    ) -> FlowResult:
        """Wait until the run closes; returns its status and Step outputs.

        ``timeout`` is a ``timedelta`` as in ``dex.AsyncClient`` (seconds as a
        number are accepted too); ``None`` waits as long as it takes.
        """
        timeout = _seconds(timeout, "timeout")
        run = await self._run(flow_id, "WaitForFlow")
        if run.status is RunStatus.RUNNING:
            closed = await self._call(flow_id, "wait_closed", timeout)
            if not closed:
                raise service_error(
                    RequestTimeoutError,
                    f"flow {flow_id!r} did not close within {timeout} s",
                    "WaitForFlow",
                    flow_id,
                )
            run = await self._run(flow_id, "WaitForFlow")
        completions = await self._engine.store.runs.completions(flow_id)
        decode = self._decode_output
        return FlowResult(
            _dex_status(run.status),
            [
                StepCompletion(
                    pb.StepCompletionOutput(
                        completed_step_type=c.step_type,
                        completed_step_execution_id=c.exec_id,
                        completed_step_output=pb.Value.FromString(c.output),
                    ),
                    decode,
                )
                for c in completions
            ],
            FlowErrorType(run.error_type) if run.error_type else None,
            run.error_message or None,
        )

    def _decode_output(self, value: pb.Value, output_type: type[Any]) -> Any:
        return self._values.decode(value, self._values.codec(output_type))

    async def search_flows(
        self,
        query: str,
        page_size: int,
        next_page_token: str = "",
        *,
        include_continued_as_new: bool = False,
    ) -> SearchFlowsPage:
        """Find runs by ``FlowType``, ``ActiveStepTypes`` and indexed Attributes.

        ``include_continued_as_new`` is accepted for ``dex.AsyncClient``'s
        signature; this engine has no continue-as-new, so it changes nothing.
        """
        if page_size <= 0:
            raise ValueError(f"search_flows: page_size must be positive, got {page_size}")
        try:
            offset = int(next_page_token or "0")
        except ValueError as error:
            raise ValueError(
                f"search_flows: invalid next_page_token {next_page_token!r}"
            ) from error
        terms = parse_query(query)
        predicate = matcher(terms)
        flow_type, step_type, rest = _indexed(terms)
        # Only a query the store's indexes answer whole can stop at the page's end.
        limit = offset + page_size + 1 if not rest else None
        candidates = await self._engine.store.runs.list_runs(
            flow_type=flow_type, active_step_type=step_type, limit=limit
        )
        hits = [run for run in candidates if predicate(_fields(run))]
        page = hits[offset : offset + page_size]
        more = offset + page_size < len(hits)
        return SearchFlowsPage(
            flows=[
                SearchFlowEntry(
                    flow_id=run.flow_id,
                    run_id=run.run_id,
                    flow_type=run.flow_type,
                    status=_dex_status(run.status),
                    started_at=datetime.fromtimestamp(run.started_at, UTC),
                    closed_at=None
                    if run.closed_at is None
                    else datetime.fromtimestamp(run.closed_at, UTC),
                    indexed_attributes={
                        k: self._values.to_value(_search_value(v))
                        for k, v in run.search_attributes.items()
                    },
                )
                for run in page
            ],
            next_page_token=str(offset + page_size) if more else "",
        )

    async def read_step_history(self, flow_id: str) -> list[StepHistoryEntry]:
        """The run's Step history, oldest first."""
        await self._run(flow_id, "ReadStepHistory")
        return [
            StepHistoryEntry(
                at=datetime.fromtimestamp(h.at, UTC),
                step_execution_id=h.exec_id,
                event_type=h.event,
                detail=h.detail,
                step_type=h.exec_id.rpartition("-")[0],
                final_attempt=_attempt_of(h.detail),
            )
            for h in await self._engine.store.runs.history(flow_id)
        ]

    # -- streams -----------------------------------------------------------------------

    async def read_stream(
        self,
        flow_id: str,
        stream: Stream[Any],
        resume_token: str = "",
        timeout: timedelta | float | None = None,
    ) -> StreamMessage[Any]:
        """The next message after ``resume_token`` (long poll up to ``timeout``,
        a ``timedelta`` as in ``dex.AsyncClient``, or seconds)."""
        timeout = _seconds(timeout, "timeout")
        after = _offset(resume_token, flow_id, stream.name, "ReadStream")
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        checked = False
        position = (flow_id, stream.name, after)
        records = self._read_ahead.pop(position, None)
        if records is None and position in self._live_tails:
            del self._live_tails[position]
            records = []  # the host answers at once if more came meanwhile
        if records is None:
            records = await self._engine.store.streams.read_stream(
                _require_id(flow_id), stream.name, after, READ_AHEAD
            )
        while True:
            if records:  # only a run that exists has messages
                first, rest = records[0], records[1:]
                # Messages are immutable and offsets never reused (they go on
                # across runs of a flow ID): the reader's next call (resume token =
                # this offset) is served without a store read. Every return sets or
                # clears its entry, so an entry never outlives the position it serves.
                key = (flow_id, stream.name, first.offset)
                if rest:
                    self._read_ahead[key] = rest
                    while len(self._read_ahead) > READ_AHEAD_KEYS:
                        self._read_ahead.popitem(last=False)
                else:
                    self._read_ahead.pop(key, None)
                return self._stream_message(flow_id, stream, first)
            if not checked and flow_id not in self._known_runs:
                await self._run(flow_id, "ReadStream")
                self._known(flow_id)
            checked = True
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                raise service_error(
                    LongPollTimeoutError,
                    f"no message on Stream {stream.name!r} of {flow_id!r} within {timeout} s",
                    "ReadStream",
                    flow_id,
                )
            wait = 5.0 if remaining is None else min(remaining, 5.0)
            # The long poll answers with the records themselves.
            records = await self._polls.wait(flow_id, stream.name, after, wait)
            if 0 < len(records) < READ_AHEAD:
                self._live_tails[(flow_id, stream.name, records[-1].offset)] = None
                while len(self._live_tails) > READ_AHEAD_KEYS:
                    self._live_tails.popitem(last=False)

    async def list_stream_messages(
        self, flow_id: str, stream: Stream[Any], page_size: int, before_page_token: str = ""
    ) -> StreamMessagesPage[Any]:
        """Retained messages, newest first, ``page_size`` at a time."""
        if page_size <= 0:
            raise ValueError(f"list_stream_messages: page_size must be positive, got {page_size}")
        before = (
            _offset(before_page_token, flow_id, stream.name, "ListStreamMessages")
            if before_page_token
            else None
        )
        records = await self._engine.store.streams.list_stream(
            flow_id, stream.name, before, page_size + 1
        )
        page = records[:page_size]
        return StreamMessagesPage(
            messages=[self._stream_message(flow_id, stream, r) for r in page],
            next_page_token=(
                stream_token(flow_id, stream.name, page[-1].offset)
                if len(records) > page_size
                else ""
            ),
        )

    def _stream_message(self, flow_id: str, stream: Stream[Any], record: Any) -> StreamMessage[Any]:
        value = self._values.decode(
            pb.Value.FromString(record.value), self._values.codec(stream.value_type)
        )
        return StreamMessage(
            value=value,
            resume_token=stream_token(flow_id, stream.name, record.offset),
            created_time=datetime.fromtimestamp(record.created_at, UTC),
            source=record.source,
        )


def _refuse_unsupported(options: StartFlowOptions) -> None:
    if options.timeout is not None:
        raise ValueError("StartFlowOptions.timeout: flow timeouts are not supported by this engine")
    if options.retry_policy is not None:
        raise ValueError(
            "StartFlowOptions.retry_policy: flow retries are not supported by this engine"
        )


def _require_id(flow_id: str) -> str:
    if not isinstance(flow_id, str) or not flow_id.strip():
        raise ValueError(f"flow_id must be a non-empty string, got {flow_id!r}")
    return flow_id


def _quote(instance: str) -> str:
    from dex import Registry

    return Registry.physical_name("", instance)[1:]


def stream_token(flow_id: str, stream: str, offset: int) -> str:
    """A Stream resume (or page) token: the offset, bound to its run and Stream."""
    return f"{offset}.{_stream_tag(flow_id, stream)}"


@functools.lru_cache(maxsize=4096)
def _stream_tag(flow_id: str, stream: str) -> str:
    # Every message read makes a token and checks one: a digest each time otherwise.
    digest = hashlib.sha256(f"{flow_id}\x00{stream}".encode()).hexdigest()
    return digest[:12]


def _offset(token: str, flow_id: str, stream: str, operation: str) -> int:
    """The offset in ``token``; a token of another run or Stream, or one this engine
    did not write, is refused (``INVALID_ARGUMENT``), as the Dex server does."""
    if not token:
        return 0
    offset, _, tag = token.partition(".") if isinstance(token, str) else ("", "", "")
    if not offset.isdigit() or tag != _stream_tag(flow_id, stream):
        raise service_error(
            InvalidStreamTokenError,
            f"Stream token {token!r} is not a token of Stream {stream!r} of flow {flow_id!r}",
            operation,
            flow_id,
        )
    return int(offset)


def _fields(run: RunRecord) -> dict[str, Any]:
    fields: dict[str, Any] = dict(run.search_attributes)
    fields.update(
        FlowType=run.flow_type,
        FlowId=run.flow_id,
        RunId=run.run_id,
        ExecutionStatus=run.status.value,
        ActiveStepTypes=list(run.active_step_types),
    )
    return fields


def _search_value(value: Any) -> pb.Value:
    if isinstance(value, bool):
        return pb.Value(bool_value=value)
    if isinstance(value, int):
        return pb.Value(int_value=value)
    if isinstance(value, float):
        return pb.Value(double_value=value)
    if isinstance(value, str):
        return pb.Value(string_value=value)
    import json

    return pb.Value(obj_value=pb.EncodedObject(encoding="json", payload=json.dumps(value).encode()))
