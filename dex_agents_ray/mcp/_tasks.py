"""MCP tasks (``io.modelcontextprotocol/tasks``) as tool tasks, and tasks polled in the Step.

A Streamable HTTP server's task becomes a session tool task: ``PollToolTask``
calls :func:`poll_task` on a Timer, once per execution, with a new connection
each time. A stdio task ends with its server process, so :func:`wait_in_step`
polls it on the call's own connection, up to ``task_wait_timeout``.

The poll's state travels in the record's ``input_continuation`` as JSON
(:class:`TaskState`): the last status seen (for ``mcp.task_status`` events) and
the input request last asked or answered, with the time its answer was sent.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from dex_agents_ray.mcp._content import finish_result, raise_for_error
from dex_agents_ray.mcp._errors import McpToolCallInterruptedError
from dex_agents_ray.mcp._inputs import (
    answer_response,
    input_question,
    request_fingerprint,
    unsupported_input_message,
)
from dex_agents_ray.media import MediaStore
from dex_agents_ray.session import (
    AgentEventType,
    AgentEventWriter,
    ToolEffect,
    ToolExecutionError,
    ToolExecutionResult,
    ToolInputRequested,
    ToolOutcomeUnknownError,
    ToolTaskPending,
    ToolTaskPoll,
    ToolTaskPollOutcome,
)

if TYPE_CHECKING:
    from dex_agents_ray.mcp._connection import ConnectionSettings, McpConnection

__all__ = [
    "ANSWER_SETTLE_SECONDS",
    "MAX_POLL_INTERVAL_SECONDS",
    "TaskState",
    "first_poll_interval",
    "poll_task",
    "wait_in_step",
]

_LOG = logging.getLogger("dex_agents_ray.mcp")

MAX_POLL_INTERVAL_SECONDS = 60
"""Doubling stops here; a longer ``pollIntervalMs`` from the server still wins."""
ANSWER_SETTLE_SECONDS = 10.0
"""After ``tasks/update``, the answered request still listed reads as working this long."""

_TASK_NOT_FOUND = -32602
_TERMINAL = frozenset({"completed", "failed", "cancelled"})


@dataclass(frozen=True, kw_only=True)
class TaskState:
    """What one poll leaves for the next, as ``input_continuation`` JSON."""

    status: str | None = None
    """The task's status at the last poll."""
    key: str | None = None
    """The input request asked (or answered) last; ``None`` for none."""
    fingerprint: str | None = None
    """Its fingerprint, so an answer only reaches that same request."""
    field: str | None = None
    """Its schema's single property."""
    kind: str | None = None
    """``string`` or ``boolean``."""
    sent_at: float | None = None
    """Wall-clock time ``tasks/update`` sent its answer; ``None`` until sent."""
    sent_action: str | None = None
    """``accept``, ``decline`` or ``cancel``: what was sent; ``None`` until sent."""

    def encode(self) -> str:
        return json.dumps({k: v for k, v in asdict(self).items() if v is not None}, sort_keys=True)

    @classmethod
    def decode(cls, text: str | None) -> TaskState:
        if not text:
            return cls()
        try:
            value = json.loads(text)
        except ValueError:
            return cls()
        if not isinstance(value, dict):
            return cls()
        known = {k: v for k, v in value.items() if k in cls.__dataclass_fields__}
        return cls(**known)


def _server_interval(task: Mapping[str, Any]) -> int | None:
    value = task.get("pollIntervalMs")
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return None
    return max(1, math.ceil(value / 1000))


def _step_interval(task: Mapping[str, Any]) -> float:
    """Seconds between polls in the Step: the server's ``pollIntervalMs`` (default 1 s),
    from 50 ms to a minute."""
    value = task.get("pollIntervalMs")
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return 1.0
    return min(max(value / 1000, 0.05), 60.0)


def first_poll_interval(handle: Mapping[str, Any]) -> int:
    """Seconds to the first poll: the server's ``pollIntervalMs`` rounded up, else 1."""
    return _server_interval(handle) or 1


def next_poll_interval(task: Mapping[str, Any], previous: int | None) -> int:
    """The server's interval or, when that is shorter, double the previous, up to a minute."""
    doubled = min(2 * (previous or 1), MAX_POLL_INTERVAL_SECONDS)
    return max(_server_interval(task) or 1, doubled)


def _effect_error(effect: ToolEffect | None, message: str) -> Exception:
    if effect is ToolEffect.READ:
        return ToolExecutionError(message)
    if effect is None:
        return McpToolCallInterruptedError(message)
    return ToolOutcomeUnknownError(message)


