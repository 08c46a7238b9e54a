"""Scripted Connector operations for the connector tool tests.

``pick`` operations select the branch their arguments name; ``replayFence``
first replays fence actions on its Step context (``{"read": true}``,
``{"has": true}``, ``{"save": value}`` with ``"$callId"`` and ``"$attempt"``
filled in). With ``retry`` they raise this package's ``RetryError`` instead.
It imports nothing from dex-agents-ray.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["PickInput", "ReplayInput", "RetryError", "mutation", "query", "reference"]

reference = {"connection": "lab"}


class RetryError(Exception):
    """Try again later (this package's own class, recognized by its name)."""


@dataclass(frozen=True)
class PickInput:
    branch: str
    retry: bool


@dataclass(frozen=True)
class ReplayInput:
    actions: list[dict[str, Any]]
    branch: str
    retry: bool


@dataclass(frozen=True)
class Selected:
    branch: str
    value: Any = None
    kind: str | None = None
    message: str | None = None


def _fill(value: Any, call: Any, context: Any) -> Any:
    if value == "$callId":
        return call.call_id
    if value == "$attempt":
        return context.attempt
    if isinstance(value, dict):
        return {key: _fill(item, call, context) for key, item in value.items()}
    if isinstance(value, list):
        return [_fill(item, call, context) for item in value]
    return value


async def _select(call: Any, context: Any) -> Selected:
    for action in getattr(call.input, "actions", ()):
        if action.get("read"):
            context.get_last_heartbeat_value()
        if action.get("has"):
            context.has_last_heartbeat_value()
        if "save" in action:
            await context.heartbeat(_fill(action["save"], call, context))
    if call.input.retry:
        raise RetryError("scripted retry")
    branch = call.input.branch
    if branch in ("ok", "done"):
        return Selected(branch, value={"branch": branch, "call_id": call.call_id})
    return Selected(branch, kind="scripted", message=f"picked {branch}")


class _Operation:
    connector_id = "lab"

    def __init__(self, operation_name: str) -> None:
        self.operation_name = operation_name

    def __repr__(self) -> str:
        return f"lab.{self.operation_name}()"


class _Query(_Operation):
    async def run_query(self, call: Any, context: Any) -> Selected:
        return await _select(call, context)


class _Mutation(_Operation):
    def idempotency_key(self, call: Any) -> str:
        return f"lab:{call.call_id}"

    async def run_mutation(self, call: Any, context: Any) -> Selected:
        return await _select(call, context)


def query(operation_name: str) -> _Query:
    return _Query(operation_name)


def mutation(operation_name: str) -> _Mutation:
    return _Mutation(operation_name)
