"""Run one Step or RPC handler of a registered Flow and map its result.

This is the Worker half of Dex, run in-process: it builds the handler's
Context from the engine's request, calls the handler in whichever form the SDK
allows (plain, sync generator, coroutine), forwards heartbeats and Stream
writes as they happen, and maps the returned ``Wait`` / ``StepDecision`` /
``RPCResult`` to the SDK's protobuf result with the SDK's own validation. The
same code runs in the host actor and inside remote Step tasks.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import functools
import inspect
import math
from collections.abc import Callable, Generator, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeAlias, TypeVar, cast
from urllib.parse import unquote

from dex import (
    Attribute,
    AttributeMap,
    Channel,
    ChannelMap,
    ChannelMessage,
    Context,
    Flow,
    Registry,
    RPCResult,
    Step,
    StepDecision,
    StepOptions,
    Wait,
)
from dex.condition import ConditionCombination, TimerCondition
from dex.dexpb import dex_pb2 as pb
from dex.runtime_errors import (
    ChannelMessagesNotLoadedError,
    InvalidStepResultError,
    ValueMappingError,
)
from dex.step import StepMovement, StepOutput

from dex_agents_ray.engine._options import (
    EngineRecoveryErrorInfo,
    RayTaskOptions,
    RemoteStepOptions,
    StepAttemptProgress,
)
from dex_agents_ray.engine.sdk._handler_threads import handler_threads
from dex_agents_ray.engine.sdk._immutable import deeply_immutable
from dex_agents_ray.engine.sdk._sdk import (
    HARD_DELETE_ATTRIBUTE_PROTOCOL_VERSION,
    InvocationContext,
    InvocationMethod,
    NegotiatedServerProtocol,
    ValueMapper,
    WorkerDispatcher,
    require_map_instance,
)
from dex_agents_ray.engine.sdk._sdk import RegisteredFlow as _RegisteredFlow
from dex_agents_ray.engine.sdk._sdk import RegisteredStep as _RegisteredStep

T = TypeVar("T")
Frame = pb.StepMethodHeartbeat | pb.StepStreamWrite
FrameSink = Callable[[Frame], None]
_MAPPED_OPTIONS_LIMIT = 4096


@dataclass(frozen=True)
class MovementExtras:
    """What a movement carries beyond the SDK's protobuf mapping."""

    remote: RayTaskOptions | None
    failure_remote: RayTaskOptions | None


_MOVEMENT_SINK: ContextVar[list[MovementExtras] | None] = ContextVar(
    "dex_agents_ray_movement_sink", default=None
)


def remote_of(options: StepOptions | None) -> RayTaskOptions | None:
    """The Ray task options of ``options`` when they mark a remote Step."""
    return options.ray if isinstance(options, RemoteStepOptions) else None


def step_class(step: object) -> type[Step[Any]]:
    """Normalise a decision target: a Step class or a Step instance."""
    if isinstance(step, Step):
        return type(step)
    return cast(type[Step[Any]], step)


def _ceil_timers(wait: Wait) -> Wait:
    """Round Timer durations up to whole seconds, keeping shared Conditions shared."""
    replaced: dict[int, Any] = {}

    def fix(condition: Any) -> Any:
        key = id(condition)
        if key not in replaced:
            new = condition
            if isinstance(condition, TimerCondition):
                seconds = math.ceil(condition.duration.total_seconds())
                if seconds != condition.duration.total_seconds():
                    new = dataclasses.replace(condition, duration=timedelta(seconds=seconds))
            replaced[key] = new
        return replaced[key]

    return dataclasses.replace(
        wait,
        conditions=tuple(fix(c) for c in wait.conditions),
        combinations=tuple(
            ConditionCombination(conditions=tuple(fix(c) for c in combo.conditions))
            for combo in wait.combinations
        ),
    )


