"""What this package would take from the Connector SDK, which is not installable here.

It imports nothing from dex-agents-ray: the agent side must recognize these
objects by their shape, as it would the SDK's own.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

FENCE_KEY = "dexConnectorFence"


class RetryError(Exception):
    """The provider asks to be called again later."""

    def __init__(self, message: str, *, retry_after: timedelta | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after

    def __reduce__(self) -> tuple[Any, ...]:
        return _retry_error, (self.message, self.retry_after)


def _retry_error(message: str, retry_after: timedelta | None) -> RetryError:
    return RetryError(message, retry_after=retry_after)


@dataclass(frozen=True)
class Branch:
    """The branch an operation run selected."""

    branch: str
    value: Any = None
    kind: str | None = None
    message: str | None = None


class Fence:
    """The single-dispatch fence: one marker per step, saved as a heartbeat value."""

    def __init__(self, call: Any, context: Any) -> None:
        self.call = call
        self.context = context

    def _marker(self, state: str, provider_id: str | None = None) -> dict[str, Any]:
        return {
            FENCE_KEY: 1,
            "callId": self.call.call_id,
            "attempt": self.context.attempt,
            "state": state,
            "providerId": provider_id,
        }

    async def begin(self) -> bool:
        """Whether this attempt may send: a first attempt, or a retry after an attempt
        of this call that provably sent nothing."""
        if self.context.attempt > 1:
            earlier = self.context.get_last_heartbeat_value()
            allowed = (
                isinstance(earlier, dict)
                and earlier.get(FENCE_KEY) == 1
                and earlier.get("callId") == self.call.call_id
                and earlier.get("state") in ("notSent", "canResend")
            )
            if not allowed:
                return False
        await self.context.heartbeat(self._marker("notSent"))
        return True

    async def claim(self) -> None:
        await self.context.heartbeat(self._marker("claimed"))

    async def record_provider_id(self, provider_id: str) -> None:
        await self.context.heartbeat(self._marker("providerId", provider_id))

    async def record_can_resend(self) -> None:
        await self.context.heartbeat(self._marker("canResend"))


@dataclass(frozen=True)
class Response:
    status: int
    headers: dict[str, str]
    body: dict[str, Any]


def _send(method: str, url: str, body: Any, headers: dict[str, str]) -> Response:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json", **headers}
    )
    try:
        with urllib.request.urlopen(request, timeout=300) as answer:
            return Response(answer.status, dict(answer.headers), json.loads(answer.read() or b"{}"))
    except urllib.error.HTTPError as error:
        return Response(error.code, dict(error.headers), json.loads(error.read() or b"{}"))


async def send(method: str, url: str, body: Any = None, **headers: str) -> Response:
    """One HTTP request, off the event loop."""
    return await asyncio.to_thread(_send, method, url, body, headers)
