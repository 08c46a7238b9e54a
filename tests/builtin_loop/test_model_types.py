"""The built-in loop's model-call types: plain data, checked on construction."""

from __future__ import annotations

import pickle

import pytest

import dex_agents_ray.builtin_loop as builtin_loop
from dex_agents_ray.builtin_loop import (
    ModelCallMetadata,
    ModelOutputItem,
    ModelRequest,
    ModelResponse,
    ModelResponseError,
    ModelSettings,
    ModelStreamEvent,
    ModelStreamEventType,
    ModelToolCall,
    ModelToolDefinition,
    ModelUsage,
    NullModelOutputWriter,
    RecordingModelOutputWriter,
    ToolChoice,
    ToolResultItem,
    UserTextItem,
)
from dex_agents_ray.media import build_image_reference

PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de"
    "0000000c4944415408d763f8cfc0000003010100c9fe92ef0000000049454e44ae426082"
)
MODEL_LAYER_NAMES = {
    "ESTIMATED_IMAGE_INPUT_TOKENS",
    "SCRIPTED_PROVIDER",
    "ForcedToolChoiceSupport",
    "JsonValue",
    "ModelCallMetadata",
    "ModelClient",
    "ModelInputItem",
    "ModelOutputItem",
    "ModelOutputWriter",
    "ModelRequest",
    "ModelResponse",
    "ModelResponseError",
    "ModelSettings",
    "ModelStreamEvent",
    "ModelStreamEventType",
    "ModelToolCall",
    "ModelToolDefinition",
    "ModelUsage",
    "NullModelOutputWriter",
    "RecordingModelOutputWriter",
    "ScriptedModelClient",
    "ScriptedModelReply",
    "ScriptedResponder",
    "ScriptedToolCall",
    "ToolChoice",
    "ToolResultItem",
    "UserTextItem",
}


def call(tool_call_id: str = "c1") -> ModelToolCall:
    return ModelToolCall(tool_call_id=tool_call_id, tool_name="lookup", arguments='{"id": 1}')


def test_exports_the_model_layer() -> None:
    assert MODEL_LAYER_NAMES <= set(builtin_loop.__all__)
    assert len(builtin_loop.__all__) == len(set(builtin_loop.__all__))
    for name in builtin_loop.__all__:
        assert hasattr(builtin_loop, name), name


def test_request_and_response_are_plain_data_that_pickles() -> None:
    reference = build_image_reference(PNG, "memory://media")
    request = ModelRequest(
        instructions="Be brief.",
        input=[
            UserTextItem(text="Look", images=[reference]),
            ModelOutputItem(provider="p", api="a", item='{"x":1}', text="ok", tool_calls=[call()]),
            ToolResultItem(tool_call_id="c1", tool_name="lookup", output="found"),
        ],
        tools=[ModelToolDefinition(name="lookup", description="Find.", parameters_schema={})],
        tool_choice="required",
        settings=ModelSettings(max_output_tokens=100, thinking={"type": "enabled"}),
        image_bytes={reference.sha256: PNG},
    )
    response = ModelResponse(
        output=[ModelOutputItem(provider="p", api="a", item="{}", text="hi", tool_calls=[call()])],
        usage=ModelUsage(input_tokens=3, output_tokens=2),
        model_call_metadata=ModelCallMetadata(request_model="m", finish_reasons=["stop"]),
    )

    assert pickle.loads(pickle.dumps(request)) == request
    assert pickle.loads(pickle.dumps(response)) == response
    assert request.tool_choice is ToolChoice.REQUIRED
    assert isinstance(request.input, tuple) and isinstance(request.tools, tuple)
    assert request.images() == [reference]
    assert response.model_call_metadata is not None
    assert response.model_call_metadata.finish_reasons == ("stop",)


