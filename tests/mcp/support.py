"""Helpers for the MCP tests: sources with short timeouts, hand-built calls, a clock."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from dex_agents_ray import (
    AgentEvent,
    AgentEventWriter,
    AgentToolCall,
    AgentToolCallStatus,
    AgentTurnContext,
    DeferredToolExecution,
    QuestionAnswer,
    ToolEffect,
    ToolPolicy,
    ToolTaskPoll,
)
from dex_agents_ray.mcp import McpServerConfig, McpStdioServerConfig, McpToolSource

ROOT = str(Path(__file__).resolve().parents[2])
T = TypeVar("T")


def stdio_server(
    name: str = "s", *, log: Path | None = None, **kwargs: Any
) -> McpStdioServerConfig:
    """The test server as a stdio process per request."""
    env = {"PYTHONPATH": ROOT}
    if log is not None:
        env["MCP_TEST_LOG"] = str(log)
    return McpStdioServerConfig(
        name=name, command=sys.executable, args=["-m", "tests.mcp.mcp_server"], env=env, **kwargs
    )


def source(servers: Sequence[McpServerConfig], **kwargs: Any) -> McpToolSource:
    """A source with test-sized timeouts."""
    kwargs.setdefault("connection_timeout", timedelta(seconds=20))
    kwargs.setdefault("request_timeout", timedelta(seconds=30))
    return McpToolSource(servers, **kwargs)


class FakeClock:
    """Monotonic seconds that move only when a test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Recorded:
    """What one hand-built call wrote: events, heartbeats, checkpoints."""

    events: list[AgentEvent] = field(default_factory=list)
    checkpoints: list[str] = field(default_factory=list)
    heartbeats: int = 0

    def writer(self) -> AgentEventWriter:
        return AgentEventWriter(
            self.events.append, turn_id="turn-1", step_execution_id="CallTool-1", attempt=1
        )

    async def heartbeat(self) -> None:
        self.heartbeats += 1

    async def save(self, text: str) -> None:
        self.checkpoints.append(text)

    def of_type(self, type: str) -> list[dict[str, Any]]:
        return [dict(e.payload) for e in self.events if e.type == type]


def record(
    tool_name: str,
    reference: str | None,
    *,
    effect: ToolEffect = ToolEffect.READ,
    arguments: str = "{}",
    task_id: str | None = None,
    continuation: str | None = None,
    interval: int | None = None,
    status: AgentToolCallStatus = AgentToolCallStatus.APPROVED,
) -> AgentToolCall:
    return AgentToolCall(
        tool_call_id="c1",
        turn_id="turn-1",
        tool_name=tool_name,
        arguments=arguments,
        effect=effect,
        requires_approval=False,
        status=status,
        deferral_order=0,
        tool_source_reference=reference,
        task_id=task_id,
        input_continuation=continuation,
        task_poll_interval_seconds=interval,
    )


def turn(
    policies: dict[str, ToolPolicy] | None = None,
    default: ToolEffect = ToolEffect.UNCLASSIFIED,
) -> AgentTurnContext:
    return AgentTurnContext(
        flow_id="flow-1",
        turn_id="turn-1",
        attempt=1,
        messages=(),
        framework_run_state=None,
        tool_calls={},
        events=Recorded().writer(),
        heartbeat=Recorded().heartbeat,
        tool_policies=policies or {},
        default_tool_effect=default,
    )


def deferred(
    tools: McpToolSource,
    name: str,
    arguments: str = "{}",
    *,
    recorded: Recorded | None = None,
    checkpoint: str | None = None,
    supports_tool_tasks: bool = True,
    attempt: int = 1,
    policies: dict[str, ToolPolicy] | None = None,
) -> DeferredToolExecution:
    """The execution of a call of listed tool ``name``, as the tool Step builds it."""
    recorded = recorded or Recorded()
    call = tools.deferred_tool_call(
        turn(policies), tool_call_id="c1", tool_name=name, arguments=arguments
    )
    return DeferredToolExecution(
        flow_id="flow-1",
        tool_call=record(
            name, call.tool_source_reference, effect=call.policy.effect, arguments=arguments
        ),
        idempotency_key="flow-1/turn-1/c1",
        attempt=attempt,
        events=recorded.writer(),
        heartbeat=recorded.heartbeat,
        heartbeat_checkpoint=checkpoint,
        save_heartbeat_checkpoint=recorded.save,
        supports_tool_tasks=supports_tool_tasks,
    )


def poll_of(
    call: DeferredToolExecution,
    task_id: str,
    *,
    recorded: Recorded,
    continuation: str | None = None,
    interval: int = 1,
    answer: QuestionAnswer | None = None,
    attempt: int = 1,
) -> ToolTaskPoll:
    """One ``PollToolTask`` poll of ``call``'s task."""
    waiting = record(
        call.tool_call.tool_name,
        call.tool_call.tool_source_reference,
        effect=call.tool_call.effect,
        task_id=task_id,
        continuation=continuation,
        interval=interval,
        status=AgentToolCallStatus.WAITING_FOR_TASK,
    )
    return ToolTaskPoll(
        flow_id="flow-1",
        tool_call=waiting,
        idempotency_key=call.idempotency_key,
        attempt=attempt,
        events=recorded.writer(),
        heartbeat=recorded.heartbeat,
        pending_answer=answer,
    )


async def eventually(
    probe: Callable[[], Awaitable[T]],
    until: Callable[[T], Any] = bool,
    *,
    timeout: float = 60.0,
    description: str = "condition",
) -> T:
    """Poll ``probe`` until ``until`` holds, with a deadline; never sleep for timing."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = await probe()
        if until(value):
            return value
        if loop.time() > deadline:
            raise AssertionError(f"{description} not reached within {timeout} s; last: {value!r}")
        await asyncio.sleep(0.02)
