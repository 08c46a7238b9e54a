"""LiteLLMModelClient on streaming Chat Completions, over real HTTP to a loopback server."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from dex_agents_ray.builtin_loop import (
    ModelCallMetadata,
    ModelOutputItem,
    ModelRequest,
    ModelResponseError,
    ModelSettings,
    ModelToolCall,
    ModelToolDefinition,
    ModelUsage,
    RecordingModelOutputWriter,
    ToolChoice,
    ToolResultItem,
    UserTextItem,
)
from dex_agents_ray.litellm import TOOL_RESULT_IMAGES_TEXT, LiteLLMModelClient
from tests.fake_provider import (
    CHAT_PATH,
    ErrorReply,
    FakeProviderServer,
    RawReply,
    chat_stream,
    image,
)

USAGE = {
    "prompt_tokens": 90,
    "completion_tokens": 30,
    "total_tokens": 120,
    "prompt_tokens_details": {"cached_tokens": 40},
    "completion_tokens_details": {"reasoning_tokens": 12},
}
LOOKUP_TOOL = ModelToolDefinition(
    name="lookup_order",
    description="Look up an order by its ID.",
    parameters_schema={"type": "object", "properties": {"order_id": {"type": "string"}}},
)


def vllm_client(server: FakeProviderServer) -> LiteLLMModelClient:
    """A provider other than OpenAI: streaming Chat Completions without being asked."""
    return LiteLLMModelClient(
        "hosted_vllm/qwen3-local",
        api_base=server.openai_api_base,
        api_key_provider=lambda: "sk-test-chat",
    )


def data_url(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


async def test_tool_calling_exchange_on_chat_completions(server: FakeProviderServer) -> None:
    model = vllm_client(server)
    server.enqueue(
        CHAT_PATH,
        chat_stream(
            text="Looking it up.",
            reasoning="The user wants order 42.",
            tool_calls=[("call_a", "lookup_order", '{"order_id": "42"}')],
            usage=USAGE,
        ),
    )
    request = ModelRequest(
        instructions="You help with orders.",
        input=[UserTextItem(text="Where is order 42?")],
        tools=[LOOKUP_TOOL],
        tool_choice=ToolChoice.REQUIRED,
        settings=ModelSettings(temperature=0.2, max_output_tokens=500),
    )
    writer = RecordingModelOutputWriter()

    first = await model.call_model(request, writer)

    assert writer.text == "Looking it up."
    assert writer.reasoning == "The user wants order 42."
    [item] = first.output
    assert (item.provider, item.api, item.text) == (
        "hosted_vllm",
        "chat_completions",
        "Looking it up.",
    )
    assert json.loads(item.item) == {
        "role": "assistant",
        "content": "Looking it up.",
        "tool_calls": [
            {
                "id": "call_a",
                "type": "function",
                "function": {"name": "lookup_order", "arguments": '{"order_id": "42"}'},
            }
        ],
        "reasoning_content": "The user wants order 42.",
    }
    assert first.tool_calls == (
        ModelToolCall(
            tool_call_id="call_a", tool_name="lookup_order", arguments='{"order_id": "42"}'
        ),
    )
    assert first.usage == ModelUsage(
        input_tokens=90, output_tokens=30, cached_input_tokens=40, reasoning_tokens=12
    )
    assert first.model_call_metadata == ModelCallMetadata(
        request_model="qwen3-local",
        response_model="qwen3-local",
        provider_name="hosted_vllm",
        response_id="chatcmpl-test",
        finish_reasons=("tool_calls",),
    )
    sent = server.bodies(CHAT_PATH)[0]
    assert sent["messages"] == [
        {"role": "system", "content": "You help with orders."},
        {"role": "user", "content": "Where is order 42?"},
    ]
    assert sent["stream"] is True
    assert sent["stream_options"] == {"include_usage": True}
    assert sent["tool_choice"] == "required"
    assert sent["temperature"] == 0.2
    assert sent["max_tokens"] == 500
    assert sent["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "lookup_order",
                "description": "Look up an order by its ID.",
                "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
            },
        }
    ]

    server.enqueue(CHAT_PATH, chat_stream(text="It ships today.", usage=USAGE))
    second = await model.call_model(
        ModelRequest(
            instructions=request.instructions,
            input=[
                *request.input,
                *first.output,
                ToolResultItem(tool_call_id="call_a", tool_name="lookup_order", output="shipping"),
            ],
            tools=[LOOKUP_TOOL],
        ),
        RecordingModelOutputWriter(),
    )

    assert second.text == "It ships today."
    assert second.tool_calls == ()
    assert server.bodies(CHAT_PATH)[1]["messages"][2:] == [
        json.loads(item.item),
        {"role": "tool", "tool_call_id": "call_a", "content": "shipping"},
    ]


async def test_openai_model_uses_chat_completions_when_asked(server: FakeProviderServer) -> None:
    model = LiteLLMModelClient(
        "openai/gpt-4o-mini",
        api="chat_completions",
        api_base=server.openai_api_base,
        api_key_provider=lambda: "sk-test-chat",
    )
    server.enqueue(CHAT_PATH, chat_stream(text="Hi!", usage=USAGE))

    response = await model.call_model(
        ModelRequest(input=[UserTextItem(text="Hello")]), RecordingModelOutputWriter()
    )

    assert (response.output[0].provider, response.output[0].api) == ("openai", "chat_completions")
    assert response.text == "Hi!"
    assert server.requests[0].path == CHAT_PATH


async def test_responses_items_replay_as_text_and_tool_calls(server: FakeProviderServer) -> None:
    def responses_item(item: dict[str, Any], **fields: Any) -> ModelOutputItem:
        return ModelOutputItem(provider="openai", api="responses", item=json.dumps(item), **fields)

    reasoning = responses_item({"type": "reasoning", "id": "rs_1", "encrypted_content": "ENC"})
    message = responses_item({"type": "message", "id": "m"}, text="Two lookups.")
    call_1 = responses_item(
        {"type": "function_call", "call_id": "c1"},
        tool_calls=[
            ModelToolCall(tool_call_id="c1", tool_name="lookup_order", arguments='{"order_id":"1"}')
        ],
    )
    call_2 = responses_item(
        {"type": "function_call", "call_id": "c2"},
        tool_calls=[
            ModelToolCall(tool_call_id="c2", tool_name="lookup_order", arguments='{"order_id":"2"}')
        ],
    )
    server.enqueue(CHAT_PATH, chat_stream(text="Both shipped.", usage=USAGE))

    await vllm_client(server).call_model(
        ModelRequest(
            input=[
                UserTextItem(text="Orders 1 and 2?"),
                reasoning,
                message,
                call_1,
                call_2,
                ToolResultItem(tool_call_id="c1", tool_name="lookup_order", output="shipped"),
                ToolResultItem(tool_call_id="c2", tool_name="lookup_order", output="shipped"),
            ],
            tools=[LOOKUP_TOOL],
        ),
        RecordingModelOutputWriter(),
    )

    assert server.bodies(CHAT_PATH)[0]["messages"] == [
        {"role": "user", "content": "Orders 1 and 2?"},
        {
            "role": "assistant",
            "content": "Two lookups.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "lookup_order", "arguments": '{"order_id":"1"}'},
                },
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "lookup_order", "arguments": '{"order_id":"2"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "shipped"},
        {"role": "tool", "tool_call_id": "c2", "content": "shipped"},
    ]


async def test_images_become_image_url_parts_and_follow_tool_messages(
    server: FakeProviderServer,
) -> None:
    photo, photo_bytes = image(30)
    first_shot, first_bytes = image(60)
    second_shot, second_bytes = image(90)
    calls = [
        ModelToolCall(tool_call_id="s1", tool_name="screenshot", arguments="{}"),
        ModelToolCall(tool_call_id="s2", tool_name="screenshot", arguments="{}"),
    ]
    server.enqueue(CHAT_PATH, chat_stream(text="I see two screens.", usage=USAGE))

    await vllm_client(server).call_model(
        ModelRequest(
            input=[
                UserTextItem(text="Compare with this photo.", images=[photo]),
                ModelOutputItem(
                    provider="anthropic", api="chat_completions", item="{}", tool_calls=calls
                ),
                ToolResultItem(
                    tool_call_id="s1", tool_name="screenshot", output="first", images=[first_shot]
                ),
                ToolResultItem(
                    tool_call_id="s2", tool_name="screenshot", output="second", images=[second_shot]
                ),
            ],
            image_bytes={
                photo.sha256: photo_bytes,
                first_shot.sha256: first_bytes,
                second_shot.sha256: second_bytes,
            },
        ),
        RecordingModelOutputWriter(),
    )

    messages = server.bodies(CHAT_PATH)[0]["messages"]
    assert messages[0] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "Compare with this photo."},
            {"type": "image_url", "image_url": {"url": data_url(photo_bytes)}},
        ],
    }
    assert messages[2:] == [
        {"role": "tool", "tool_call_id": "s1", "content": "first"},
        {"role": "tool", "tool_call_id": "s2", "content": "second"},
        {
            "role": "user",
            "content": [
                {
                    "type": "text",
                    "text": TOOL_RESULT_IMAGES_TEXT.format(
                        tool_name="screenshot", tool_call_id="s1"
                    ),
                },
                {"type": "image_url", "image_url": {"url": data_url(first_bytes)}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "The screenshot tool call s2 returned these images."},
                {"type": "image_url", "image_url": {"url": data_url(second_bytes)}},
            ],
        },
    ]


async def test_http_500_fails_the_call_once_without_retries(
    server: FakeProviderServer, litellm: Any
) -> None:
    server.enqueue(CHAT_PATH, ErrorReply(status=500, body={"error": {"message": "GPU on fire"}}))

    with pytest.raises(litellm.InternalServerError, match="GPU on fire"):
        await vllm_client(server).call_model(
            ModelRequest(input=[UserTextItem(text="Hi")]), RecordingModelOutputWriter()
        )
    assert len(server.requests) == 1


async def test_malformed_stream_fails_clearly(server: FakeProviderServer) -> None:
    server.enqueue(CHAT_PATH, RawReply(body=b"data: {this is not json\n\n"))

    # LiteLLM skips the line it cannot parse; the client refuses the empty answer.
    with pytest.raises(ModelResponseError, match="carried no text, reasoning or tool calls"):
        await vllm_client(server).call_model(
            ModelRequest(input=[UserTextItem(text="Hi")]), RecordingModelOutputWriter()
        )
    assert len(server.requests) == 1


async def test_stream_cut_before_finish_reason_fails(server: FakeProviderServer) -> None:
    cut = chat_stream(text="Partial answer")
    server.enqueue(CHAT_PATH, type(cut)(events=cut.events[:2]))

    with pytest.raises(Exception, match="finish_reason") as raised:
        await vllm_client(server).call_model(
            ModelRequest(input=[UserTextItem(text="Hi")]), RecordingModelOutputWriter()
        )
    assert (
        not isinstance(raised.value, ModelResponseError) or raised.value.api == "chat_completions"
    )
