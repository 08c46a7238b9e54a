"""The tool call IDs of a Step-mode framework adapter, shared by the adapters.

A framework's tool call ID may contain ``/`` or repeat within a turn, which the
session refuses (the spec's rule 3), so an adapter maps each to a session ID and
keeps the framework's on the record (``runner_tool_state``, JSON with ``"id"``
and whatever else the adapter needs in the tool Step).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from dex_agents_ray.session import AgentToolCall, AgentTurnContext, DeferredToolCall

__all__ = ["FrameworkCallIds"]


class FrameworkCallIds:
    """Maps framework tool call IDs to the session's and back, for one turn.

    Example (in ``run_model_step``)::

        ids = FrameworkCallIds(turn)
        call = DeferredToolCall(tool_call_id=ids.new_session_id(framework_id),
                                runner_tool_state=FrameworkCallIds.state(framework_id),
                                ...)
    """

    def __init__(self, turn: AgentTurnContext) -> None:
        self._turn = turn
        self._used = set(turn.tool_calls)

    def new_session_id(self, framework_id: str) -> str:
        """A session ID for a new call: ``framework_id`` without ``/``, made unique
        within the turn with ``-2``, ``-3`` … when it repeats."""
        base = framework_id.replace("/", "_") or "call"
        candidate, n = base, 1
        while candidate in self._used:
            n += 1
            candidate = f"{base}-{n}"
        self._used.add(candidate)
        return candidate

    @staticmethod
    def state(framework_id: str, **extra: Any) -> str:
        """The ``runner_tool_state`` keeping ``framework_id`` (and ``extra``)."""
        return json.dumps({"id": framework_id, **extra}, separators=(",", ":"))

    @staticmethod
    def read_state(record: AgentToolCall) -> dict[str, Any]:
        """What :meth:`state` stored on ``record``; ``{"id": <session ID>}`` without it."""
        if record.runner_tool_state is None:
            return {"id": record.tool_call_id}
        value = json.loads(record.runner_tool_state)
        if not isinstance(value, dict) or "id" not in value:
            raise ValueError(f"unreadable runner_tool_state of {record.tool_call_id}")
        return value

    def record(self, framework_id: str) -> AgentToolCall | None:
        """The turn's latest record of the framework call ``framework_id``."""
        found: AgentToolCall | None = None
        for record in self._turn.tool_calls.values():
            if self.read_state(record)["id"] == framework_id and (
                found is None or record.deferral_order > found.deferral_order
            ):
                found = record
        return found

    @classmethod
    def session_ids(cls, calls: Iterable[AgentToolCall | DeferredToolCall]) -> dict[str, str]:
        """Framework ID -> session ID of ``calls`` whose IDs were mapped (a later call
        of a repeated framework ID wins)."""
        ordered = sorted(calls, key=lambda call: getattr(call, "deferral_order", 0))
        ids: dict[str, str] = {}
        for call in ordered:
            if call.runner_tool_state is None:
                continue
            framework_id = str(json.loads(call.runner_tool_state)["id"])
            if framework_id != call.tool_call_id:
                ids[framework_id] = call.tool_call_id
        return ids
