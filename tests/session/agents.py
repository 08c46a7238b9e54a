"""A scripted runner for session tests: model replies come from a script, tools
from named behaviours that use gates and invocation logs in a state directory.

Flows built here are stored by value with the engine and unpickled in Ray
workers, which import this module by name.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dex_agents_ray import (
    AgentSessionFlow,
    AgentSessionOptions,
    AgentToolCall,
    AgentTurnContext,
    AgentTurnOutcome,
    AgentUsage,
    DeferredToolCall,
    DeferredToolExecution,
    DeferredToolOutcome,
    FrameworkMessage,
    MessageRole,
    ToolCallsRequested,
    ToolExecutionError,
    ToolExecutionResult,
    ToolInputRequested,
    ToolOutcomeUnknownError,
    ToolTaskCancellation,
    ToolTaskPending,
    ToolTaskPoll,
    ToolTaskPollOutcome,
    ToolTaskStarted,
    TurnCompleted,
    TurnContinued,
    describe_tool_call_outcome,
)
from dex_agents_ray.engine._faults import GATE_BEFORE_STREAM_APPEND_ENV
from dex_agents_ray.media import AgentImageReference
from dex_agents_ray.testing import FileGate, InvocationLog


@dataclass(frozen=True)
class Call:
    """One tool call a scripted model makes."""

    tool_call_id: str
    tool_name: str
    arguments: Mapping[str, object] = field(default_factory=dict)
    ordered: bool = False


@dataclass(frozen=True)
class Reply:
    """One scripted model reply: tool calls, or a final answer, or an error."""

    calls: Sequence[Call] = ()
    raise_error: str | None = None
    turn_error: str | None = None
    continue_with: str | None = None
    model_gate: str | None = None
    """Wait at gate ``model-<name>`` (logged as reached) before replying."""
    pad_answer_bytes: int = 0
    """Pad the final answer's stored item with this many bytes (not streamed)."""
    append_gate: str | None = None
    """After the final answer's text delta, make this process's Stream appends
    alone wait at gate ``<name>`` (``GATE_BEFORE_STREAM_APPEND_ENV``)."""
    block_loop_seconds: float = 0.0
    """Then hold the host's event loop this long before replying (a loaded host:
    the writes queued so far outlive their linger)."""


def user_message(text: str) -> FrameworkMessage:
    return FrameworkMessage(
        role=MessageRole.USER, framework_item=json.dumps({"user": text}), text=text
    )


def answer_text(records: Sequence[AgentToolCall]) -> str:
    """The final answer: every call's outcome, in deferral order."""
    if not records:
        return "no tools"
    return "; ".join(f"{r.tool_name}={describe_tool_call_outcome(r)}" for r in records)


