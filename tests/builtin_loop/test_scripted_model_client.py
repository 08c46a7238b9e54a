"""ScriptedModelClient: a deterministic model for demos and tests."""

from __future__ import annotations

import hashlib
import json

import pytest

from dex_agents_ray.builtin_loop import (
    ESTIMATED_IMAGE_INPUT_TOKENS,
    SCRIPTED_PROVIDER,
    ModelClient,
    ModelOutputItem,
    ModelRequest,
    ModelSettings,
    ModelStreamEventType,
    ModelToolCall,
    ModelUsage,
    RecordingModelOutputWriter,
    ScriptedModelClient,
    ScriptedModelReply,
    ScriptedToolCall,
    ToolResultItem,
    UserTextItem,
)
from dex_agents_ray.media import build_image_reference

PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de"
    "0000000c4944415408d763f8cfc0000003010100c9fe92ef0000000049454e44ae426082"
)


def reply_as_demo_model(request: ModelRequest) -> ScriptedModelReply:
    """The spec's demo script."""
    results = ScriptedModelClient.tool_results(request)
    if results:
        return ScriptedModelReply(text="; ".join(result.output for result in results))
    return ScriptedModelReply(text=f"Demo reply: {ScriptedModelClient.user_texts(request)[-1]}")


async def test_the_demo_script_answers_and_summarizes_tool_results() -> None:
    model: ModelClient = ScriptedModelClient(reply_as_demo_model)
    writer = RecordingModelOutputWriter()

    first = await model.call_model(
        ModelRequest(input=[UserTextItem(text="Hello"), UserTextItem(text="Find order 7")]), writer
    )
    after_tools = await model.call_model(
        ModelRequest(
            input=[
                UserTextItem(text="Find order 7"),
                ModelOutputItem(
                    provider=SCRIPTED_PROVIDER,
                    api=SCRIPTED_PROVIDER,
                    item="{}",
                    tool_calls=[
                        ModelToolCall(tool_call_id="a", tool_name="lookup", arguments="{}")
                    ],
                ),
                ToolResultItem(tool_call_id="a", tool_name="lookup", output="order 7: shipped"),
            ]
        ),
        RecordingModelOutputWriter(),
    )

    assert first.text == "Demo reply: Find order 7"
    assert writer.text == "Demo reply: Find order 7"
    assert after_tools.text == "order 7: shipped"


async def test_reply_with_tool_calls_reasoning_and_usage() -> None:
    async def respond(request: ModelRequest) -> ScriptedModelReply:
        return ScriptedModelReply(
            text="Checking.",
            reasoning="Look it up first.",
            tool_calls=[
                ScriptedToolCall(tool_name="lookup", arguments={"order_id": "7"}),
                ScriptedToolCall(tool_name="refund", arguments='{"cents": 5}', tool_call_id="mine"),
            ],
            usage=ModelUsage(input_tokens=11, output_tokens=5),
        )

    writer = RecordingModelOutputWriter()
    response = await ScriptedModelClient(respond).call_model(
        ModelRequest(input=[UserTextItem(text="Refund order 7")]), writer
    )

    [item] = response.output
    assert (item.provider, item.api, item.text) == (
        SCRIPTED_PROVIDER,
        SCRIPTED_PROVIDER,
        "Checking.",
    )
    generated, explicit = item.tool_calls
    assert generated.tool_name == "lookup" and json.loads(generated.arguments) == {"order_id": "7"}
    assert generated.tool_call_id.startswith("call_") and "/" not in generated.tool_call_id
    assert explicit == ModelToolCall(
        tool_call_id="mine", tool_name="refund", arguments='{"cents": 5}'
    )
    assert json.loads(item.item)["reasoning"] == "Look it up first."
    assert [event.type for event in writer.events] == [
        ModelStreamEventType.REASONING_DELTA,
        ModelStreamEventType.TEXT_DELTA,
    ]
    assert response.usage == ModelUsage(input_tokens=11, output_tokens=5)
    assert response.model_call_metadata is not None
    assert response.model_call_metadata.finish_reasons == ("tool_calls",)


async def test_generated_tool_call_ids_repeat_on_a_rerun_and_differ_between_calls() -> None:
    def respond(request: ModelRequest) -> ScriptedModelReply:
        return ScriptedModelReply(
            tool_calls=[ScriptedToolCall(tool_name="a"), ScriptedToolCall(tool_name="b")]
        )

    request = ModelRequest(input=[UserTextItem(text="Go")])
    later = ModelRequest(input=[UserTextItem(text="Go"), UserTextItem(text="Again")])

    first = await ScriptedModelClient(respond).call_model(request, RecordingModelOutputWriter())
    rerun = await ScriptedModelClient(respond).call_model(request, RecordingModelOutputWriter())
    other = await ScriptedModelClient(respond).call_model(later, RecordingModelOutputWriter())

    ids = [call.tool_call_id for call in first.tool_calls]
    assert ids == [call.tool_call_id for call in rerun.tool_calls]
    assert len(set(ids)) == 2
    assert not set(ids) & {call.tool_call_id for call in other.tool_calls}
    assert first == rerun


