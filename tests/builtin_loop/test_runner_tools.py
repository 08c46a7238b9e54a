"""BuiltinLoopAgentRunner.execute_deferred_tool_call for function tools, and images."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

from dex_agents_ray.builtin_loop import (
    AgentDefinition,
    BuiltinLoopAgentRunner,
    FunctionToolResult,
    ModelRequest,
    ScriptedModelClient,
    ScriptedModelReply,
    ToolCallContext,
    UserTextItem,
    function_tool,
)
from dex_agents_ray.media import (
    MAX_IMAGES_PER_MESSAGE,
    ImageValidationError,
    InMemoryMediaStore,
    MediaStore,
)
from dex_agents_ray.session import (
    ImageUserMessageBuilder,
    QuestionAnswer,
    QuestionResolution,
    ToolCallStepOptions,
    ToolEffect,
    ToolExecutionError,
    ToolExecutionResult,
    ToolInputRequested,
    TurnCompleted,
)
from tests.builtin_loop.turns import Transcript, execution, record

PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de"
    "0000000c4944415408d763f8cfc0000003010100c9fe92ef0000000049454e44ae426082"
)
SEEN: list[ToolCallContext] = []


@dataclass
class Order:
    order_id: str
    total_cents: int


@function_tool(effect=ToolEffect.IDEMPOTENT_WRITE)
async def tag_order(order_id: str, context: ToolCallContext) -> str:
    """Tag an order."""
    SEEN.append(context)
    context.events.write_text_delta("tagging")
    return f"tagged {order_id}"


@function_tool(effect=ToolEffect.READ)
def get_order(order_id: str) -> Order:
    """Read an order."""
    return Order(order_id=order_id, total_cents=500)


@function_tool(effect=ToolEffect.READ)
def as_dict() -> dict[str, Any]:
    """A plain dict with output and images keys is JSON, not a FunctionToolResult."""
    return {"output": "x", "images": []}


@function_tool(effect=ToolEffect.READ)
async def screenshot(count: int, context: ToolCallContext) -> str | FunctionToolResult:
    """Take screenshots."""
    if context.media_store is None:
        return FunctionToolResult(output="Took nothing.", images=[_fake_reference()] * count)
    reference = await context.media_store.put_image(PNG)
    return FunctionToolResult(output="Took a screenshot.", images=[reference] * count)


@function_tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
def confirm_refund(amount_cents: int, context: ToolCallContext) -> str | ToolInputRequested:
    """Refund after the user confirms."""
    if not context.input_answers:
        return ToolInputRequested(question=f"Refund {amount_cents}?", choices=["yes", "no"])
    return f"answer: {context.input_answers[-1].answer}"


def _fake_reference() -> Any:
    from dex_agents_ray.media import build_image_reference

    return build_image_reference(PNG, "memory://elsewhere")


def make_runner(media_store: MediaStore | None = None) -> BuiltinLoopAgentRunner:
    definition = AgentDefinition(
        name="tools",
        instructions="Use tools.",
        model=ScriptedModelClient(lambda request: ScriptedModelReply(text="ok")),
        tools=[tag_order, get_order, as_dict, screenshot, confirm_refund],
    )
    return BuiltinLoopAgentRunner(definition, media_store=media_store)


async def test_a_function_tool_gets_its_call_context() -> None:
    SEEN.clear()
    events: list[Any] = []
    call = record("c1", "tag_order", arguments='{"order_id": "A1"}', effect=ToolEffect.READ)
    outcome = await make_runner().execute_deferred_tool_call(
        execution(call, attempt=2, events=events)
    )
    assert outcome == ToolExecutionResult(output="tagged A1")
    [context] = SEEN
    assert (context.flow_id, context.turn_id, context.tool_call_id) == (
        "session-1",
        "turn-1",
        "c1",
    )
    assert context.idempotency_key == "session-1/turn-1/c1" and context.attempt == 2
    assert context.effect is ToolEffect.READ and context.may_report_errors_as_failures
    assert [event.payload for event in events] == [{"text": "tagging"}]


@pytest.mark.parametrize(
    ("name", "arguments", "output"),
    [
        ("get_order", '{"order_id": "B2"}', '{"order_id": "B2", "total_cents": 500}'),
        ("as_dict", "{}", '{"output": "x", "images": []}'),
    ],
)
async def test_other_results_are_json(name: str, arguments: str, output: str) -> None:
    outcome = await make_runner().execute_deferred_tool_call(
        execution(record("c1", name, arguments=arguments))
    )
    assert outcome == ToolExecutionResult(output=output)


async def test_unknown_tools_and_bad_arguments_are_tool_failures() -> None:
    runner = make_runner()
    with pytest.raises(ToolExecutionError, match="^unknown tool missing$"):
        await runner.execute_deferred_tool_call(execution(record("c1", "missing")))
    with pytest.raises(ToolExecutionError) as raised:
        await runner.execute_deferred_tool_call(
            execution(record("c1", "get_order", arguments="{oops"))
        )
    assert raised.value.message == "invalid arguments for get_order: arguments are not valid JSON"


async def test_a_tool_asks_then_reads_the_answer() -> None:
    runner = make_runner()
    call = record("c1", "confirm_refund", arguments='{"amount_cents": 500}')
    asked = await runner.execute_deferred_tool_call(execution(call))
    assert asked == ToolInputRequested(question="Refund 500?", choices=["yes", "no"])
    answer = QuestionAnswer(
        interrupt_id="c1-input-1", resolution=QuestionResolution.ANSWERED, answer="yes"
    )
    done = await runner.execute_deferred_tool_call(execution(call, input_answers=[answer]))
    assert done == ToolExecutionResult(output="answer: yes")


async def test_images_need_a_media_store() -> None:
    with pytest.raises(ToolExecutionError, match="no media store"):
        await make_runner().execute_deferred_tool_call(
            execution(record("c1", "screenshot", arguments='{"count": 1}'))
        )


async def test_images_from_a_store_are_returned_and_checked() -> None:
    store = InMemoryMediaStore()
    runner = make_runner(store)
    outcome = await runner.execute_deferred_tool_call(
        execution(record("c1", "screenshot", arguments='{"count": 2}'))
    )
    assert isinstance(outcome, ToolExecutionResult)
    assert outcome.output == "Took a screenshot." and len(outcome.images) == 2
    too_many = f'{{"count": {MAX_IMAGES_PER_MESSAGE + 1}}}'
    with pytest.raises(ImageValidationError):
        await runner.execute_deferred_tool_call(
            execution(record("c1", "screenshot", arguments=too_many))
        )


async def test_a_runner_with_a_store_shows_images_to_the_model() -> None:
    store = InMemoryMediaStore()
    reference = await store.put_image(PNG)
    seen: list[ModelRequest] = []

    def respond(request: ModelRequest) -> ScriptedModelReply:
        seen.append(request)
        return ScriptedModelReply(text="A red pixel.")

    definition = AgentDefinition(
        name="vision", instructions="Describe.", model=ScriptedModelClient(respond)
    )
    with_store = BuiltinLoopAgentRunner(definition, media_store=store)
    assert isinstance(with_store, ImageUserMessageBuilder)
    assert not isinstance(BuiltinLoopAgentRunner(definition), ImageUserMessageBuilder)
    message = with_store.build_user_message_with_images("What is this?", [reference])
    assert message.images == (reference,)
    transcript = Transcript()
    transcript.store([message])
    outcome = await with_store.run_model_step(transcript.turn())
    assert isinstance(outcome, TurnCompleted)
    assert seen[0].input == (UserTextItem(text="What is this?", images=[reference]),)
    assert seen[0].image_bytes == {reference.sha256: PNG}
    await BuiltinLoopAgentRunner(definition).run_model_step(transcript.turn())
    assert seen[1].input == (UserTextItem(text="What is this?"),) and seen[1].image_bytes == {}


def test_a_function_tool_gives_its_step_options() -> None:
    options = ToolCallStepOptions(run_inline=True, timeout=timedelta(seconds=30))

    @function_tool(effect=ToolEffect.READ, step_options=options)
    async def quick() -> str:
        return "fast"

    definition = AgentDefinition(
        name="quick",
        instructions="Be quick.",
        model=ScriptedModelClient(lambda request: ScriptedModelReply(text="ok")),
        tools=[quick, get_order],
    )
    runner = BuiltinLoopAgentRunner(definition)
    assert runner.tool_call_step_options(record("c1", "quick")) is options
    assert runner.tool_call_step_options(record("c2", "get_order")) is None
    assert runner.tool_call_step_options(record("c3", "missing")) is None
    with pytest.raises(TypeError, match="step_options must be ToolCallStepOptions"):
        function_tool(effect=ToolEffect.READ, step_options={"run_inline": True})(quick.function)  # type: ignore[arg-type]