class ScriptedRunner:
    """Replies from ``script[<turn's user text>]``; tools by ``behaviours[<tool name>]``.

    Tool behaviours: ``echo`` (returns its arguments), ``gate`` (logs the call,
    waits at gate ``<tool>-<attempt>``), ``checkpoint-gate`` (as ``gate``, after
    saving the heartbeat checkpoint ``<tool> begun``), ``fail`` (``ToolExecutionError``),
    ``unknown`` (``ToolOutcomeUnknownError``), ``crash`` (any exception), ``ask``
    (asks a question first), ``task`` (starts a task, see ``TaskRunner``).
    """

    def __init__(
        self,
        state_dir: str,
        script: Mapping[str, Sequence[Reply]],
        behaviours: Mapping[str, str],
    ) -> None:
        self.state_dir = state_dir
        self.script = dict(script)
        self.behaviours = dict(behaviours)

    def log(self, name: str) -> InvocationLog:
        return InvocationLog(os.path.join(self.state_dir, f"{name}.log"))

    def build_user_message(self, text: str) -> FrameworkMessage:
        return user_message(text)

    async def run_model_step(self, turn: AgentTurnContext) -> AgentTurnOutcome:
        user_text = next(
            m.text for m in turn.messages if m.turn_id == turn.turn_id and m.text is not None
        )
        index = 0 if turn.framework_run_state is None else json.loads(turn.framework_run_state)
        self.log("model").record(f"{turn.turn_id}/{index}/{turn.attempt}")
        replies = self.script.get(user_text, ())
        reply = replies[index] if index < len(replies) else Reply()
        if reply.model_gate is not None:
            await FileGate(self.state_dir, f"model-{reply.model_gate}").wait_for_release()
        if reply.raise_error is not None:
            raise RuntimeError(reply.raise_error)
        usage = AgentUsage(input_tokens=10, output_tokens=2, model_calls=1)
        if reply.continue_with is not None:
            return TurnContinued(
                framework_run_state=json.dumps(index + 1),
                new_messages=[user_message(reply.continue_with)],
                usage=usage,
            )
        if reply.calls:
            calls = [
                DeferredToolCall(
                    tool_call_id=call.tool_call_id,
                    tool_name=call.tool_name,
                    arguments=json.dumps(call.arguments),
                    policy=turn.resolve_tool_policy(call.tool_name),
                    ordered=call.ordered,
                )
                for call in reply.calls
            ]
            return ToolCallsRequested(
                framework_run_state=json.dumps(index + 1), tool_calls=calls, usage=usage
            )
        records = list(turn.tool_calls.values())
        text = answer_text(records)
        turn.events.write_text_delta(text)
        if reply.append_gate is not None:
            os.environ[GATE_BEFORE_STREAM_APPEND_ENV] = f"{self.state_dir}:{reply.append_gate}"
        if reply.block_loop_seconds:
            time.sleep(reply.block_loop_seconds)  # noqa: ASYNC251 - the loop is meant to stall
        item = {"answer": text}
        if reply.pad_answer_bytes:
            item["pad"] = "p" * reply.pad_answer_bytes
        answer = FrameworkMessage(
            role=MessageRole.ASSISTANT, framework_item=json.dumps(item), text=text
        )
        return TurnCompleted(new_messages=[answer], usage=usage, turn_error=reply.turn_error)

    async def execute_deferred_tool_call(self, call: DeferredToolExecution) -> DeferredToolOutcome:
        record = call.tool_call
        behaviour = self.behaviours.get(record.tool_name, "echo")
        self.log(record.tool_name).record(
            f"{record.tool_call_id}/{call.attempt}/{call.idempotency_key}/{os.getpid()}"
        )
        if behaviour == "checkpoint-gate":
            await call.save_heartbeat_checkpoint(f"{record.tool_name} begun")
            behaviour = "gate"
        if behaviour == "gate":
            await FileGate(self.state_dir, f"{record.tool_name}-{call.attempt}").wait_for_release()
            return ToolExecutionResult(output=f"{record.tool_name} done")
        if behaviour == "fail":
            raise ToolExecutionError(f"{record.tool_name} refused")
        if behaviour == "unknown":
            raise ToolOutcomeUnknownError(f"{record.tool_name} lost its connection")
        if behaviour == "crash":
            raise RuntimeError(f"{record.tool_name} crashed")
        if behaviour == "ask":
            if not call.input_answers:
                return ToolInputRequested(
                    question="Which account?",
                    choices=("a", "b"),
                    allows_free_text=False,
                    continuation="q1",
                )
            answer = call.input_answers[-1]
            return ToolExecutionResult(
                output=f"account {answer.answer} ({answer.resolution.value}, "
                f"{record.input_continuation})"
            )
        if behaviour == "task":
            if call.heartbeat_checkpoint is not None:
                return ToolTaskStarted(task_id=call.heartbeat_checkpoint, poll_interval_seconds=0.2)
            await call.save_heartbeat_checkpoint("job-1")
            return ToolTaskStarted(task_id="job-1", poll_interval_seconds=0.2)
        return ToolExecutionResult(output=f"echo {record.arguments}")