@pytest.mark.parametrize(
    "text",
    ["plain", 'quote " and \\ backslash', "controls \x00\x01\x1f\x7f\n\t\b\f\r", "é 中 \u2028 😀"],
)
async def test_the_response_id_digests_the_request_as_compact_json(text: str) -> None:
    # The ID is stable across processes and versions: a sha256 of the request as
    # compact JSON, non-ASCII text as UTF-8.
    request = ModelRequest(
        instructions=f"Be brief. {text}",
        input=[
            UserTextItem(text=text),
            ModelOutputItem(provider=SCRIPTED_PROVIDER, api=SCRIPTED_PROVIDER, item=text),
            ToolResultItem(tool_call_id="c1", tool_name="t", output=text),
        ],
    )
    response = await ScriptedModelClient(lambda _: ScriptedModelReply(text="ok")).call_model(
        request, RecordingModelOutputWriter()
    )
    parts = [
        request.instructions,
        ["user", text, []],
        ["model", SCRIPTED_PROVIDER, SCRIPTED_PROVIDER, text],
        ["tool", "c1", text],
    ]
    encoded = json.dumps(parts, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    digest = hashlib.sha256(encoded).hexdigest()
    assert response.model_call_metadata is not None
    assert response.model_call_metadata.response_id == f"scripted_{digest[:24]}"


def test_tool_results_are_those_after_the_last_model_output() -> None:
    def output(call_id: str) -> ModelOutputItem:
        return ModelOutputItem(
            provider="p",
            api="a",
            item="{}",
            tool_calls=[ModelToolCall(tool_call_id=call_id, tool_name="t", arguments="{}")],
        )

    def result(call_id: str) -> ToolResultItem:
        return ToolResultItem(tool_call_id=call_id, tool_name="t", output=call_id)

    request = ModelRequest(
        input=[
            UserTextItem(text="one"),
            output("a"),
            result("a"),
            UserTextItem(text="two"),
            output("b"),
            result("b"),
            result("c"),
            UserTextItem(text="continue"),
        ]
    )

    assert [item.output for item in ScriptedModelClient.tool_results(request)] == ["b", "c"]
    assert ScriptedModelClient.user_texts(request) == ["one", "two", "continue"]
    assert ScriptedModelClient.tool_results(ModelRequest(input=[UserTextItem(text="x")])) == []


async def test_requests_keeps_only_the_latest() -> None:
    model = ScriptedModelClient(
        lambda request: ScriptedModelReply(text="ok"), max_recorded_requests=2
    )

    for text in ("a", "b", "c"):
        await model.call_model(
            ModelRequest(input=[UserTextItem(text=text)]), RecordingModelOutputWriter()
        )

    assert [ScriptedModelClient.user_texts(request) for request in model.requests] == [["b"], ["c"]]


def test_estimates_by_bytes_and_counts_images() -> None:
    model = ScriptedModelClient(lambda request: ScriptedModelReply())
    reference = build_image_reference(PNG, "memory://media")

    assert model.estimate_input_tokens(ModelRequest(input=[UserTextItem(text="x" * 30)])) == 10
    with_image = ModelRequest(input=[UserTextItem(text="x" * 30, images=[reference])])
    assert model.estimate_input_tokens(with_image) == 10 + ESTIMATED_IMAGE_INPUT_TOKENS
    assert model.supports_forced_tool_choice(ModelSettings(reasoning_effort="high")) is True


async def test_a_script_that_returns_something_else_fails_the_call() -> None:
    model = ScriptedModelClient(lambda request: "just text")  # type: ignore[arg-type,return-value]

    with pytest.raises(TypeError, match="must return a ScriptedModelReply, not str"):
        await model.call_model(ModelRequest(), RecordingModelOutputWriter())


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: ScriptedToolCall(tool_name=""), "tool_name must be a non-empty str"),
        (lambda: ScriptedToolCall(tool_name="t", tool_call_id="a/b"), "without '/'"),
        (
            lambda: ScriptedModelReply(
                tool_calls=[
                    ScriptedToolCall(tool_name="t", tool_call_id="x"),
                    ScriptedToolCall(tool_name="u", tool_call_id="x"),
                ]
            ),
            "repeats a tool_call_id",
        ),
        (lambda: ScriptedModelReply(text=5), "text must be a str or None"),
        (lambda: ScriptedModelClient("not callable"), "respond must be callable"),
        (lambda: ScriptedModelClient(print, max_recorded_requests=-1), "max_recorded_requests"),
    ],
)
def test_bad_scripts_get_errors_naming_the_field(build: object, message: str) -> None:
    with pytest.raises((TypeError, ValueError), match=message):
        build()  # type: ignore[operator]