class FlowMapper(WorkerDispatcher):
    """The SDK's result mapping, with the engine's extensions.

    Accepts Step instances as decision targets, rounds Timer durations up to
    whole seconds, and records per-movement Ray options in order.
    """

    def __init__(self, registry: Registry) -> None:
        protocol = NegotiatedServerProtocol()
        protocol.record_version(HARD_DELETE_ATTRIBUTE_PROTOCOL_VERSION)
        super().__init__(registry, ValueMapper(registry.codec_registry), cast(Any, None), protocol)

        self._mapped_options: dict[tuple[str, StepOptions], pb.StepOptions] = {}

    @property
    def values(self) -> ValueMapper:
        return self._values

    def map_step_options(
        self, flow: _RegisteredFlow, options: StepOptions | None
    ) -> pb.StepOptions | None:
        # Steps build their options afresh for every movement (equal values):
        # each distinct value maps once. Callers copy the result, never change it.
        if options is None:
            return None
        key = (flow.name, options)
        try:
            mapped = self._mapped_options.get(key)
        except TypeError:  # options holding an unhashable value
            return super().map_step_options(flow, options)
        if mapped is None:
            mapped = super().map_step_options(flow, options)
            if mapped is not None and len(self._mapped_options) < _MAPPED_OPTIONS_LIMIT:
                self._mapped_options[key] = mapped
        return mapped

    @staticmethod
    def _registered_movement_target(
        flow: _RegisteredFlow, step: type[Step[Any]]
    ) -> _RegisteredStep:
        return flow.step_class(step_class(step))

    def _map_wait(self, flow: _RegisteredFlow, wait: Wait) -> pb.WaitingCondition | None:
        return super()._map_wait(flow, _ceil_timers(wait))

    def _map_movement(self, flow: _RegisteredFlow, movement: StepMovement[Any]) -> pb.StepMovement:
        mapped = super()._map_movement(flow, movement)
        sink = _MOVEMENT_SINK.get()
        if sink is not None:
            target = self._registered_movement_target(flow, movement.step)
            options = (
                movement.options if movement.options is not None else target.step.get_step_options()
            )
            sink.append(_extras(flow, options))
        return mapped

    def map_decision(
        self, flow: _RegisteredFlow, decision: StepDecision
    ) -> tuple[pb.StepDecision, list[MovementExtras]]:
        return _collecting_extras(lambda: self._map_decision(flow, decision))

    def map_rpc_movements(
        self, flow: _RegisteredFlow, movements: tuple[StepMovement[Any], ...]
    ) -> tuple[list[pb.StepMovement], list[MovementExtras]]:
        return _collecting_extras(lambda: self._map_movements(flow, movements))

    def start_movement(
        self, flow: _RegisteredFlow, step_input: pb.Value
    ) -> tuple[pb.StepMovement, MovementExtras]:
        """The movement that starts a run of ``flow``."""
        start = flow.start_step
        if start is None:
            raise ValueError(f"Flow {flow.name} has no start Step")
        options = start.step.get_step_options()
        mapped = pb.StepMovement(step_type=start.name, step_input=step_input)
        step_options = self.map_step_options(flow, options)
        if step_options is not None:
            mapped.step_options.CopyFrom(step_options)
        mapped.step_options.skip_wait_for = start.skips_wait_for
        return mapped, _extras(flow, options)


def _collecting_extras(mapping: Callable[[], T]) -> tuple[T, list[MovementExtras]]:
    """Run ``mapping`` while recording each mapped movement's extras, in order."""
    sink: list[MovementExtras] = []
    token = _MOVEMENT_SINK.set(sink)
    try:
        return mapping(), sink
    finally:
        _MOVEMENT_SINK.reset(token)


def _extras(flow: _RegisteredFlow, options: StepOptions | None) -> MovementExtras:
    failure_remote = None
    if options is not None and options._execute_failure_target is not None:
        failure_options = options._execute_failure_options
        if failure_options is None:
            target = flow.step_class(step_class(options._execute_failure_target))
            failure_options = target.step.get_step_options()
        failure_remote = remote_of(failure_options)
    return MovementExtras(remote=remote_of(options), failure_remote=failure_remote)


DecodedAttributes: TypeAlias = dict[str, tuple[bytes, object, object]]
"""Physical name -> (the stored bytes it was decoded from, the value type, the value)."""


class AttributeValues:
    """What a handler run in the host sees of the run's Attributes.

    ``stored`` is the snapshot of serialized values taken when its request was
    built; a value is parsed only when the handler reads it. Values of deeply
    immutable types (frozen dataclasses of str, int, tuples and the like) are
    kept in ``decoded``, the run's cache shared by its Steps and RPCs, so a
    value written once and read by every later Step (a session's messages)
    decodes once. A cached entry is valid while the stored bytes are the same
    object: every write replaces them.
    """

    __slots__ = ("decoded", "stored")

    def __init__(self, stored: dict[str, bytes], decoded: DecodedAttributes) -> None:
        self.stored = stored
        self.decoded = decoded