async def _get(
    connection: McpConnection, task_id: str, settings: ConnectionSettings, effect: ToolEffect | None
) -> dict[str, Any]:
    from dex_agents_ray.mcp._connection import MCPError

    try:
        task = await connection.get_task(task_id, settings.connection_timeout)
    except MCPError as error:
        if error.code == _TASK_NOT_FOUND:
            raise _effect_error(
                effect, f"the MCP server no longer knows task {task_id}: {error.message}"
            ) from error
        raise
    if not isinstance(task.get("status"), str):
        raise RuntimeError(f"the MCP server's tasks/get answer for {task_id} has no status")
    return task


async def cancel_quietly(
    connection: McpConnection, task_id: str, settings: ConnectionSettings
) -> None:
    """``tasks/cancel``, best effort: any failure is logged."""
    try:
        await connection.cancel_task(task_id, settings.connection_timeout)
    except Exception as error:  # best effort by design
        _LOG.warning("cancelling MCP task %s failed: %r", task_id, error)


async def _terminal(
    task: Mapping[str, Any], *, media_store: MediaStore | None, where: str
) -> ToolExecutionResult:
    status = task["status"]
    if status == "completed":
        result = task.get("result")
        if not isinstance(result, Mapping):
            raise ToolExecutionError(
                f"the MCP task {task.get('taskId')} completed without a result"
            )
        return await finish_result(result, media_store=media_store, where=where)
    message = task.get("statusMessage")
    detail = f": {message}" if isinstance(message, str) and message else ""
    if status == "failed":
        error = task.get("error")
        if isinstance(error, Mapping):
            code, text = error.get("code"), error.get("message")
            raise_for_error(
                int(code) if isinstance(code, int) else 0, str(text), error.get("data"), where
            )
            if not detail:
                detail = f": MCP error {code}: {text}"
        raise ToolExecutionError(f"the MCP task failed{detail}")
    raise ToolExecutionError(f"the MCP task was cancelled{detail}")


def _write_status(
    events: AgentEventWriter, record_fields: Mapping[str, Any], task: Mapping[str, Any]
) -> None:
    message = task.get("statusMessage")
    events.write_event(
        AgentEventType.MCP_TASK_STATUS,
        {**record_fields, "status": task["status"], "status_message": message},
    )


@dataclass(frozen=True, kw_only=True)
class PollContext:
    """What one ``PollToolTask`` poll needs besides the connection."""

    settings: ConnectionSettings
    media_store: MediaStore | None
    where: str
    wall_clock: Callable[[], float] = time.time


async def poll_task(
    connection: McpConnection, poll: ToolTaskPoll, context: PollContext
) -> ToolTaskPollOutcome:
    """Poll a task once: deliver a resolved question, then read the task.

    Raises:
        ToolExecutionError: The task failed, was cancelled, or asks for input the
            session cannot give (it is cancelled then).
        ToolOutcomeUnknownError: The server no longer knows a write's task, or its
            result says ``outcome: unknown``.
        Exception: A poll failure (unreachable server, an undeliverable decline).
    """
    record = poll.tool_call
    task_id = record.task_id or ""
    state = TaskState.decode(record.input_continuation)
    fields = {
        "tool_call_id": record.tool_call_id,
        "tool_name": record.tool_name,
        "task_id": task_id,
    }
    task: dict[str, Any] | None = None
    answer = poll.pending_answer
    if answer is not None and state.key is not None and poll.attempt == 1:
        # Only a first attempt sends: a retry cannot tell whether it was sent, so
        # it reads the task and asks again rather than answer a later request.
        await poll.heartbeat()
        task = await _get(connection, task_id, context.settings, record.effect)
        requests = task.get("inputRequests")
        listed = requests.get(state.key) if isinstance(requests, Mapping) else None
        if task["status"] == "input_required" and listed is not None:
            if request_fingerprint(listed) == state.fingerprint:
                return await _deliver(connection, poll, context, state, task, fields)
    if task is None:
        task = await _get(connection, task_id, context.settings, record.effect)
    if task["status"] != state.status:
        _write_status(poll.events, fields, task)
    return await _read_task(connection, poll, context, state, task)


