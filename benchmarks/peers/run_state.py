"""Bytes per ``RunModel`` of an agent runner, the runner contract driven by hand.

:func:`drive` runs ``turns`` turns of the session's runner contract in this process
(no Ray, no store): each user message and every outcome's ``new_messages`` are
stored as the session stores them, the tool calls get succeeded records (output
``TOOL_TEXT``), and each ``run_model_step`` outcome is weighed: UTF-8 bytes of its
``framework_run_state``, and of the ``framework_item`` of the messages it stores
(on the whole, and apart on the tool-call responses and on the answers).
The adapters' peers (``pydantic_ai_peer``, ``openai_agents_peer``) weigh their
runners with it; :func:`builtin_bytes` weighs the built-in loop's runner the same way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from .workload import TOOL_TEXT, TURNS


async def drive(runner: Any, turns: int, tool_names: Sequence[str]) -> dict[str, Any]:
    """``turns`` turns of the runner contract by hand, as the session drives it."""
    from dex_agents_ray.session import (
        AgentEventWriter,
        AgentMessage,
        AgentToolCall,
        AgentToolCallStatus,
        AgentTurnContext,
        FrameworkMessage,
        ToolCallsRequested,
        TurnCompleted,
    )

    stored: list[AgentMessage] = []

    def store(messages: Sequence[FrameworkMessage], turn_id: str) -> int:
        for message in messages:
            stored.append(
                AgentMessage(
                    sequence=len(stored) + 1,
                    turn_id=turn_id,
                    role=message.role,
                    framework_item=message.framework_item,
                    text=message.text,
                    tool_call_id=message.tool_call_id,
                    tool_name=message.tool_name,
                    tool_arguments=message.tool_arguments,
                    tool_output=message.tool_output,
                )
            )
        return sum(len(m.framework_item.encode()) for m in messages)

    async def heartbeat() -> None:
        return None

    run_state: list[int] = []  # per RunModel: bytes of framework_run_state (0: none)
    message_bytes: list[int] = []  # per RunModel: bytes of the messages it stores
    for number in range(1, turns + 1):
        turn_id = f"turn-{number}"
        store([runner.build_user_message(f"turn {number}")], turn_id)
        state: str | None = None
        records: dict[str, AgentToolCall] = {}
        for _ in range(2):
            context = AgentTurnContext(
                flow_id="bytes",
                turn_id=turn_id,
                attempt=1,
                messages=list(stored),
                framework_run_state=state,
                tool_calls=dict(records),
                events=AgentEventWriter(
                    lambda _event: None, turn_id=turn_id, step_execution_id="s", attempt=1
                ),
                heartbeat=heartbeat,
                tool_policies={name: _read_policy() for name in tool_names},
            )
            outcome = await runner.run_model_step(context)
            message_bytes.append(store(outcome.new_messages, turn_id))
            if isinstance(outcome, TurnCompleted):
                run_state.append(0)
                break
            assert isinstance(outcome, ToolCallsRequested), outcome
            state = outcome.framework_run_state
            run_state.append(len(state.encode()))
            records = {
                call.tool_call_id: AgentToolCall(
                    tool_call_id=call.tool_call_id,
                    turn_id=turn_id,
                    tool_name=call.tool_name,
                    arguments=call.arguments,
                    effect=call.policy.effect,
                    requires_approval=False,
                    status=AgentToolCallStatus.SUCCEEDED,
                    deferral_order=order,
                    output=TOOL_TEXT,
                    runner_tool_state=call.runner_tool_state,
                )
                for order, call in enumerate(outcome.tool_calls)
            }
        else:
            raise RuntimeError(f"{runner!r}: turn {number} did not complete")
    asking = [b for b in run_state if b]
    asked = [m for m, b in zip(message_bytes, run_state, strict=True) if b]
    answered = [m for m, b in zip(message_bytes, run_state, strict=True) if not b]
    return {
        "run_models": len(run_state),
        "run_state_bytes_per_run_model": sum(run_state) / len(run_state),
        "run_state_bytes_per_tool_call_response": sum(asking) / len(asking),
        "run_state_bytes_min_max": (min(asking), max(asking)),
        "message_bytes_per_run_model": sum(message_bytes) / len(message_bytes),
        "message_bytes_per_tool_call_response": sum(asked) / len(asked),
        "message_bytes_per_answer": sum(answered) / len(answered),
    }


def _read_policy() -> Any:
    from dex_agents_ray import ToolEffect, ToolPolicy

    return ToolPolicy(ToolEffect.READ)


def builtin_bytes(turns: int = TURNS) -> dict[str, Any]:
    """:func:`drive` on the built-in loop's runner (``dex:session-shared-ray``'s agent)."""
    from .dex_engine import TOOLS
    from .dex_engine import session_flow as builtin_session_flow

    names = [f"tool_{i}" for i in range(TOOLS)]
    return asyncio.run(drive(builtin_session_flow("ray").runner, turns, names))
