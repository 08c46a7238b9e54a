"""BuiltinLoopAgentRunner.run_model_step against ScriptedModelClient with hand-built turns."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from dex_agents_ray.builtin_loop import (
    AgentDefinition,
    BuiltinLoopAgentRunner,
    InstructionContext,
    ModelRequest,
    ScriptedModelClient,
    ScriptedModelReply,
    ScriptedToolCall,
    ToolChoice,
    ToolResultItem,
    UserTextItem,
    function_tool,
)
from dex_agents_ray.session import (
    AgentFrameworkRunner,
    AgentToolCallStatus,
    BuiltInTool,
    ImageUserMessageBuilder,
    InteractionMode,
    MessageRole,
    ToolCallsRequested,
    ToolEffect,
    ToolPolicy,
    ToolTaskCanceller,
    ToolTaskPoller,
    TurnCompleted,
    UnfinishedTurnMessageBuilder,
)
from tests.builtin_loop.turns import Transcript, record


@function_tool(effect=ToolEffect.READ)
async def lookup_order(order_id: str) -> str:
    """Look up an order."""
    return f"order {order_id}"


@function_tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
async def refund_order(order_id: str) -> str:
    """Refund an order."""
    return "refunded"


def calls(*calls: tuple[str, str, dict[str, Any]]) -> ScriptedModelReply:
    return ScriptedModelReply(
        tool_calls=[
            ScriptedToolCall(tool_call_id=call_id, tool_name=name, arguments=arguments)
            for call_id, name, arguments in calls
        ]
    )


def agent_with(
    respond: Callable[[ModelRequest], ScriptedModelReply], **fields: Any
) -> tuple[BuiltinLoopAgentRunner, ScriptedModelClient]:
    model = ScriptedModelClient(respond)
    fields.setdefault("tools", [lookup_order, refund_order])
    fields.setdefault("instructions", "You help.")
    definition = AgentDefinition(name="support", model=model, **fields)
    return BuiltinLoopAgentRunner(definition), model


def started(runner: BuiltinLoopAgentRunner, text: str = "Where is A1?") -> Transcript:
    transcript = Transcript()
    transcript.store([runner.build_user_message(text)])
    return transcript


def test_runner_implements_the_contract_protocols() -> None:
    runner, _ = agent_with(lambda request: ScriptedModelReply(text="ok"))
    for protocol in (
        AgentFrameworkRunner,
        UnfinishedTurnMessageBuilder,
        ToolTaskPoller,
        ToolTaskCanceller,
    ):
        assert isinstance(runner, protocol)
    assert not isinstance(runner, ImageUserMessageBuilder)
    message = runner.build_user_message("hi")
    assert message.role is MessageRole.USER and message.text == "hi"
    assert json.loads(message.framework_item) == {"type": "user_text", "text": "hi"}


async def test_an_answer_completes_the_turn() -> None:
    runner, model = agent_with(lambda request: ScriptedModelReply(text="It ships today."))
    transcript = started(runner)
    outcome = await runner.run_model_step(transcript.turn())
    assert isinstance(outcome, TurnCompleted) and outcome.turn_error is None
    [answer] = outcome.new_messages
    assert answer.role is MessageRole.ASSISTANT and answer.text == "It ships today."
    assert outcome.usage.model_calls == 1 and outcome.usage.output_tokens > 0
    assert outcome.model_call_metadata is not None
    [request] = model.requests
    assert request.instructions == "You help."
    assert request.input == (UserTextItem(text="Where is A1?"),)
    assert [tool.name for tool in request.tools] == ["lookup_order", "refund_order"]
    assert [event.type.value for event in transcript.events] == ["text_delta"]


async def test_tool_calls_are_deferred_with_their_policies() -> None:
    runner, model = agent_with(
        lambda request: calls(
            ("c1", "lookup_order", {"order_id": "A1"}),
            ("c2", "refund_order", {"order_id": "A1"}),
            ("c3", "ask_user", {"question": "Sure?"}),
            ("c4", "nowhere", {}),
        )
    )
    transcript = started(runner)
    policies = {"refund_order": ToolPolicy(ToolEffect.IDEMPOTENT_WRITE)}
    turn = transcript.turn(built_ins=frozenset({BuiltInTool.ASK_USER}), tool_policies=policies)
    outcome = await runner.run_model_step(turn)
    assert isinstance(outcome, ToolCallsRequested)
    assert json.loads(outcome.framework_run_state) == {"model_calls": 1}
    assert [(call.tool_call_id, call.tool_name) for call in outcome.tool_calls] == [
        ("c1", "lookup_order"),
        ("c2", "refund_order"),
        ("c3", "ask_user"),
        ("c4", "nowhere"),
    ]
    assert [call.policy for call in outcome.tool_calls] == [
        ToolPolicy(ToolEffect.READ),
        ToolPolicy(ToolEffect.IDEMPOTENT_WRITE),
        ToolPolicy(ToolEffect.READ, requires_approval=False),
        ToolPolicy(ToolEffect.UNCLASSIFIED, requires_approval=False),
    ]
    assert outcome.tool_calls[0].arguments == '{"order_id": "A1"}'
    [stored] = outcome.new_messages
    assert stored.role is MessageRole.ASSISTANT
    assert [tool.name for tool in model.requests[0].tools] == [
        "lookup_order",
        "refund_order",
        "ask_user",
    ]


async def test_resuming_reads_results_from_the_final_records() -> None:
    def respond(request: ModelRequest) -> ScriptedModelReply:
        results = ScriptedModelClient.tool_results(request)
        if not results:
            return calls(("c1", "lookup_order", {"order_id": "A1"}), ("c2", "refund_order", {}))
        return ScriptedModelReply(text=" | ".join(result.output for result in results))

    runner, model = agent_with(respond)
    transcript = started(runner)
    first = await runner.run_model_step(transcript.turn())
    assert isinstance(first, ToolCallsRequested)
    transcript.store(first.new_messages)
    records = [
        record("c1", "lookup_order", output="order A1"),
        record("c2", "refund_order", status=AgentToolCallStatus.REJECTED, order=1),
    ]
    turn = transcript.turn(run_state=first.framework_run_state, records=records)
    assert [message.tool_output for message in runner.build_unfinished_turn_messages(turn)] == [
        "order A1",
        "The user rejected this tool call.",
    ]
    second = await runner.run_model_step(turn)
    assert isinstance(second, TurnCompleted)
    results = second.new_messages[:2]
    assert [(m.role, m.tool_call_id, m.tool_output) for m in results] == [
        (MessageRole.TOOL, "c1", "order A1"),
        (MessageRole.TOOL, "c2", "The user rejected this tool call."),
    ]
    assert second.new_messages[2].text == "order A1 | The user rejected this tool call."
    assert ScriptedModelClient.tool_results(model.requests[1]) == [
        ToolResultItem(tool_call_id="c1", tool_name="lookup_order", output="order A1"),
        ToolResultItem(
            tool_call_id="c2", tool_name="refund_order", output="The user rejected this tool call."
        ),
    ]


async def test_an_orphaned_tool_call_gets_the_outcome_unknown_text() -> None:
    runner, model = agent_with(lambda request: ScriptedModelReply(text="ok"))
    transcript = started(runner)
    first = await agent_with(lambda request: calls(("c1", "refund_order", {})))[0].run_model_step(
        transcript.turn()
    )
    transcript.store(first.new_messages)
    transcript.store([runner.build_user_message("Next question")], turn_id="turn-2")
    assert runner.build_unfinished_turn_messages(transcript.turn()) == []
    await runner.run_model_step(transcript.turn())
    items = model.requests[0].input
    assert isinstance(items[2], ToolResultItem) and items[2].tool_call_id == "c1"
    assert items[2].output.startswith("The tool call's outcome is unknown")
    assert items[3] == UserTextItem(text="Next question")


async def test_after_the_model_call_limit_no_tools_are_offered_and_calls_are_not_run() -> None:
    runner, model = agent_with(
        lambda request: calls(("c9", "lookup_order", {"order_id": "A1"})),
        max_model_calls_per_turn=2,
    )
    transcript = started(runner)
    outcome = await runner.run_model_step(transcript.turn(run_state='{"model_calls":2}'))
    assert model.requests[0].tools == ()
    assert isinstance(outcome, TurnCompleted) and outcome.turn_error is None
    assert outcome.new_messages[-1].tool_output == (
        "The tool call was not run: this turn reached its limit of 2 model calls."
    )


async def test_instructions_function_and_resolve_model_read_the_session_settings() -> None:
    seen: list[InstructionContext] = []
    other = ScriptedModelClient(lambda request: ScriptedModelReply(text="from other"))

    async def instructions(context: InstructionContext) -> str:
        seen.append(context)
        return f"Speak {context.session_settings['language']}."

    runner, model = agent_with(
        lambda request: ScriptedModelReply(text="default"),
        instructions=instructions,
        resolve_model=lambda settings: other if settings.get("model") == "other" else None,
    )
    transcript = started(runner)
    settings = {"language": "French", "model": "other"}
    outcome = await runner.run_model_step(transcript.turn(session_settings=settings))
    assert isinstance(outcome, TurnCompleted) and outcome.new_messages[0].text == "from other"
    assert other.requests[0].instructions == "Speak French." and model.requests == []
    assert seen[0].flow_id == "session-1" and seen[0].turn_id == "turn-1"


async def test_a_function_tool_may_not_use_a_built_in_enabled_only_in_the_session() -> None:
    @function_tool(effect=ToolEffect.READ)
    def durable_wait(seconds: int) -> str:
        return ""

    runner, model = agent_with(lambda request: ScriptedModelReply(text="x"), tools=[durable_wait])
    transcript = started(runner)
    with pytest.raises(ValueError, match="tool durable_wait uses the name of an enabled built-in"):
        await runner.run_model_step(
            transcript.turn(built_ins=frozenset({BuiltInTool.DURABLE_WAIT}))
        )
    assert model.requests == []


async def test_a_planning_turn_offers_only_write_todos() -> None:
    runner, model = agent_with(
        lambda request: ScriptedModelReply(text="plan"),
        built_in_tools=frozenset({BuiltInTool.WRITE_TODOS, BuiltInTool.ASK_USER}),
        planning_tool_choice="required",
    )
    transcript = started(runner)
    turn = transcript.turn(
        built_ins=frozenset({BuiltInTool.WRITE_TODOS, BuiltInTool.ASK_USER}),
        interaction_mode=InteractionMode.PLANNING,
    )
    await runner.run_model_step(turn)
    [request] = model.requests
    assert [tool.name for tool in request.tools] == ["write_todos"]
    assert request.tool_choice is ToolChoice.REQUIRED
