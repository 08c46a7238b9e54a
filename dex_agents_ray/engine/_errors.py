"""Errors of the engine, and how they cross the Ray boundary.

Tree (the engine's own classes also derive from
:class:`dex_agents_ray.errors.DexAgentsError`)::

    RuntimeError
      ├── StaleEpochError            (store) a superseded host tried to commit
      └── EngineError                runtime failure inside the engine
            ├── StoreUnavailableError  the store kept failing past its retry deadline
            ├── HostCallError          a host call failed with a non-SDK error
            ├── HostPassivatedError    the host is passivating the run: call again
            └── HostNotStartedError    no worker process runs the run's host (yet)
    dex.runtime_errors.DexServiceError and subclasses   re-raised as the SDK raises them
      └── InvalidStreamTokenError    a Stream token the engine did not write
    dex.runtime_errors.FlowDefinitionError, ValueMappingError, InvalidStepResultError

Host methods return an envelope instead of raising, because the SDK's service
errors take structured constructor arguments that Ray's exception wrapping
does not carry; the client rebuilds the exact SDK error.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, TypeVar

import grpc
from dex import runtime_errors
from dex.runtime_errors import DexServiceError, ErrorSubStatus

from dex_agents_ray.errors import DexAgentsError

T = TypeVar("T")

Envelope = tuple[str, Any]


class EngineError(DexAgentsError, RuntimeError):
    """A failure inside the engine (not an error of the caller's input)."""


class StoreUnavailableError(EngineError):
    """The store kept failing with transient faults (a database restarting or
    unreachable, a locked or full SQLite file) past its retry deadline.

    Nothing of the failed operation is half-applied: a commit either applied
    once (and the engine knows it) or not at all. Runs resume from the store
    once it answers again.

    Attributes:
        store: Where the store lives (its path, or its DSN without the password).
        operation: The store operation that failed, e.g. ``"commit"``.
        attempts: How many times it was tried.
        waited: How long it was retried for.
    """

    def __init__(self, store: str, operation: str, attempts: int, waited: float, cause: str):
        super().__init__(
            f"store {store} unavailable: {operation} failed {attempts} time(s) over "
            f"{waited:.1f} s; last error: {cause}"
        )
        self.store = store
        self.operation = operation
        self.attempts = attempts
        self.waited = waited
        self.cause_text = cause

    def __reduce__(self) -> Any:
        args = (self.store, self.operation, self.attempts, self.waited, self.cause_text)
        return (StoreUnavailableError, args)


class HostCallError(EngineError):
    """A host call failed with an error that is not one of the SDK's."""


class HostPassivatedError(EngineError):
    """The host is letting the run go (passivation); call again to re-activate it."""


class HostNotStartedError(EngineError):
    """No host of the run runs: its namespace's hosts belong to a worker process
    (``FlowEngine.start(worker_hosts="own")``) and none runs now. A client keeps
    calling while a replacement worker starts; this is raised only past its
    deadline."""


_CODES: dict[str, tuple[str, ErrorSubStatus]] = {
    "FlowAlreadyStartedError": ("ALREADY_EXISTS", ErrorSubStatus.FLOW_ALREADY_STARTED),
    "FlowNotFoundError": ("NOT_FOUND", ErrorSubStatus.FLOW_NOT_EXISTS),
    "FlowNotActiveOrNotFoundError": ("NOT_FOUND", ErrorSubStatus.FLOW_NOT_EXISTS),
    "RpcLockConflictError": ("ABORTED", ErrorSubStatus.UNCATEGORIZED),
    "LongPollTimeoutError": ("DEADLINE_EXCEEDED", ErrorSubStatus.LONG_POLL_TIMEOUT),
    "RequestTimeoutError": ("DEADLINE_EXCEEDED", ErrorSubStatus.REQUEST_TIMEOUT),
    "ChannelMessageNotFoundError": ("NOT_FOUND", ErrorSubStatus.CHANNEL_MESSAGE_NOT_FOUND),
    "InvalidStreamTokenError": ("INVALID_ARGUMENT", ErrorSubStatus.UNCATEGORIZED),
}


class InvalidStreamTokenError(DexServiceError, DexAgentsError):
    """A Stream resume or page token the engine did not write for this run and Stream
    (``INVALID_ARGUMENT``, as the Dex server answers)."""


E = TypeVar("E", bound=DexServiceError)


def service_error(cls: type[E], detail: str, operation: str, flow_id: str | None) -> E:
    """An SDK service error of ``cls`` with the status the Dex server would give it."""
    code, sub_status = _CODES.get(cls.__name__, ("UNKNOWN", ErrorSubStatus.UNCATEGORIZED))
    return cls(grpc.StatusCode[code], sub_status, detail, operation, flow_id)


def worker_error(error: BaseException, detail: str, operation: str, flow_id: str) -> Exception:
    """The SDK's ``WorkerInvocationError`` for a handler that raised ``error``."""
    return runtime_errors.WorkerInvocationError(
        grpc.StatusCode.INTERNAL,
        ErrorSubStatus.WORKER_API_ERROR,
        detail,
        operation,
        flow_id,
        grpc.StatusCode.UNKNOWN,
        type(error).__name__,
        str(error),
    )


def _worker_fields(error: DexServiceError) -> tuple[str | None, str, str] | None:
    if not isinstance(error, runtime_errors.WorkerInvocationError):
        return None
    code = error.worker_code.name if error.worker_code is not None else None
    return (code, error.worker_error_type, error.worker_error_detail)


async def envelope(call: Awaitable[T]) -> Envelope:
    """Run ``call`` and wrap its result or error for the trip back to a client."""
    try:
        return ("ok", await call)
    except HostPassivatedError as error:
        return ("passivated", str(error))
    except StoreUnavailableError as error:
        return (
            "store",
            (error.store, error.operation, error.attempts, error.waited, error.cause_text),
        )
    except DexServiceError as error:
        return (
            "dex",
            (
                type(error).__name__,
                error.code.name,
                error.sub_status.value,
                error.detail,
                error.operation,
                error.flow_id,
                _worker_fields(error),
            ),
        )
    except (
        runtime_errors.FlowDefinitionError,
        runtime_errors.InvalidStepResultError,
        runtime_errors.ValueMappingError,
        KeyError,
        ValueError,
        TypeError,
    ) as error:
        return ("error", (type(error).__name__, str(error)))


_LOCAL_ERRORS: dict[str, type[Exception]] = {
    "KeyError": KeyError,
    "ValueError": ValueError,
    "TypeError": TypeError,
}


def unwrap(result: Envelope) -> Any:
    """Return the value of an envelope, or raise the error it carries."""
    kind, payload = result
    if kind == "ok":
        return payload
    if kind == "passivated":
        raise HostPassivatedError(payload)
    if kind == "store":
        raise StoreUnavailableError(*payload)
    if kind == "dex":
        name, code, sub_status, detail, operation, flow_id, worker = payload
        cls = getattr(runtime_errors, name, DexServiceError)
        args = (grpc.StatusCode[code], ErrorSubStatus(sub_status), detail, operation, flow_id)
        if worker is not None:
            worker_code, worker_type, worker_detail = worker
            raise runtime_errors.WorkerInvocationError(
                *args,
                grpc.StatusCode[worker_code] if worker_code else None,
                worker_type,
                worker_detail,
            )
        raise cls(*args)
    name, message = payload
    local = _LOCAL_ERRORS.get(name)
    if local is not None:
        raise local(message)
    raise HostCallError(f"{name}: {message}")
