"""LiteLLMModelClient on the OpenAI Responses API, over real HTTP to a loopback server."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dex_agents_ray.builtin_loop import (
    ModelCallMetadata,
    ModelOutputItem,
    ModelRequest,
    ModelSettings,
    ModelStreamEventType,
    ModelToolCall,
    ModelToolDefinition,
    ModelUsage,
    RecordingModelOutputWriter,
    ToolResultItem,
    UserTextItem,
)
from dex_agents_ray.litellm import LiteLLMModelClient
from tests.fake_provider import (
    RESPONSES_PATH,
    ErrorReply,
    FakeProviderServer,
    image,
    responses_stream,
)

ENCRYPTED = "gAAAAB+encrypted/reasoning=="
REASONING = {
    "type": "reasoning",
    "id": "rs_1",
    "summary": [{"type": "summary_text", "text": "The user wants the weather."}],
    "encrypted_content": ENCRYPTED,
}
MESSAGE = {
    "type": "message",
    "id": "msg_1",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "Let me look.", "annotations": []}],
}
CALL = {
    "type": "function_call",
    "id": "fc_1",
    "call_id": "call_weather_1",
    "name": "get_weather",
    "arguments": '{"city":"Paris"}',
    "status": "completed",
}
USAGE = {
    "input_tokens": 120,
    "input_tokens_details": {"cached_tokens": 64},
    "output_tokens": 40,
    "output_tokens_details": {"reasoning_tokens": 16},
    "total_tokens": 160,
}
WEATHER_TOOL = ModelToolDefinition(
    name="get_weather",
    description="Weather for a city.",
    parameters_schema={"type": "object", "properties": {"city": {"type": "string"}}},
)


def client(server: FakeProviderServer) -> LiteLLMModelClient:
    return LiteLLMModelClient(
        "openai/gpt-5-mini",
        api_base=server.openai_api_base,
        api_key_provider=lambda: "sk-test-responses",
    )


async def test_tool_calling_exchange_replays_encrypted_reasoning(
    server: FakeProviderServer,
) -> None:
    model = client(server)
    server.enqueue(RESPONSES_PATH, responses_stream(output=[REASONING, MESSAGE, CALL], usage=USAGE))
    request = ModelRequest(
        instructions="You report the weather.",
        input=[UserTextItem(text="Weather in Paris?")],
        tools=[WEATHER_TOOL],
        settings=ModelSettings(reasoning_effort="low", reasoning_summary="auto"),
    )
    writer = RecordingModelOutputWriter()

    first = await model.call_model(request, writer)

    assert [json.loads(item.item) for item in first.output] == [REASONING, MESSAGE, CALL]
    assert {(item.provider, item.api) for item in first.output} == {("openai", "responses")}
    assert [item.text for item in first.output] == [None, "Let me look.", None]
    assert first.tool_calls == (
        ModelToolCall(
            tool_call_id="call_weather_1", tool_name="get_weather", arguments='{"city":"Paris"}'
        ),
    )
    assert first.usage == ModelUsage(
        input_tokens=120, output_tokens=40, cached_input_tokens=64, reasoning_tokens=16
    )
    assert first.model_call_metadata == ModelCallMetadata(
        request_model="gpt-5-mini",
        response_model="gpt-5-mini-2025-08-07",
        provider_name="openai",
        response_id="resp_test_1",
        finish_reasons=("tool_calls",),
    )
    assert writer.text == "Let me look."
    assert writer.reasoning == "The user wants the weather."
    assert [event.type for event in writer.events][:2] == [ModelStreamEventType.REASONING_DELTA] * 2

    sent = server.bodies(RESPONSES_PATH)[0]
    assert sent["store"] is False
    assert sent["include"] == ["reasoning.encrypted_content"]
    assert sent["stream"] is True
    assert sent["instructions"] == "You report the weather."
    assert sent["reasoning"] == {"effort": "low", "summary": "auto"}
    assert sent["tool_choice"] == "auto"
    assert sent["tools"] == [
        {
            "type": "function",
            "name": "get_weather",
            "description": "Weather for a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        }
    ]
    assert sent["input"] == [{"role": "user", "content": "Weather in Paris?"}]
    assert "previous_response_id" not in sent

    server.enqueue(
        RESPONSES_PATH,
        responses_stream(
            output=[
                {
                    **MESSAGE,
                    "id": "msg_2",
                    "content": [{"type": "output_text", "text": "Sunny.", "annotations": []}],
                }
            ],
            usage=USAGE,
        ),
    )
    follow_up = ModelRequest(
        instructions=request.instructions,
        input=[
            *request.input,
            *first.output,
            ToolResultItem(
                tool_call_id="call_weather_1", tool_name="get_weather", output="Sunny, 21 C"
            ),
        ],
        tools=[WEATHER_TOOL],
    )
    second = await model.call_model(follow_up, RecordingModelOutputWriter())

    assert second.text == "Sunny."
    assert second.model_call_metadata is not None
    assert second.model_call_metadata.finish_reasons == ("stop",)
    replayed = server.requests[-1]
    assert replayed.body["input"] == [
        {"role": "user", "content": "Weather in Paris?"},
        REASONING,
        MESSAGE,
        CALL,
        {"type": "function_call_output", "call_id": "call_weather_1", "output": "Sunny, 21 C"},
    ]
    # The opaque blob reaches the provider as the exact bytes it sent.
    assert json.dumps(ENCRYPTED).encode() in replayed.raw_body
    assert replayed.body["store"] is False


async def test_items_from_another_provider_replay_as_text_and_tool_calls(
    server: FakeProviderServer,
) -> None:
    anthropic_item = ModelOutputItem(
        provider="anthropic",
        api="chat_completions",
        item=json.dumps(
            {
                "role": "assistant",
                "content": "Checking.",
                "thinking_blocks": [{"type": "thinking", "thinking": "hm", "signature": "SIG"}],
            }
        ),
        text="Checking.",
        tool_calls=[ModelToolCall(tool_call_id="toolu_1", tool_name="get_weather", arguments="{}")],
    )
    server.enqueue(RESPONSES_PATH, responses_stream(output=[MESSAGE], usage=USAGE))

    await client(server).call_model(
        ModelRequest(
            input=[
                UserTextItem(text="Hi"),
                anthropic_item,
                ToolResultItem(tool_call_id="toolu_1", tool_name="get_weather", output="Rain"),
            ],
            tools=[WEATHER_TOOL],
        ),
        RecordingModelOutputWriter(),
    )

    assert server.bodies(RESPONSES_PATH)[0]["input"] == [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Checking."},
        {"type": "function_call", "call_id": "toolu_1", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "toolu_1", "output": "Rain"},
    ]


async def test_images_become_input_image_parts(server: FakeProviderServer) -> None:
    chart, chart_bytes = image(10)
    screenshot, screenshot_bytes = image(200)
    server.enqueue(RESPONSES_PATH, responses_stream(output=[MESSAGE], usage=USAGE))

    await client(server).call_model(
        ModelRequest(
            input=[
                UserTextItem(text="What is this chart?", images=[chart]),
                ModelOutputItem(
                    provider="openai",
                    api="responses",
                    item=json.dumps(CALL),
                    tool_calls=[
                        ModelToolCall(
                            tool_call_id="call_weather_1", tool_name="get_weather", arguments="{}"
                        )
                    ],
                ),
                ToolResultItem(
                    tool_call_id="call_weather_1",
                    tool_name="get_weather",
                    output="Took a screenshot.",
                    images=[screenshot],
                ),
            ],
            image_bytes={chart.sha256: chart_bytes, screenshot.sha256: screenshot_bytes},
        ),
        RecordingModelOutputWriter(),
    )

    sent = server.bodies(RESPONSES_PATH)[0]["input"]
    assert sent[0] == {
        "role": "user",
        "content": [
            {"type": "input_text", "text": "What is this chart?"},
            {"type": "input_image", "image_url": data_url(chart_bytes), "detail": "auto"},
        ],
    }
    assert sent[2] == {
        "type": "function_call_output",
        "call_id": "call_weather_1",
        "output": [
            {"type": "input_text", "text": "Took a screenshot."},
            {"type": "input_image", "image_url": data_url(screenshot_bytes), "detail": "auto"},
        ],
    }


async def test_missing_image_bytes_raise_before_any_request(server: FakeProviderServer) -> None:
    chart, _ = image(10)

    with pytest.raises(ValueError, match=f"no bytes for image {chart.sha256}"):
        await client(server).call_model(
            ModelRequest(input=[UserTextItem(text="See", images=[chart])]),
            RecordingModelOutputWriter(),
        )
    assert server.requests == []


async def test_http_500_fails_the_call_once_without_retries(
    server: FakeProviderServer, litellm: Any
) -> None:
    server.enqueue(
        RESPONSES_PATH, ErrorReply(status=500, body={"error": {"message": "upstream exploded"}})
    )

    with pytest.raises(litellm.InternalServerError, match="upstream exploded"):
        await client(server).call_model(
            ModelRequest(input=[UserTextItem(text="Hi")]), RecordingModelOutputWriter()
        )
    assert len(server.requests) == 1


async def test_stream_without_completion_fails_clearly(server: FakeProviderServer) -> None:
    server.enqueue(RESPONSES_PATH, responses_stream(output=[MESSAGE], terminal=""))

    with pytest.raises(Exception, match="closed the responses stream before any terminal event"):
        await client(server).call_model(
            ModelRequest(input=[UserTextItem(text="Hi")]), RecordingModelOutputWriter()
        )
    assert len(server.requests) == 1


async def test_failed_response_fails_the_call_with_its_message(server: FakeProviderServer) -> None:
    reply = responses_stream(output=[], terminal="")
    failed = {
        "type": "response.failed",
        "sequence_number": 99,
        "response": {
            "id": "resp_failed",
            "object": "response",
            "created_at": 1,
            "status": "failed",
            "model": "gpt-5-mini",
            "output": [],
            "error": {"code": "server_error", "message": "the model crashed"},
        },
    }
    server.enqueue(RESPONSES_PATH, type(reply)(events=[*reply.events, ("response.failed", failed)]))

    # LiteLLM raises for the event itself; the client would raise ModelResponseError
    # for a failure event that LiteLLM passed through.
    with pytest.raises(Exception, match="the model crashed"):
        await client(server).call_model(
            ModelRequest(input=[UserTextItem(text="Hi")]), RecordingModelOutputWriter()
        )
    assert len(server.requests) == 1


def data_url(data: bytes) -> str:
    import base64

    return "data:image/png;base64," + base64.b64encode(data).decode()


async def test_known_non_reasoning_models_are_not_asked_for_encrypted_reasoning(
    server: FakeProviderServer,
) -> None:
    # gpt-4o refuses include=["reasoning.encrypted_content"] with an HTTP 400.
    model = LiteLLMModelClient(
        "openai/gpt-4o", api_base=server.openai_api_base, api_key_provider=lambda: "sk-test"
    )
    server.enqueue(RESPONSES_PATH, responses_stream(output=[MESSAGE], usage=USAGE))

    await model.call_model(
        ModelRequest(input=[UserTextItem(text="Hi")]), RecordingModelOutputWriter()
    )

    sent = server.bodies(RESPONSES_PATH)[0]
    assert "include" not in sent
    assert sent["store"] is False


async def test_incomplete_response_returns_its_output_with_a_length_finish(
    server: FakeProviderServer,
) -> None:
    reply = responses_stream(output=[MESSAGE], usage=USAGE, terminal="response.incomplete")
    name, last = reply.events[-1]
    last["response"]["incomplete_details"] = {"reason": "max_output_tokens"}
    server.enqueue(RESPONSES_PATH, reply)

    response = await client(server).call_model(
        ModelRequest(input=[UserTextItem(text="Hi")], settings=ModelSettings(max_output_tokens=16)),
        RecordingModelOutputWriter(),
    )

    assert name == "response.incomplete"
    assert response.text == "Let me look."
    assert response.model_call_metadata is not None
    assert response.model_call_metadata.finish_reasons == ("length",)