def test_response_joins_text_and_tool_calls_in_order() -> None:
    response = ModelResponse(
        output=[
            ModelOutputItem(provider="p", api="a", item="{}"),
            ModelOutputItem(provider="p", api="a", item="{}", text="Hello, "),
            ModelOutputItem(provider="p", api="a", item="{}", tool_calls=[call("c1")]),
            ModelOutputItem(
                provider="p", api="a", item="{}", text="world", tool_calls=[call("c2")]
            ),
        ]
    )

    assert response.text == "Hello, world"
    assert [c.tool_call_id for c in response.tool_calls] == ["c1", "c2"]
    assert response.usage == ModelUsage()


def test_usage_adds_up() -> None:
    total = ModelUsage(input_tokens=10, cached_input_tokens=4) + ModelUsage(
        output_tokens=7, reasoning_tokens=3
    )

    assert total == ModelUsage(
        input_tokens=10, output_tokens=7, cached_input_tokens=4, reasoning_tokens=3
    )


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: ModelToolCall(tool_call_id="", tool_name="t", arguments="{}"),
            "tool_call_id must not be empty",
        ),
        (
            lambda: ModelToolCall(tool_call_id="c", tool_name="t", arguments=None),
            "arguments must be a str",
        ),
        (lambda: UserTextItem(text=3), "UserTextItem.text must be a str"),
        (
            lambda: UserTextItem(text="x", images=["not a reference"]),
            r"images\[0\] must be AgentImageReference",
        ),
        (lambda: ModelOutputItem(provider="p", api="a", item=""), "item must not be empty"),
        (
            lambda: ModelRequest(input=["hello"]),
            r"input\[0\] must be UserTextItem or ModelOutputItem",
        ),
        (lambda: ModelRequest(input="hello"), "input must be a sequence"),
        (lambda: ModelRequest(tool_choice="sometimes"), "'sometimes' is not a valid ToolChoice"),
        (lambda: ModelRequest(tool_choice=ToolChoice.REQUIRED), "no tools are offered"),
        (lambda: ModelSettings(max_output_tokens=0), "max_output_tokens must be a positive int"),
        (lambda: ModelSettings(temperature=float("nan")), "temperature must be a finite number"),
        (lambda: ModelSettings(reasoning_effort=""), "reasoning_effort must not be empty"),
        (lambda: ModelUsage(input_tokens=-1), "input_tokens must be an int >= 0"),
        (lambda: ModelUsage(output_tokens=True), "output_tokens must be an int >= 0"),
    ],
)
def test_bad_fields_get_errors_naming_them(build: object, message: str) -> None:
    with pytest.raises((TypeError, ValueError), match=message):
        build()  # type: ignore[operator]


def test_a_tool_name_offered_twice_is_refused() -> None:
    tool = ModelToolDefinition(name="lookup", description="", parameters_schema={})

    with pytest.raises(ValueError, match="offers 'lookup' more than once"):
        ModelRequest(tools=[tool, tool])


def test_writers_record_or_drop_live_output() -> None:
    writer = RecordingModelOutputWriter()
    writer.write_reasoning_delta("Thinking")
    writer.write_text_delta("Hel")
    writer.write_text_delta("lo")
    NullModelOutputWriter().write_text_delta("dropped")

    assert writer.events == [
        ModelStreamEvent(type=ModelStreamEventType.REASONING_DELTA, text="Thinking"),
        ModelStreamEvent(type=ModelStreamEventType.TEXT_DELTA, text="Hel"),
        ModelStreamEvent(type=ModelStreamEventType.TEXT_DELTA, text="lo"),
    ]
    assert (writer.text, writer.reasoning) == ("Hello", "Thinking")
    assert ModelStreamEventType.TEXT_DELTA == "text_delta"


def test_response_error_carries_where_it_came_from() -> None:
    error = ModelResponseError("stream broke", provider="openai", api="responses")

    assert (str(error), error.provider, error.api) == ("stream broke", "openai", "responses")
    assert isinstance(error, RuntimeError)
