"""Step handlers that run on Ray: the shared wire format, and the Ray-task form.

The task acknowledges its start to the run's host before any user code runs
(the host records the start durably, or refuses a superseded attempt), sends
heartbeats and Stream writes back as they happen, and returns the mapped
result. Ray's retries are off: the engine owns attempts.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import threading
from typing import Any

from dex.dexpb import dex_pb2 as pb

from dex_agents_ray.engine._faults import wait_at_gate_before_ack
from dex_agents_ray.engine._options import RayTaskOptions, StepAttemptProgress
from dex_agents_ray.engine.sdk._invoke import (
    AttributeValues,
    FlowMapper,
    MovementExtras,
    StepResult,
    build_registry,
    invoke_step,
)
from dex_agents_ray.engine.sdk._sdk import InvocationMethod, flow_by_type
from dex_agents_ray.errors import DexAgentsError

ABANDONED = "abandoned"
"""What a remote attempt returns when the host refused its start (it ran nothing)."""


class AbandonedAttempt(DexAgentsError):
    """The executor found the attempt superseded (or cancelled) and ran nothing more."""


_definitions: dict[str, tuple[Any, FlowMapper]] = {}
_definitions_lock = threading.Lock()


def definition_key(blob: bytes) -> str:
    return hashlib.sha256(blob).hexdigest()


YOUNG_COLLECTION_THRESHOLD = 10_000
"""Net allocations between two collections of the cyclic collector's youngest
generation in engine processes (CPython's default is 700)."""


def tune_collector() -> None:
    """Set the cyclic garbage collector of an engine process (a host, an executor)
    for its work, and freeze what it has loaded (:func:`freeze_loaded_objects`).

    A turn allocates and frees many short-lived objects (requests, records,
    events): at CPython's default threshold of 700 a loaded shared host ran about
    300 young collections in one ``benchmarks/agent_loop.py`` job at 150 sessions,
    0.15-0.23 s of its 5.3 s of CPU; at 10,000 it ran 5 (0.03 s), as most objects
    are freed by reference counting before the count is reached. Cyclic garbage
    waits a little longer for its collection."""
    gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, *gc.get_threshold()[1:])
    freeze_loaded_objects()


def freeze_loaded_objects() -> None:
    """Take every object this engine process holds now out of the cyclic garbage
    collector's scans (``gc.freeze``): the modules, classes and Flow definitions
    a host or an executor loads live as long as the process, and every full
    collection walked all of them again (in one ``benchmarks/agent_loop.py`` job
    at 150 sessions, 0.2-0.34 s of each shared host's 5 s of CPU, 0.02-0.05 s
    frozen). Objects made later are collected as before; one that is frozen and
    later becomes garbage is still freed by reference counting, only a cycle among
    such objects stays (a one-time, bounded cost of a load)."""
    gc.freeze()


def load_definition(blob: bytes) -> tuple[Any, FlowMapper]:
    """Unpickle a stored Flow (once per process) into its registered form; its
    objects (and the modules its Steps import) are then frozen, see
    :func:`freeze_loaded_objects`."""
    from ray import cloudpickle

    key = definition_key(blob)
    with _definitions_lock:
        cached = _definitions.get(key)
        if cached is None:
            flow, codecs = cloudpickle.loads(blob)
            registry = build_registry(flow, codecs)
            cached = (flow_by_type(registry, flow.get_flow_type()), FlowMapper(registry))
            _definitions[key] = cached
            freeze_loaded_objects()
        return cached


def encode_result(result: StepResult) -> tuple[str, bytes, list[tuple[str | None, str | None]]]:
    extras = [
        (
            None if x.remote is None else x.remote.to_json(),
            None if x.failure_remote is None else x.failure_remote.to_json(),
        )
        for x in result.extras
    ]
    if result.wait_for is not None:
        return "wait_for", result.wait_for.SerializeToString(), extras
    assert result.execute is not None
    return "execute", result.execute.SerializeToString(), extras


