"""Hand-built runner contract values for built-in loop tests: turns, records, executions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dex_agents_ray.session import (
    AgentEvent,
    AgentEventWriter,
    AgentMessage,
    AgentToolCall,
    AgentToolCallStatus,
    AgentTurnContext,
    BuiltInTool,
    DeferredToolExecution,
    FrameworkMessage,
    QuestionAnswer,
    ToolEffect,
    ToolPolicy,
)

FLOW_ID = "session-1"
TURN_ID = "turn-1"


class Transcript:
    """Stored messages as the session would keep them, plus the events written."""

    def __init__(self) -> None:
        self.messages: list[AgentMessage] = []
        self.events: list[AgentEvent] = []

    def store(self, messages: Sequence[FrameworkMessage], turn_id: str = TURN_ID) -> None:
        for message in messages:
            self.messages.append(
                AgentMessage(
                    sequence=len(self.messages) + 1,
                    turn_id=turn_id,
                    role=message.role,
                    framework_item=message.framework_item,
                    text=message.text,
                    tool_call_id=message.tool_call_id,
                    tool_name=message.tool_name,
                    tool_arguments=message.tool_arguments,
                    tool_output=message.tool_output,
                    images=message.images,
                )
            )

    def writer(self) -> AgentEventWriter:
        return AgentEventWriter(
            self.events.append, turn_id=TURN_ID, step_execution_id="step-1", attempt=1
        )

    def turn(
        self,
        *,
        run_state: str | None = None,
        records: Sequence[AgentToolCall] = (),
        built_ins: frozenset[BuiltInTool] = frozenset(),
        tool_policies: Mapping[str, ToolPolicy] | None = None,
        session_settings: Mapping[str, Any] | None = None,
        **fields: Any,
    ) -> AgentTurnContext:
        return AgentTurnContext(
            flow_id=FLOW_ID,
            turn_id=TURN_ID,
            attempt=1,
            messages=list(self.messages),
            framework_run_state=run_state,
            tool_calls={record.tool_call_id: record for record in records},
            events=self.writer(),
            heartbeat=_heartbeat,
            enabled_built_in_tools=built_ins,
            tool_policies=dict(tool_policies or {}),
            session_settings=dict(session_settings or {}),
            **fields,
        )


async def _heartbeat() -> None:
    return None


async def _save_checkpoint(text: str) -> None:
    return None


def record(
    tool_call_id: str,
    tool_name: str,
    *,
    arguments: str = "{}",
    status: AgentToolCallStatus = AgentToolCallStatus.SUCCEEDED,
    output: str | None = None,
    effect: ToolEffect = ToolEffect.READ,
    order: int = 0,
    **fields: Any,
) -> AgentToolCall:
    return AgentToolCall(
        tool_call_id=tool_call_id,
        turn_id=TURN_ID,
        tool_name=tool_name,
        arguments=arguments,
        effect=effect,
        requires_approval=False,
        status=status,
        deferral_order=order,
        output=output,
        **fields,
    )


def execution(
    tool_call: AgentToolCall,
    *,
    attempt: int = 1,
    input_answers: Sequence[QuestionAnswer] = (),
    events: list[AgentEvent] | None = None,
) -> DeferredToolExecution:
    sink = events.append if events is not None else (lambda event: None)
    return DeferredToolExecution(
        flow_id=FLOW_ID,
        tool_call=tool_call,
        idempotency_key=f"{FLOW_ID}/{tool_call.turn_id}/{tool_call.tool_call_id}",
        attempt=attempt,
        events=AgentEventWriter(sink, turn_id=TURN_ID, step_execution_id="tool", attempt=attempt),
        heartbeat=_heartbeat,
        heartbeat_checkpoint=None,
        save_heartbeat_checkpoint=_save_checkpoint,
        input_answers=input_answers,
    )
