"""The Connector SDK's side of a connector tool, described structurally.

The Connector SDK (``dex-connectors-sdk``) cannot be installed here, so the
source depends on the shapes below rather than on the SDK's classes: an
operation with ``run_query`` or ``run_mutation``, the ``Call`` it runs with,
the branch it selects, its ``RetryError``, and the single-dispatch fence's
markers. Any object with these attributes works, the SDK's included; nothing
here imports it. ``docs/connectors.md`` says how each maps to the SDK, and that
the mapping is unverified until the SDK can be installed.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, TypeAlias, runtime_checkable

import dex

from dex_agents_ray.errors import DexAgentsError

if TYPE_CHECKING:
    from dex_agents_ray.connectors._context import ConnectorStepContext

__all__ = [
    "FENCE_MARKER_KEY",
    "FENCE_MARKER_VERSION",
    "Call",
    "ConnectorBranch",
    "ConnectorMutation",
    "ConnectorOperation",
    "ConnectorQuery",
    "FenceMarker",
    "FenceState",
    "MalformedFenceMarkerError",
    "RetryError",
    "SelectedBranch",
    "is_retry_error",
    "raise_dex_retry",
    "read_fence_marker",
]


@dataclass(frozen=True, kw_only=True)
class Call:
    """One run of a connector operation, built by the source in the tool Step."""

    call_id: str
    """``derive_call_id(flow_id, step_execution_id, operation)``: the same on every
    attempt of one tool call, so a retry keeps it and the idempotency key derived
    from it."""
    reference: Any
    """The connection reference given to ``connector_tool`` (opaque to the source;
    the Connector SDK resolves the connection's credentials from it)."""
    input: Any
    """The arguments, checked against ``inputSchema`` and decoded into ``inputType``."""


@runtime_checkable
class SelectedBranch(Protocol):
    """The branch an operation run selected: a success branch with its value, or
    another branch with a kind and a message."""

    @property
    def branch(self) -> str:
        """The branch name, as the manifest's ``branches`` list it."""
        ...

    @property
    def value(self) -> Any:
        """The success branch's value; ``None`` for other branches."""
        ...

    @property
    def kind(self) -> str | None:
        """What went wrong, for a branch other than a success branch; else ``None``."""
        ...

    @property
    def message(self) -> str | None:
        """A message safe to show the model, for other branches; else ``None``."""
        ...


@dataclass(frozen=True, kw_only=True)
class ConnectorBranch:
    """A plain :class:`SelectedBranch`, for operations without a type of their own."""

    branch: str
    """The branch name."""
    value: Any = None
    """The success branch's value; ``None`` for other branches."""
    kind: str | None = None
    """What went wrong; ``None`` for a success branch."""
    message: str | None = None
    """A message safe to show the model; ``None`` for a success branch."""


@runtime_checkable
class ConnectorQuery(Protocol):
    """A Connector operation that reads (``kind: query``): ``run_query`` takes no effect.

    Example::

        class GetBalance:
            connector_id = "ledger"
            operation_name = "getBalance"

            async def run_query(self, call: Call, context: ConnectorStepContext):
                return ConnectorBranch(branch="found", value={"balance": 10})
    """

    @property
    def connector_id(self) -> str:
        """The manifest's ``metadata.name``."""
        ...

    @property
    def operation_name(self) -> str:
        """The operation's ``name`` in the manifest's ``spec.operations`` (``getBalance``)."""
        ...

    def run_query(
        self, call: Call, context: ConnectorStepContext
    ) -> Awaitable[SelectedBranch] | SelectedBranch:
        """Run the query once and select a branch."""
        ...


@runtime_checkable
class ConnectorMutation(Protocol):
    """A Connector operation that writes: one whose manifest entry says ``kind: mutation``.

    ``run_mutation`` may use the single-dispatch fence through the context's
    heartbeats (see :class:`FenceMarker`).
    """

    @property
    def connector_id(self) -> str:
        """The manifest's ``metadata.name``."""
        ...

    @property
    def operation_name(self) -> str:
        """The operation's ``name`` in the manifest's ``spec.operations`` (``createRefund``)."""
        ...

    def idempotency_key(self, call: Call) -> str:
        """The key the provider deduplicates the write by, derived from ``call.call_id``."""
        ...

    def run_mutation(
        self, call: Call, context: ConnectorStepContext
    ) -> Awaitable[SelectedBranch] | SelectedBranch:
        """Run the mutation once and select a branch."""
        ...


ConnectorOperation: TypeAlias = ConnectorQuery | ConnectorMutation
"""A Query or a Mutation."""


class RetryError(DexAgentsError):
    """A connector asking to be run again later, as the Connector SDK's ``RetryError``.

    The source recognizes any exception whose class, or a base of it, is named
    ``RetryError`` (so the SDK's own is recognized without importing it), and
    reads an optional ``retry_after`` (a ``timedelta`` or seconds).
    """

    def __init__(self, message: str, *, retry_after: timedelta | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild_retry_error, (type(self), self.message, self.retry_after)


def _rebuild_retry_error(
    cls: type[RetryError], message: str, retry_after: timedelta | None
) -> RetryError:
    return cls(message, retry_after=retry_after)


def is_retry_error(error: BaseException) -> bool:
    """Whether ``error`` is a connector ``RetryError`` (by its class's name)."""
    return any(cls.__name__ == "RetryError" for cls in type(error).__mro__)


def _retry_seconds(error: BaseException) -> int | None:
    after = getattr(error, "retry_after", None)
    if isinstance(after, timedelta):
        seconds = after.total_seconds()
    elif isinstance(after, int | float) and not isinstance(after, bool):
        seconds = float(after)
    else:
        return None
    if math.isnan(seconds) or seconds <= 0:
        return None
    return min(math.ceil(seconds), 2**31 - 1) if math.isfinite(seconds) else 2**31 - 1


def raise_dex_retry(error: BaseException) -> NoReturn:
    """Raise a connector ``RetryError`` as a tool Step failure, so the Step's retry
    policy applies; its ``retry_after`` becomes ``dex.retry_after``'s delay.

    Raises:
        RetryAfterError: ``error`` asked for a delay (rounded up to whole seconds).
        BaseException: ``error`` itself otherwise.
    """
    seconds = _retry_seconds(error)
    if seconds is not None:
        raise dex.retry_after(seconds, error) from error
    raise error


# -- the single-dispatch fence's markers -------------------------------------------------

FENCE_MARKER_KEY = "dexConnectorFence"
"""The key that makes a heartbeat value a fence marker; its value is the version."""
FENCE_MARKER_VERSION = 1
"""The marker version this source reads."""


class FenceState(StrEnum):
    """What a fence marker records about one attempt's request."""

    NOT_SENT = "notSent"
    """Nothing was sent in this attempt yet."""
    CLAIMED = "claimed"
    """The fence claimed the send: the request may be on its way."""
    PROVIDER_ID = "providerId"
    """The provider answered with its ID for the write: it was sent."""
    CAN_RESEND = "canResend"
    """After a claim, the request provably never reached the provider."""


class MalformedFenceMarkerError(DexAgentsError, ValueError):
    """A value carries the fence key but is not a marker this source reads."""


@dataclass(frozen=True, kw_only=True)
class FenceMarker:
    """One marker of the single-dispatch fence, saved as a heartbeat value.

    Wire form (a JSON object, the heartbeat value itself)::

        {"dexConnectorFence": 1, "callId": "call_...", "attempt": 1,
         "state": "claimed", "providerId": null}
    """

    call_id: str
    """The Call ID the marker is bound to."""
    attempt: int
    """The one-based attempt that saved it."""
    state: FenceState
    """What it records."""
    provider_id: str | None = None
    """The provider's ID for the write, with ``PROVIDER_ID``; else ``None``."""

    def to_value(self) -> dict[str, Any]:
        """The marker as the heartbeat value an operation saves."""
        return {
            FENCE_MARKER_KEY: FENCE_MARKER_VERSION,
            "callId": self.call_id,
            "attempt": self.attempt,
            "state": self.state.value,
            "providerId": self.provider_id,
        }


def read_fence_marker(value: object) -> FenceMarker | None:
    """The marker ``value`` holds; ``None`` when it is not a fence marker at all.

    Raises:
        MalformedFenceMarkerError: ``value`` has the fence key but is not a marker
            of a version and shape this source reads.
    """
    if not isinstance(value, Mapping) or FENCE_MARKER_KEY not in value:
        return None
    version = value.get(FENCE_MARKER_KEY)
    if version != FENCE_MARKER_VERSION or isinstance(version, bool):
        raise MalformedFenceMarkerError(f"fence marker version {version!r} is not readable")
    call_id, attempt, state = value.get("callId"), value.get("attempt"), value.get("state")
    provider_id = value.get("providerId")
    if not isinstance(call_id, str) or not call_id:
        raise MalformedFenceMarkerError("a fence marker needs a non-empty callId")
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
        raise MalformedFenceMarkerError("a fence marker needs a positive attempt")
    try:
        fence_state = FenceState(str(state))
    except ValueError as error:
        raise MalformedFenceMarkerError(f"unknown fence state {state!r}") from error
    if provider_id is not None and not isinstance(provider_id, str):
        raise MalformedFenceMarkerError("a fence marker's providerId must be a string")
    if (fence_state is FenceState.PROVIDER_ID) != bool(provider_id):
        raise MalformedFenceMarkerError("providerId comes with the providerId state only")
    return FenceMarker(call_id=call_id, attempt=attempt, state=fence_state, provider_id=provider_id)