def decode_result(encoded: tuple[str, bytes, list[tuple[str | None, str | None]]]) -> StepResult:
    kind, payload, extras = encoded
    movement_extras = [
        MovementExtras(
            remote=None if r is None else RayTaskOptions.from_json(r),
            failure_remote=None if f is None else RayTaskOptions.from_json(f),
        )
        for r, f in extras
    ]
    if kind == "wait_for":
        return StepResult(
            wait_for=pb.InvokeWaitForMethodResponse.FromString(payload), extras=movement_extras
        )
    return StepResult(
        execute=pb.InvokeExecuteMethodResponse.FromString(payload), extras=movement_extras
    )


def encode_frame(frame: pb.StepMethodHeartbeat | pb.StepStreamWrite) -> tuple[str, bytes]:
    """A frame as (``"heartbeat"`` | ``"stream"``, bytes) for the way back to the host."""
    kind = "heartbeat" if isinstance(frame, pb.StepMethodHeartbeat) else "stream"
    return kind, frame.SerializeToString()


def decode_frame(kind: str, payload: bytes) -> pb.StepMethodHeartbeat | pb.StepStreamWrite:
    """The inverse of :func:`encode_frame`."""
    frame: pb.StepMethodHeartbeat | pb.StepStreamWrite
    if kind == "heartbeat":
        frame = pb.StepMethodHeartbeat.FromString(payload)
    else:
        frame = pb.StepStreamWrite.FromString(payload)
    return frame


RemoteRequest = tuple[bytes, dict[str, bytes]]
"""What a host sends for one remote attempt: its serialized request without the
Attributes, and the Attributes' stored bytes by key. The handler parses and
decodes only the Attributes it reads, as one run in the host does."""


def parse_request(
    method: str, request: RemoteRequest
) -> tuple[
    InvocationMethod,
    pb.InvokeExecuteMethodRequest | pb.InvokeWaitForMethodRequest,
    AttributeValues,
]:
    """Decode what the host sent: ``"wait_for"`` or ``"execute"``, its request and
    a lazy view of its Attributes (for ``invoke_step``'s ``attribute_values``)."""
    payload, attributes = request
    values = AttributeValues(attributes, {})
    if method == "wait_for":
        return InvocationMethod.WAIT_FOR, pb.InvokeWaitForMethodRequest.FromString(payload), values
    return InvocationMethod.EXECUTE, pb.InvokeExecuteMethodRequest.FromString(payload), values


def run_remote_step(
    blob: bytes,
    method: str,
    request: RemoteRequest,
    progress: str,
    host: Any,
    flow_id: str,
    exec_id: str,
    attempt: int,
) -> Any:
    """The body of a remote Step task (see the module docstring)."""
    import ray

    wait_at_gate_before_ack()
    if not ray.get(host.ack_remote_start.remote(flow_id, exec_id, attempt)):
        return ABANDONED
    flow, mapper = load_definition(blob)
    invocation, parsed, values = parse_request(method, request)
    sent: list[Any] = []

    def sink(frame: pb.StepMethodHeartbeat | pb.StepStreamWrite) -> None:
        sent.append(host.remote_frame.remote(flow_id, exec_id, attempt, *encode_frame(frame)))

    try:
        result = _task_loop().run_until_complete(
            invoke_step(
                mapper,
                flow,
                invocation,
                parsed,
                attempt_progress=StepAttemptProgress(progress),
                is_active=lambda: True,
                sink=sink,
                attribute_values=values,
            )
        )
    finally:
        if sent:
            ray.get(sent)
    return encode_result(result)


_loop: asyncio.AbstractEventLoop | None = None


def _task_loop() -> asyncio.AbstractEventLoop:
    """One event loop per worker process, reused by every Step task it runs
    (``asyncio.run`` would build and tear one down per task)."""
    global _loop
    if _loop is None or _loop.is_closed():
        _loop = asyncio.new_event_loop()
    return _loop


_remote_function: Any = None


def remote_step_function() -> Any:
    """The ``ray.remote`` wrapper of :func:`run_remote_step`, built on first use."""
    global _remote_function
    if _remote_function is None:
        import ray

        _remote_function = ray.remote(max_retries=0)(run_remote_step)
    return _remote_function