async def _deliver(
    connection: McpConnection,
    poll: ToolTaskPoll,
    context: PollContext,
    state: TaskState,
    task: dict[str, Any],
    fields: Mapping[str, Any],
) -> ToolTaskPollOutcome:
    assert poll.pending_answer is not None and state.key is not None
    response = answer_response(poll.pending_answer, state.field or "value", state.kind or "string")
    task_id = poll.tool_call.task_id or ""
    try:
        await connection.update_task(
            task_id, {state.key: response}, context.settings.connection_timeout
        )
    except Exception as error:
        if response["action"] == "decline":
            await cancel_quietly(connection, task_id, context.settings)
            raise RuntimeError(
                f"the MCP task {task_id} could not take the declined answer, so it was cancelled"
            ) from error
        raise
    if task["status"] != state.status:
        _write_status(poll.events, fields, task)
    sent = replace(
        state, status=task["status"], sent_at=context.wall_clock(), sent_action=response["action"]
    )
    return ToolTaskPending(poll_interval_seconds=1, continuation=sent.encode())


async def _read_task(
    connection: McpConnection,
    poll: ToolTaskPoll,
    context: PollContext,
    state: TaskState,
    task: dict[str, Any],
) -> ToolTaskPollOutcome:
    record = poll.tool_call
    task_id = record.task_id or ""
    status = task["status"]
    if status in _TERMINAL:
        if status == "cancelled" and state.sent_action == "decline":
            raise RuntimeError(
                f"the MCP task {task_id} was cancelled after its question was declined"
            )
        return await _terminal(task, media_store=context.media_store, where=context.where)
    if status == "input_required":
        requests = task.get("inputRequests")
        if state.sent_at is not None and state.key is not None and isinstance(requests, Mapping):
            listed = requests.get(state.key)
            settling = context.wall_clock() - state.sent_at < ANSWER_SETTLE_SECONDS
            if settling and listed is not None and request_fingerprint(listed) == state.fingerprint:
                # The task may not have taken the answer in yet: read it as working.
                return ToolTaskPending(
                    poll_interval_seconds=1, continuation=replace(state, status=status).encode()
                )
        question = input_question(requests)
        if question is None:
            await cancel_quietly(connection, task_id, context.settings)
            raise ToolExecutionError(unsupported_input_message(requests))
        asked = TaskState(
            status=status,
            key=question.key,
            fingerprint=question.fingerprint,
            field=question.field,
            kind=question.kind,
        )
        return ToolInputRequested(
            question=question.message,
            choices=question.choices,
            allows_free_text=not question.choices,
            continuation=asked.encode(),
        )
    interval = next_poll_interval(task, record.task_poll_interval_seconds)
    # The task left input_required: an identical request later is a new question.
    return ToolTaskPending(
        poll_interval_seconds=interval, continuation=TaskState(status=status).encode()
    )


async def wait_in_step(
    connection: McpConnection,
    handle: Mapping[str, Any],
    *,
    settings: ConnectionSettings,
    wait_timeout: float,
    heartbeat: Callable[[], Awaitable[None]],
    on_status: Callable[[Mapping[str, Any]], None],
    media_store: MediaStore | None,
    effect: ToolEffect | None,
    where: str,
) -> ToolExecutionResult:
    """Poll a task on the call's own connection until it ends, for at most ``wait_timeout``.

    Raises:
        McpToolCallInterruptedError: The wait passed, or the connection broke.
        ToolExecutionError: The task failed, was cancelled, or asked for input.
    """
    task_id = str(handle.get("taskId") or "")
    if not task_id:
        raise ToolExecutionError("the MCP server answered with a task handle without a taskId")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_timeout
    status = handle.get("status")
    on_status(handle)
    task: Mapping[str, Any] = handle
    while True:
        remaining = deadline - loop.time()
        if remaining <= 0:
            await cancel_quietly(connection, task_id, settings)
            raise McpToolCallInterruptedError(
                f"the MCP task {task_id} of {where} did not finish within {wait_timeout:g} s"
            )
        await asyncio.sleep(min(_step_interval(task), remaining))  # the server's poll interval
        await heartbeat()
        try:
            task = await _get(connection, task_id, settings, effect)
        except (ToolExecutionError, ToolOutcomeUnknownError, McpToolCallInterruptedError):
            raise
        except Exception as error:
            raise McpToolCallInterruptedError(
                f"polling the MCP task {task_id} of {where} failed: {error!r}"
            ) from error
        if task["status"] != status:
            status = task["status"]
            on_status(task)
        if status in _TERMINAL:
            return await _terminal(task, media_store=media_store, where=where)
        if status == "input_required":
            await cancel_quietly(connection, task_id, settings)
            raise ToolExecutionError(unsupported_input_message(task.get("inputRequests")))
