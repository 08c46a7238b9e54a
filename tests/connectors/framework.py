"""A framework adapter in miniature, to test ``FrameworkToolSourceRouter``.

Its "framework" follows a script of responses. It has one native tool of its own
(``framework_echo``) and takes tool sources: it lists them through the router in
each ``RunModel``, offers them as native tools whose bodies never run, defers
their calls through the router, and answers a call of a replay-only tool inside
the framework. Flows built here are unpickled in Ray workers, which import this
module by name.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dex_agents_ray import (
    AgentSessionFlow,
    AgentToolCall,
    AgentTurnContext,
    AgentTurnOutcome,
    DeferredToolCall,
    DeferredToolExecution,
    DeferredToolOutcome,
    FrameworkMessage,
    MessageRole,
    ToolCallsRequested,
    ToolCallStepOptions,
    ToolEffect,
    ToolExecutionResult,
    ToolPolicy,
    TurnCompleted,
    TurnContinued,
)
from dex_agents_ray.builtin_loop import FrameworkToolSourceRouter, ToolSource
from dex_agents_ray.connectors import ConnectorTool, ConnectorToolSource

Response = Sequence[tuple[str, str, Mapping[str, Any]]]
NATIVE_TOOL = "framework_echo"


class DroppingSource(ConnectorToolSource):
    """A connector source that stops listing the tools named in ``<state_dir>/dropped``."""

    def __init__(self, tools: Sequence[ConnectorTool], *, state_dir: str) -> None:
        super().__init__(tools)
        self.state_dir = state_dir

    async def list_tools(self) -> list[ConnectorTool]:
        dropped_file = Path(self.state_dir) / "dropped"
        dropped = dropped_file.read_text().split() if dropped_file.exists() else []
        return [tool for tool in await super().list_tools() if tool.name not in dropped]


def _message(role: MessageRole, text: str) -> FrameworkMessage:
    return FrameworkMessage(role=role, framework_item=json.dumps({"text": text}), text=text)


class MiniFrameworkRunner:
    """Runs ``script`` (one list of calls per model response, then an answer)."""

    def __init__(
        self, sources: Sequence[ToolSource], script: Sequence[Response], *, state_dir: str
    ) -> None:
        self.router = FrameworkToolSourceRouter(sources)
        self.script = list(script)
        self.state_dir = state_dir

    def build_user_message(self, text: str) -> FrameworkMessage:
        return _message(MessageRole.USER, text)

    def build_unfinished_turn_messages(self, turn: AgentTurnContext) -> list[FrameworkMessage]:
        return []  # the framework keeps its results in its run state

    def _log_offer(self, names: Sequence[str], replay: Sequence[str]) -> None:
        path = os.path.join(self.state_dir, "offers.log")
        with open(path, "a", encoding="utf-8") as log:
            log.write(json.dumps({"offered": list(names), "replay_only": list(replay)}) + "\n")

    async def run_model_step(self, turn: AgentTurnContext) -> AgentTurnOutcome:
        state = json.loads(turn.framework_run_state or '{"step": 0, "answers": {}}')
        listing = await self.router.list_for_turn(turn, framework_tool_names={NATIVE_TOOL})
        self._log_offer(
            [tool.name for _, tool in listing.tools],
            [tool.name for _, tool in listing.replay_only_tools],
        )
        step, answers = state["step"], state["answers"]
        if step >= len(self.script):
            return TurnCompleted(
                new_messages=[_message(MessageRole.ASSISTANT, self._answer(turn, answers))]
            )
        deferred: list[DeferredToolCall] = []
        for call_id, name, arguments in self.script[step]:
            text = json.dumps(dict(arguments))
            if call_id in answers or turn.recorded_tool_call(call_id) is not None:
                continue  # the framework replays a call it already has a result for
            call = self.router.build_call(
                turn, listing, tool_call_id=call_id, tool_name=name, arguments=text
            )
            if call is not None:
                deferred.append(call)
            elif name == NATIVE_TOOL:
                policy = ToolPolicy(ToolEffect.READ, requires_approval=False)
                deferred.append(
                    DeferredToolCall(
                        tool_call_id=call_id, tool_name=name, arguments=text, policy=policy
                    )
                )
            elif listing.is_replay_only(name):
                answers[call_id] = self.router.replay_result(turn, call_id)  # no tool Step
            else:
                answers[call_id] = f"unknown tool {name}"
        next_state = json.dumps({"step": step + 1, "answers": answers})
        if deferred:
            return ToolCallsRequested(framework_run_state=next_state, tool_calls=deferred)
        note = _message(MessageRole.USER, "[framework] answered inside the framework")
        return TurnContinued(framework_run_state=next_state, new_messages=[note])

    def _answer(self, turn: AgentTurnContext, answers: Mapping[str, str]) -> str:
        parts: list[str] = []
        for response in self.script:
            for call_id, name, _ in response:
                if call_id in answers:
                    parts.append(f"{call_id} {name}: {answers[call_id]}")
                else:
                    parts.append(f"{call_id} {name}: {self.router.replay_result(turn, call_id)}")
        return " | ".join(dict.fromkeys(parts))

    async def execute_deferred_tool_call(self, call: DeferredToolExecution) -> DeferredToolOutcome:
        if self.router.is_source_call(call.tool_call):
            return await self.router.execute_deferred_tool_call(call)
        return ToolExecutionResult(output=f"echo {call.tool_call.arguments}")

    def tool_call_step_options(self, tool_call: AgentToolCall) -> ToolCallStepOptions | None:
        if not self.router.is_source_call(tool_call):
            return None
        return self.router.tool_call_step_options(tool_call)


def framework_flow(
    flow_type: str, sources: Sequence[ToolSource], script: Sequence[Response], *, state_dir: str
) -> AgentSessionFlow:
    return AgentSessionFlow(
        MiniFrameworkRunner(sources, script, state_dir=state_dir), flow_type=flow_type
    )