class _ParsedValues(Mapping[str, pb.Value]):
    """``stored`` as the SDK's ``{name: pb.Value}``, each parsed on first read."""

    __slots__ = ("_parsed", "_stored")

    def __init__(self, stored: dict[str, bytes]) -> None:
        self._stored = stored
        self._parsed: dict[str, pb.Value] = {}

    def __getitem__(self, key: str) -> pb.Value:
        value = self._parsed.get(key)
        if value is None:
            value = self._parsed[key] = pb.Value.FromString(self._stored[key])
        return value

    def __contains__(self, key: object) -> bool:
        return key in self._stored

    def __iter__(self) -> Iterator[str]:
        return iter(self._stored)

    def __len__(self) -> int:
        return len(self._stored)


_MISSING: Any = object()


class _EngineContext(InvocationContext):
    """The SDK's Context with ``recovery_error.attempt_progress``, and, given
    ``attribute_values``, Attributes parsed and decoded as they are read."""

    def __init__(
        self,
        *args: Any,
        attempt_progress: StepAttemptProgress,
        attribute_values: AttributeValues | None = None,
        taken: Mapping[str, pb.ChannelValues] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._attempt_progress = attempt_progress
        self._taken: Mapping[str, pb.ChannelValues] = taken or {}
        """The messages satisfied waits took that their Steps have not committed
        (an RPC's only; see ``taken_channel_messages``)."""
        self._view = attribute_values
        self._own: dict[str, Any] = {}
        """Values of deeply immutable types this invocation wrote (the objects it
        set) or, without ``attribute_values``, decoded: each read after the first
        answers from here."""
        self._map_keys: dict[str, list[str]] | None = None
        """The stored AttributeMap keys by map name, found in one pass when first asked."""
        if attribute_values is not None:
            # The SDK only reads this mapping (``get``, ``in``, iteration).
            self._attributes = cast(dict[str, pb.Value], _ParsedValues(attribute_values.stored))

    def _get_attribute(
        self, definition: Attribute[Any] | AttributeMap[Any], instance: str | None
    ) -> Any:
        if not deeply_immutable(definition.value_type):
            return super()._get_attribute(definition, instance)
        self._require_registered(definition)
        self._require_attribute_map_instance_loaded(definition, instance)
        key = self._physical_name(definition, instance)
        own = self._own.get(key, _MISSING)
        if own is not _MISSING:
            return own
        view = self._view
        if view is None:
            value = super()._get_attribute(definition, instance)
            if key not in self.attribute_writes:
                self._own[key] = value
            return value
        stored = view.stored.get(key)
        if stored is None or key in self.attribute_writes:
            return super()._get_attribute(definition, instance)
        hit = view.decoded.get(key)
        if hit is not None and hit[0] is stored and hit[1] is definition.value_type:
            return hit[2]
        value = super()._get_attribute(definition, instance)
        view.decoded[key] = (stored, definition.value_type, value)
        return value

    def _set_attribute(
        self, definition: Attribute[Any] | AttributeMap[Any], instance: str | None, value: Any
    ) -> None:
        super()._set_attribute(definition, instance, value)  # encodes: refuses a bad value
        key = self._physical_name(definition, instance)
        if type(value) is definition.value_type and deeply_immutable(definition.value_type):
            self._own[key] = value  # a later read gets what was written, not a decode of it
        else:
            self._own.pop(key, None)

    def _delete_attribute(
        self, definition: Attribute[Any] | AttributeMap[Any], instance: str | None
    ) -> None:
        super()._delete_attribute(definition, instance)
        self._own.pop(self._physical_name(definition, instance), None)

    def _attribute_map_keys(self, definition: AttributeMap[object]) -> tuple[str, ...]:
        # The SDK scans every Attribute for each call (a session Step makes several).
        if "/" in definition.name:
            return super()._attribute_map_keys(definition)
        self._require_registered(definition)
        self._require_attribute_map_all_loaded(definition)
        by_map = self._map_keys
        if by_map is None:
            by_map = {}
            for key in self._attributes:
                name, slash, _ = key.partition("/")
                if slash:
                    by_map.setdefault(name, []).append(key)
            self._map_keys = by_map
        prefix = f"{definition.name}/"
        keys = set(by_map.get(definition.name, ()))
        for key, write in self.attribute_writes.items():
            if key.startswith(prefix):
                if write.value.WhichOneof("kind") == "null_value":
                    keys.discard(key)
                else:
                    keys.add(key)
        return tuple(sorted(_map_instance(key[len(prefix) :]) for key in keys))

    @staticmethod
    def _physical_name(definition: Any, instance: str | None) -> str:
        # The SDK validates and URL-quotes the instance on every access (a session
        # Step makes hundreds): the same rules, each name computed once.
        if instance is None or not isinstance(definition, AttributeMap | ChannelMap):
            return InvocationContext._physical_name(definition, instance)
        return _map_physical_name(definition.name, instance)

    def taken_messages(self, definition: Channel[T]) -> tuple[ChannelMessage[T], ...]:
        """See ``taken_channel_messages``."""
        self._require_registered(definition)
        if definition.name not in self._loaded_channel_names:
            raise ChannelMessagesNotLoadedError(
                f"Channel messages were not loaded for this invocation: {definition.name}"
            )
        values = self._taken.get(definition.name)
        if values is None:
            return ()
        codec = self._flow_codec(definition.value_type)
        return tuple(
            ChannelMessage(
                message_id=message.message_id,
                value=cast(T, self._values.decode(message.value, codec)),
            )
            for message in values.messages
        )

    @property
    def recovery_error(self) -> EngineRecoveryErrorInfo | None:
        if not self._metadata.HasField("recovery_error"):
            return None
        return EngineRecoveryErrorInfo(
            detail=self._metadata.recovery_error.detail,
            error_type=self._metadata.recovery_error.error_type,
            attempt_progress=self._attempt_progress,
        )


def taken_channel_messages(context: Context, channel: Channel[T]) -> tuple[ChannelMessage[T], ...]:
    """The messages of ``channel`` that a Step's satisfied wait took and whose Step
    has not committed its ``execute`` yet, oldest first, for an RPC of this engine
    that loads the Channel (``@rpc(load_channels=(channel,))``).

    Dex hands a wait its messages when the wait is satisfied, which takes them
    off ``pending_messages``; what the Step makes of them is committed with its
    ``execute``, which may run later (it may even be retried). In between they
    are in neither place, so an RPC that shows what a Channel holds (a session
    snapshot's queued messages) adds these to stay complete. They are no longer
    pending: deleting one by its ID finds nothing. A Step's Context has none.

    Example::

        @rpc(load_channels=(Inbox,))
        def inbox(self, context: Context) -> RPCResult[list[str]]:
            taken = taken_channel_messages(context, Inbox)
            return RPCResult([m.value for m in (*taken, *Inbox.pending_messages(context))])

    Raises:
        TypeError: ``context`` is not a Context this engine made.
        ChannelMessagesNotLoadedError: The RPC does not load ``channel``.
    """
    if not isinstance(context, _EngineContext):
        raise TypeError(
            f"taken_channel_messages needs a Context of this engine, got {type(context).__name__}"
        )
    return context.taken_messages(channel)


@functools.lru_cache(maxsize=65536)
def _map_instance(quoted: str) -> str:
    instance: str = require_map_instance(unquote(quoted))
    return instance


@functools.lru_cache(maxsize=65536)
def _map_physical_name(name: str, instance: str) -> str:
    return Registry.physical_name(name, instance)


class _Emitter:
    """Hands async handlers' heartbeats and Stream writes to the sink at once."""

    def __init__(self, mapper: FlowMapper, sink: FrameSink) -> None:
        self._mapper = mapper
        self._sink = sink
        self._closed = False
        self._close_callbacks: list[Callable[[], None]] = []

    def emit_nowait(self, output: StepOutput) -> None:
        if not self._closed:
            self._sink(_frame(self._mapper, output))

    async def emit(self, output: StepOutput) -> None:
        if self._closed:
            raise asyncio.CancelledError
        self._sink(_frame(self._mapper, output))
        await asyncio.sleep(0)

    def add_close_callback(self, callback: Callable[[], None]) -> None:
        if self._closed:
            callback()
        else:
            self._close_callbacks.append(callback)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            for callback in self._close_callbacks:
                callback()


def _frame(mapper: FlowMapper, output: StepOutput) -> Frame:
    heartbeat, stream_write = mapper._map_step_output(output)
    frame = heartbeat if heartbeat is not None else stream_write
    assert frame is not None
    return frame


@dataclass
class StepResult:
    """A handler's mapped result: exactly one of the responses is set."""

    wait_for: pb.InvokeWaitForMethodResponse | None = None
    execute: pb.InvokeExecuteMethodResponse | None = None
    extras: list[MovementExtras] = dataclasses.field(default_factory=list)


def _is_async(handler: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(handler)


async def invoke_step(
    mapper: FlowMapper,
    flow: _RegisteredFlow,
    method: InvocationMethod,
    request: pb.InvokeExecuteMethodRequest | pb.InvokeWaitForMethodRequest,
    *,
    attempt_progress: StepAttemptProgress,
    is_active: Callable[[], bool],
    sink: FrameSink,
    attribute_values: AttributeValues | None = None,
) -> StepResult:
    """Run one ``wait_for`` or ``execute`` attempt and map its result.

    Raises whatever the handler raised (a failed attempt), or
    ``InvalidStepResultError`` for a result the SDK refuses to map.
    """
    step = flow.step(request.step_type)
    handler: Callable[..., Any] = (
        step.step.wait_for if method is InvocationMethod.WAIT_FOR else step.step.execute
    )
    condition_results = None
    locals_: Any = ()
    if isinstance(request, pb.InvokeExecuteMethodRequest):
        locals_ = request.step_exe_locals
        if request.HasField("condition_results"):
            condition_results = request.condition_results
    emitter = _Emitter(mapper, sink) if _is_async(handler) else None
    context = _EngineContext(
        method,
        flow,
        request.context,
        mapper.values,
        request.attributes,
        locals_,
        condition_results,
        channel_infos=dict(request.channel_infos),
        loaded_channel_messages=dict(request.loaded_channel_messages),
        loaded_attribute_map_instances=request.loaded_attribute_map_instances,
        loaded_channel_names=request.loaded_channel_names,
        loaded_channel_map_instances=request.loaded_channel_map_instances,
        is_active=is_active,
        output_emitter=emitter,
        attempt_progress=attempt_progress,
        attribute_values=attribute_values,
    )
    step_input = mapper.values.decode(request.step_input, step.input_codec)
    failure: BaseException | None = None
    result: StepResult | None = None
    try:
        if emitter is not None:
            returned = await handler(context, step_input)
        else:
            returned = await _run_sync(lambda: handler(context, step_input), mapper, sink)
        result = _map_step_result(mapper, flow, step.name, method, context, returned)
    except BaseException as error:  # the handler's failure is the attempt's failure
        failure = error
    finally:
        if emitter is not None:
            emitter.close()
    combined = context._finalize_step_outputs(failure)
    if combined is not None:
        raise combined
    assert result is not None
    return result


async def _run_sync(call: Callable[[], Any], mapper: FlowMapper, sink: FrameSink) -> Any:
    """Run a sync handler (or sync generator) in a thread, forwarding its frames."""
    loop = asyncio.get_running_loop()

    def forward(output: Any) -> None:
        if not isinstance(output, StepOutput):
            raise TypeError("Step generator must yield StepOutput values")
        frame = _frame(mapper, output)
        loop.call_soon_threadsafe(sink, frame)

    def run() -> Any:
        returned = call()
        if inspect.isgenerator(returned):
            return _drain(cast(Generator[Any, None, Any], returned), forward)
        if inspect.isawaitable(returned):
            raise TypeError("a synchronous handler returned an awaitable")
        return returned

    context = contextvars.copy_context()
    done: asyncio.Future[Any] = loop.create_future()

    def thread_main() -> None:
        try:
            value = context.run(run)
        except BaseException as error:
            loop.call_soon_threadsafe(_settle, done, None, error)
        else:
            loop.call_soon_threadsafe(_settle, done, value, None)

    handler_threads.submit(thread_main)
    return await done


def _settle(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)


def _drain(generator: Generator[Any, None, Any], forward: Callable[[Any], None]) -> Any:
    while True:
        try:
            output = next(generator)
        except StopIteration as completion:
            return completion.value
        forward(output)


def _map_step_result(
    mapper: FlowMapper,
    flow: _RegisteredFlow,
    step_name: str,
    method: InvocationMethod,
    context: InvocationContext,
    returned: Any,
) -> StepResult:
    label = "wait_for" if method is InvocationMethod.WAIT_FOR else "execute"
    try:
        if method is InvocationMethod.WAIT_FOR:
            if not isinstance(returned, Wait):
                raise TypeError("wait_for must return Wait")
            response = pb.InvokeWaitForMethodResponse(
                upsert_attributes=mapper._result_attribute_writes(context),
                upsert_step_exe_locals=list(context.local_writes.values()),
                record_events=context.events,
                publish_to_channel=context.publications,
                delete_from_channel=context.channel_deletions,
            )
            waiting = mapper._map_wait(flow, returned)
            if waiting is not None:
                response.waiting_condition.CopyFrom(waiting)
            return StepResult(wait_for=response)
        if not isinstance(returned, StepDecision):
            raise TypeError("execute must return StepDecision")
        decision, extras = mapper.map_decision(flow, returned)
        return StepResult(
            execute=pb.InvokeExecuteMethodResponse(
                step_decision=decision,
                upsert_attributes=mapper._result_attribute_writes(context),
                record_events=context.events,
                upsert_step_exe_locals=list(context.local_writes.values()),
                publish_to_channel=context.publications,
                delete_from_channel=context.channel_deletions,
            ),
            extras=extras,
        )
    except InvalidStepResultError:
        raise
    except ValueMappingError:
        raise
    except (TypeError, ValueError) as error:
        raise InvalidStepResultError(flow.name, step_name, label, str(error)) from error  # type: ignore[arg-type]


@dataclass
class RpcOutcome:
    """A mapped RPC result."""

    response: pb.InvokeWorkerRPCResponse
    extras: list[MovementExtras]


async def invoke_rpc(
    mapper: FlowMapper,
    flow: _RegisteredFlow,
    request: pb.InvokeWorkerRPCRequest,
    attribute_values: AttributeValues | None = None,
    taken: Mapping[str, pb.ChannelValues] | None = None,
) -> RpcOutcome:
    """Run one RPC handler and map its result (writes, output, next Steps);
    ``taken``: what ``taken_channel_messages`` shows it, per loaded Channel."""
    rpc = flow.rpc(request.rpc_name)
    context = _EngineContext(
        InvocationMethod.RPC,
        flow,
        request.context,
        mapper.values,
        request.attributes,
        channel_infos=dict(request.channel_infos),
        loaded_channel_messages=dict(request.loaded_channel_messages),
        loaded_attribute_map_instances=request.loaded_attribute_map_instances,
        loaded_channel_names=request.loaded_channel_names,
        loaded_channel_map_instances=request.loaded_channel_map_instances,
        attempt_progress=StepAttemptProgress.UNSPECIFIED,
        attribute_values=attribute_values,
        taken=taken,
    )
    arguments: list[object] = [context]
    if rpc.input_codec is not None:
        arguments.append(mapper.values.decode(request.input, rpc.input_codec))
    returned = rpc.method(*arguments)
    if inspect.isawaitable(returned):
        returned = await returned
    extras: list[MovementExtras] = []
    try:
        response = pb.InvokeWorkerRPCResponse(
            upsert_attributes=mapper._result_attribute_writes(context),
            record_events=context.events,
            delete_from_channel=context.channel_deletions,
            publish_to_channel=context.publications,
        )
        if isinstance(returned, RPCResult):
            if rpc.output_codec is None:
                raise TypeError("RPCResult requires an output type")
            response.output.CopyFrom(mapper.values.encode(returned.output, rpc.output_codec))
            if returned.next_steps:
                movements, extras = mapper.map_rpc_movements(flow, returned.next_steps)
                response.step_decision.next_steps.extend(movements)
            response.step_decision.cancel_step_types.extend(
                mapper._map_cancellation_steps(
                    flow, tuple(step_class(s) for s in returned.canceling_steps)
                )
            )
            if not returned.next_steps and not returned.canceling_steps:
                response.ClearField("step_decision")
        elif returned is None and rpc.output_codec is None:
            response.output.CopyFrom(mapper.values.encode_dynamic(None))
        else:
            raise TypeError("RPC must return RPCResult or None")
    except ValueMappingError:
        raise
    except (TypeError, ValueError) as error:
        raise InvalidStepResultError(flow.name, None, "rpc", str(error)) from error
    return RpcOutcome(response=response, extras=extras)


def build_registry(flow: Flow[Any], codec_registry: Any = None) -> Registry:
    """The SDK Registry for one Flow, with async handlers allowed."""
    from dex_agents_ray.engine.sdk._codecs import CachingCodecRegistry

    return Registry([flow], CachingCodecRegistry(codec_registry), allow_async_handlers=True)