class TaskRunner(ScriptedRunner):
    """A ``ScriptedRunner`` that polls tool tasks.

    The task asks ``Proceed?`` on its first poll, then reports pending until
    the file ``task-done`` exists in the state directory.
    """

    async def poll_tool_task(self, poll: ToolTaskPoll) -> ToolTaskPollOutcome:
        record = poll.tool_call
        pending = poll.pending_answer
        self.log("poll").record(
            f"{record.task_id}/{record.input_continuation}/"
            f"{None if pending is None else pending.answer}"
        )
        if record.input_request_count == 0:
            return ToolInputRequested(question="Proceed?", continuation="ask-1")
        if not _task_done(self.state_dir):
            kept = record.input_continuation if pending is None else "ask-1"
            return ToolTaskPending(poll_interval_seconds=0.2, continuation=kept)
        answer = next(a.answer for a in record.input_answers)
        return ToolExecutionResult(output=f"task {record.task_id} finished after {answer}")


class CancellingTaskRunner(TaskRunner):
    """A ``TaskRunner`` that cancels tasks (``ToolTaskCanceller``): logs each request
    and, with behaviour ``cancel_tool_task: gate``, waits at gate ``cancel-<attempt>``."""

    async def cancel_tool_task(self, cancellation: ToolTaskCancellation) -> None:
        record = cancellation.tool_call
        self.log("cancel").record(f"{record.task_id}/{cancellation.attempt}/{os.getpid()}")
        if self.behaviours.get("cancel_tool_task") == "gate":
            await FileGate(self.state_dir, f"cancel-{cancellation.attempt}").wait_for_release()


class PlanningRunner(ScriptedRunner):
    """A ``ScriptedRunner`` for plan mode (``PlanModeRunner``); it logs each model
    call's interaction mode and plan revision to ``modes.log``."""

    @property
    def supports_plan_mode(self) -> bool:
        return True

    async def run_model_step(self, turn: AgentTurnContext) -> AgentTurnOutcome:
        revision = None if turn.plan is None else turn.plan.revision
        self.log("modes").record(f"{turn.turn_id}/{turn.interaction_mode.value}/{revision}")
        return await super().run_model_step(turn)


class ImageRunner(ScriptedRunner):
    """A ``ScriptedRunner`` that takes user messages with images."""

    def build_user_message_with_images(
        self, text: str, images: Sequence[AgentImageReference]
    ) -> FrameworkMessage:
        item = {"user": text, "images": [image.sha256 for image in images]}
        return FrameworkMessage(role=MessageRole.USER, framework_item=json.dumps(item), text=text)


class ContinuingRunner(ScriptedRunner):
    """A ``ScriptedRunner`` that stores unfinished turns (so it may continue turns)."""

    def build_unfinished_turn_messages(self, turn: AgentTurnContext) -> list[FrameworkMessage]:
        return [
            FrameworkMessage(
                role=MessageRole.TOOL,
                framework_item=json.dumps({"result": record.tool_call_id}),
                tool_call_id=record.tool_call_id,
                tool_name=record.tool_name,
                tool_output=describe_tool_call_outcome(record),
            )
            for record in turn.tool_calls.values()
        ]


def _task_done(state_dir: str) -> bool:
    return Path(state_dir, "task-done").exists()


def build_flow(
    state_dir: Path | str,
    script: Mapping[str, Sequence[Reply]],
    behaviours: Mapping[str, str] | None = None,
    *,
    options: AgentSessionOptions | None = None,
    runner_class: type[ScriptedRunner] = ScriptedRunner,
    flow_type: str = "TestAgent",
) -> AgentSessionFlow:
    runner = runner_class(str(state_dir), script, behaviours or {})
    return AgentSessionFlow(runner, flow_type=flow_type, options=options or AgentSessionOptions())
