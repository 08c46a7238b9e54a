"""``ConnectorStepContext`` and the fence observation behind it.

The context stores each heartbeat value as the tool Step's text checkpoint (its
compact, sorted JSON), so the session's background heartbeats repeat the last
one and the next attempt reads it back. It exposes only what the fence uses:
the attempt, ``heartbeat``, ``has_last_heartbeat_value`` and
``get_last_heartbeat_value`` (the names of Dex's own Step context).

The source cannot see inside the fence, so it reads the markers the attempt
saves and the checkpoint it reads (:class:`FenceObservation`):

- a claim, or a provider ID, of this call and attempt means the request may
  have been sent; only a later ``canResend`` of the same call and attempt, after
  a claim without a provider ID, lowers that;
- a value that is not a fence marker never changes anything;
- a malformed marker, or one bound to another call or attempt, means the
  request may have been sent;
- on a retry, reading a checkpoint that is missing, not a marker, malformed,
  another call's, or one that does not allow this attempt a send (anything but
  ``notSent`` or ``canResend`` of this call from an earlier attempt) means the
  request may have been sent, whatever this attempt does later.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from dex import CodecRegistry, Value, WireKind

from dex_agents_ray.connectors._protocol import (
    FenceMarker,
    FenceState,
    MalformedFenceMarkerError,
    read_fence_marker,
)
from dex_agents_ray.connectors._values import compact_json

__all__ = ["ConnectorStepContext", "FenceObservation"]

_SEND_ALLOWED = frozenset({FenceState.NOT_SENT, FenceState.CAN_RESEND})
_CODECS = CodecRegistry()


class FenceObservation:
    """What one attempt's fence markers and checkpoint read say about its request."""

    def __init__(self, *, call_id: str, attempt: int, previous: str | None) -> None:
        self.call_id = call_id
        self.attempt = attempt
        self._previous = previous
        self.used = False
        """Whether the attempt read its checkpoint or saved a fence marker."""
        self._earlier_may_have_sent = False
        self._claim_open = False
        self._provider_id = False
        self._saved_not_sent = False
        self._read = False

    @property
    def may_have_sent(self) -> bool:
        """Whether the request may have reached the provider."""
        return self._earlier_may_have_sent or self._provider_id or self._claim_open

    @property
    def proves_not_sent(self) -> bool:
        """Whether this attempt saved ``notSent`` or ``canResend`` and nothing since
        (nor any checkpoint it read) says the request may have been sent."""
        return self._saved_not_sent and not self.may_have_sent

    def saved(self, value: object) -> None:
        """The attempt saved ``value`` as a heartbeat value."""
        try:
            marker = read_fence_marker(value)
        except MalformedFenceMarkerError:
            self.used = True
            self._earlier_may_have_sent = True
            return
        if marker is None:
            return  # the operation's own checkpoint: it never lowers anything
        self.used = True
        if marker.call_id != self.call_id or marker.attempt != self.attempt:
            self._earlier_may_have_sent = True
            return
        self._observe(marker)

    def _observe(self, marker: FenceMarker) -> None:
        if marker.state is FenceState.CLAIMED:
            self._claim_open = True
        elif marker.state is FenceState.PROVIDER_ID:
            self._provider_id = True
        elif marker.state is FenceState.CAN_RESEND:
            # As the fence's own record_can_resend: it clears a claim, never a provider ID.
            self._claim_open = False
            self._saved_not_sent = True
        else:
            self._saved_not_sent = True

    def read(self) -> None:
        """The attempt read its earlier checkpoint."""
        self.used = True
        if self._read:
            return
        self._read = True
        if self._previous is None and self.attempt == 1:
            return  # a first attempt has no earlier checkpoint to find
        if not self._allows_send(self._previous):
            self._earlier_may_have_sent = True

    def _allows_send(self, previous: str | None) -> bool:
        if previous is None:
            return False
        try:
            marker = read_fence_marker(json.loads(previous))
        except (ValueError, MalformedFenceMarkerError):
            return False
        return (
            marker is not None
            and marker.call_id == self.call_id
            and marker.attempt < self.attempt
            and marker.state in _SEND_ALLOWED
        )


class ConnectorStepContext:
    """The tool Step as a connector operation sees it: its attempt and heartbeats.

    Built by :class:`ConnectorToolSource` for one attempt. Safe to use from the
    operation's coroutine only (not from other threads).

    Example::

        async def run_mutation(self, call, context):
            earlier = context.get_last_heartbeat_value() if context.attempt > 1 else None
            await context.heartbeat({"dexConnectorFence": 1, "callId": call.call_id,
                                     "attempt": context.attempt, "state": "claimed",
                                     "providerId": None})
    """

    def __init__(
        self,
        *,
        attempt: int,
        previous_checkpoint: str | None,
        save_checkpoint: Callable[[str], Awaitable[None]],
        beat: Callable[[], Awaitable[None]],
        observation: FenceObservation,
    ) -> None:
        self._attempt = attempt
        self._previous = previous_checkpoint
        self._save = save_checkpoint
        self._beat = beat
        self._observation = observation

    def __repr__(self) -> str:
        return f"ConnectorStepContext(attempt={self._attempt})"

    @property
    def attempt(self) -> int:
        """The tool Step's one-based attempt."""
        return self._attempt

    async def heartbeat(self, value: Any = None) -> None:
        """Record liveness; with ``value``, store it as the Step's checkpoint, which
        every later heartbeat of the attempt repeats and the next attempt reads.

        Raises:
            TypeError: ``value`` is not JSON data (dataclasses and enums are).
        """
        if value is None:
            await self._beat()
            return
        text = compact_json(value)
        self._observation.saved(json.loads(text))
        await self._save(text)

    def has_last_heartbeat_value(self) -> bool:
        """Whether an earlier attempt saved a heartbeat value."""
        self._observation.read()
        return self._previous is not None

    def get_last_heartbeat_value(self, type_hint: Any = object) -> Any:
        """The value an earlier attempt saved, decoded into ``type_hint`` with the Dex
        codec (``object`` gives the JSON data); ``None`` when there is none.

        A checkpoint that is not JSON (one another writer saved) comes back as text.

        Raises:
            TypeError, ValueError: The value does not decode into ``type_hint``.
        """
        self._observation.read()
        text = self._previous
        if text is None:
            return None
        try:
            data = json.loads(text)
        except ValueError:
            return text
        if type_hint in (object, Any):
            return data
        codec = _CODECS.resolve(type_hint)
        if codec.wire_kind is WireKind.JSON:
            return codec.decode(Value(WireKind.JSON, text))
        return codec.decode(Value(codec.wire_kind, data))
