"""decide_turn_continuation: ending or continuing a turn after tools and after answers."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dex_agents_ray.builtin_loop import (
    MAX_CONSECUTIVE_TURN_CONTINUATIONS,
    TURN_CONTINUATION_LIMIT_ERROR,
    AgentDefinition,
    BuiltinLoopAgentRunner,
    ContinueTurn,
    ModelRequest,
    ScriptedModelClient,
    ScriptedModelReply,
    ScriptedToolCall,
    TurnContinuation,
    TurnContinuationContext,
    UserTextItem,
    function_tool,
)
from dex_agents_ray.session import (
    MessageRole,
    ToolCallsRequested,
    ToolEffect,
    TurnCompleted,
    TurnContinued,
)
from tests.builtin_loop.turns import Transcript, record


@function_tool(effect=ToolEffect.READ)
def submit_decision(decision: str) -> str:
    """Submit the decision."""
    return "submitted"


def respond(request: ModelRequest) -> ScriptedModelReply:
    texts = ScriptedModelClient.user_texts(request)
    if texts[-1] == "Decide.":
        return ScriptedModelReply(
            tool_calls=[
                ScriptedToolCall(
                    tool_call_id="d1", tool_name="submit_decision", arguments={"decision": "yes"}
                )
            ]
        )
    return ScriptedModelReply(text="Thinking about it.")


class Hook:
    """A decide_turn_continuation that records its contexts and returns a fixed value."""

    def __init__(self, value: Any) -> None:
        self.value = value
        self.contexts: list[TurnContinuationContext] = []

    async def __call__(self, context: TurnContinuationContext) -> TurnContinuation:
        self.contexts.append(context)
        result: TurnContinuation = self.value
        return result


def runner_with(hook: Any) -> tuple[BuiltinLoopAgentRunner, ScriptedModelClient]:
    model = ScriptedModelClient(respond)
    definition = AgentDefinition(
        name="approvals",
        instructions="Review the request, then call submit_decision.",
        model=model,
        tools=[submit_decision],
        decide_turn_continuation=hook,
    )
    return BuiltinLoopAgentRunner(definition), model


async def after_tools(hook: Hook) -> tuple[Any, ScriptedModelClient]:
    runner, model = runner_with(hook)
    transcript = Transcript()
    transcript.store([runner.build_user_message("Decide.")])
    first = await runner.run_model_step(transcript.turn())
    assert isinstance(first, ToolCallsRequested) and hook.contexts == []
    transcript.store(first.new_messages)
    records = [record("d1", "submit_decision", output="submitted")]
    outcome = await runner.run_model_step(
        transcript.turn(run_state=first.framework_run_state, records=records)
    )
    return outcome, model


async def test_end_after_tools_completes_without_a_model_call() -> None:
    hook = Hook("end")
    outcome, model = await after_tools(hook)
    assert isinstance(outcome, TurnCompleted)
    assert [message.role for message in outcome.new_messages] == [MessageRole.TOOL]
    assert outcome.usage.model_calls == 0 and len(model.requests) == 1
    [context] = hook.contexts
    assert (context.flow_id, context.turn_id) == ("session-1", "turn-1")
    assert [result.tool_name for result in context.tool_results] == ["submit_decision"]
    assert [call.tool_name for item in context.model_output for call in item.tool_calls] == [
        "submit_decision"
    ]


class ContinueAfterTools(Hook):
    async def __call__(self, context: TurnContinuationContext) -> TurnContinuation:
        self.contexts.append(context)
        return ContinueTurn("Now explain it.") if context.tool_results else "default"


async def test_continue_after_tools_adds_the_message_after_the_results() -> None:
    hook = ContinueAfterTools(None)
    outcome, model = await after_tools(hook)
    assert isinstance(outcome, TurnCompleted)
    assert [message.role for message in outcome.new_messages] == [
        MessageRole.TOOL,
        MessageRole.USER,
        MessageRole.ASSISTANT,
    ]
    assert model.requests[1].input[-1] == UserTextItem(text="Now explain it.")
    assert len(hook.contexts) == 2 and hook.contexts[1].tool_results == ()


async def test_continue_after_an_answer_stores_it_and_asks_again() -> None:
    hook = Hook(ContinueTurn("Finish with a line that starts with DECISION:."))
    runner, model = runner_with(hook)
    transcript = Transcript()
    transcript.store([runner.build_user_message("Hello")])
    outcome = await runner.run_model_step(transcript.turn())
    assert isinstance(outcome, TurnContinued)
    assert json.loads(outcome.framework_run_state) == {
        "model_calls": 1,
        "consecutive_continuations": 1,
    }
    answer, note = outcome.new_messages
    assert answer.text == "Thinking about it." and note.role is MessageRole.USER
    assert hook.contexts[0].tool_results == ()
    transcript.store(outcome.new_messages)
    again = await runner.run_model_step(transcript.turn(run_state=outcome.framework_run_state))
    assert isinstance(again, TurnContinued)
    assert json.loads(again.framework_run_state)["consecutive_continuations"] == 2
    assert model.requests[1].input[-1] == UserTextItem(
        text="Finish with a line that starts with DECISION:."
    )


async def test_too_many_consecutive_continuations_end_the_turn_failed() -> None:
    runner, _ = runner_with(Hook(ContinueTurn("Again.")))
    transcript = Transcript()
    transcript.store([runner.build_user_message("Hello")])
    state = json.dumps(
        {"model_calls": 9, "consecutive_continuations": MAX_CONSECUTIVE_TURN_CONTINUATIONS}
    )
    outcome = await runner.run_model_step(transcript.turn(run_state=state))
    assert isinstance(outcome, TurnCompleted)
    assert outcome.turn_error == TURN_CONTINUATION_LIMIT_ERROR
    assert [message.text for message in outcome.new_messages] == ["Thinking about it."]


async def test_default_and_sync_hooks_keep_the_default() -> None:
    runner, _ = runner_with(lambda context: "default")
    transcript = Transcript()
    transcript.store([runner.build_user_message("Hello")])
    assert isinstance(await runner.run_model_step(transcript.turn()), TurnCompleted)


@pytest.mark.parametrize("value", ["continue", None, 3])
async def test_any_other_value_fails_the_attempt(value: Any) -> None:
    runner, _ = runner_with(Hook(value))
    transcript = Transcript()
    transcript.store([runner.build_user_message("Hello")])
    with pytest.raises(TypeError, match="expected 'end', 'default' or ContinueTurn"):
        await runner.run_model_step(transcript.turn())
