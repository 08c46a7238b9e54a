"""LiteLLMModelClient on Anthropic: thinking blocks with signatures, replayed exactly.

The loopback server's ``/v1/messages`` speaks Anthropic's Messages SSE, and
LiteLLM reaches it through its real Anthropic HTTP path (``api_base``).
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from dex_agents_ray.builtin_loop import (
    ModelOutputItem,
    ModelRequest,
    ModelResponseError,
    ModelSettings,
    ModelToolDefinition,
    RecordingModelOutputWriter,
    ToolResultItem,
    UserTextItem,
)
from dex_agents_ray.litellm import LiteLLMModelClient
from dex_agents_ray.litellm._chat import read_chat_stream
from dex_agents_ray.litellm._convert import LiteLLMRoute
from tests.fake_provider import (
    MESSAGES_PATH,
    ErrorReply,
    FakeProviderServer,
    RawReply,
    anthropic_stream,
    image,
)

SIGNATURE = "EqQBCkYIBRgCIkB+/sig=="
SECOND_SIGNATURE = "ErcBCkYIBRgCIkD+/other=="
THINKING = {
    "type": "thinking",
    "thinking": "The user wants the weather in Paris.",
    "signature": SIGNATURE,
}
REDACTED = {"type": "redacted_thinking", "data": "EmwKAhgBEgy+redacted=="}
USAGE = {
    "input_tokens": 50,
    "cache_read_input_tokens": 300,
    "cache_creation_input_tokens": 0,
    "output_tokens": 80,
}
WEATHER_TOOL = ModelToolDefinition(
    name="get_weather",
    description="Weather for a city.",
    parameters_schema={"type": "object", "properties": {"city": {"type": "string"}}},
)
THINKING_ON = ModelSettings(thinking={"type": "enabled", "budget_tokens": 1024})


def claude(server: FakeProviderServer) -> LiteLLMModelClient:
    return LiteLLMModelClient(
        "anthropic/claude-sonnet-4-5",
        api_base=server.base_url,
        api_key_provider=lambda: "sk-ant-test",
    )


async def test_thinking_blocks_keep_signatures_and_replay_exactly(
    server: FakeProviderServer,
) -> None:
    model = claude(server)
    server.enqueue(
        MESSAGES_PATH,
        anthropic_stream(
            blocks=[
                THINKING,
                REDACTED,
                {"type": "text", "text": "Let me check."},
                {
                    "type": "tool_use",
                    "id": "toolu_01",
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                },
            ],
            usage=USAGE,
            stop_reason="tool_use",
        ),
    )
    request = ModelRequest(
        instructions="You report the weather.",
        input=[UserTextItem(text="Weather in Paris?")],
        tools=[WEATHER_TOOL],
        settings=THINKING_ON,
    )
    writer = RecordingModelOutputWriter()

    first = await model.call_model(request, writer)

    [item] = first.output
    assert (item.provider, item.api, item.text) == (
        "anthropic",
        "chat_completions",
        "Let me check.",
    )
    stored = json.loads(item.item)
    assert stored["thinking_blocks"] == [THINKING, REDACTED]
    assert stored["tool_calls"][0]["id"] == "toolu_01"
    assert json.loads(stored["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}
    assert writer.reasoning == THINKING["thinking"]
    assert writer.text == "Let me check."
    # Anthropic's prompt tokens include cache reads; cached tokens are part of them.
    assert first.usage.input_tokens == 350
    assert first.usage.cached_input_tokens == 300
    assert first.usage.output_tokens == 80
    assert first.model_call_metadata is not None
    assert first.model_call_metadata.provider_name == "anthropic"
    assert first.model_call_metadata.finish_reasons == ("tool_calls",)
    sent = server.bodies(MESSAGES_PATH)[0]
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert sent["system"] == [{"type": "text", "text": "You report the weather."}]
    assert server.requests[0].headers["x-api-key"] == "sk-ant-test"

    chart, chart_bytes = image(120)
    server.enqueue(
        MESSAGES_PATH,
        anthropic_stream(
            blocks=[{"type": "text", "text": "Sunny."}], usage=USAGE, stop_reason="end_turn"
        ),
    )
    second = await model.call_model(
        ModelRequest(
            instructions=request.instructions,
            input=[
                *request.input,
                *first.output,
                ToolResultItem(
                    tool_call_id="toolu_01", tool_name="get_weather", output="Sunny", images=[chart]
                ),
            ],
            tools=[WEATHER_TOOL],
            settings=THINKING_ON,
            image_bytes={chart.sha256: chart_bytes},
        ),
        RecordingModelOutputWriter(),
    )

    assert second.text == "Sunny."
    messages = server.bodies(MESSAGES_PATH)[1]["messages"]
    assert messages[1] == {
        "role": "assistant",
        "content": [
            THINKING,
            REDACTED,
            {"type": "text", "text": "Let me check."},
            {
                "type": "tool_use",
                "id": "toolu_01",
                "name": "get_weather",
                "input": {"city": "Paris"},
            },
        ],
    }
    assert json.dumps(SIGNATURE).encode() in server.requests[1].raw_body
    # Anthropic keeps images inside the tool result.
    assert messages[2] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_01",
                "content": [
                    {"type": "text", "text": "Sunny"},
                    {
                        "type": "image",
                        "source": {
                            "type": "base64",
                            "media_type": "image/png",
                            "data": base64.b64encode(chart_bytes).decode(),
                        },
                    },
                ],
            }
        ],
    }


async def test_interleaved_thinking_blocks_stay_apart(server: FakeProviderServer) -> None:
    second_thought = {
        "type": "thinking",
        "thinking": "Now the forecast.",
        "signature": SECOND_SIGNATURE,
    }
    server.enqueue(
        MESSAGES_PATH,
        anthropic_stream(
            blocks=[THINKING, {"type": "text", "text": "Hm."}, second_thought],
            usage=USAGE,
            stop_reason="end_turn",
        ),
    )

    response = await claude(server).call_model(
        ModelRequest(input=[UserTextItem(text="Think twice.")], settings=THINKING_ON),
        RecordingModelOutputWriter(),
    )

    assert json.loads(response.output[0].item)["thinking_blocks"] == [THINKING, second_thought]


async def test_thinking_from_a_duplicated_signature_chunk_is_not_doubled(litellm: Any) -> None:
    """LiteLLM 1.105 repeats a block's whole thinking text in its signature chunk."""
    from litellm.types.utils import Delta, ModelResponseStream, StreamingChoices

    def chunk(finish: str | None = None, **delta: Any) -> Any:
        return ModelResponseStream(
            id="chatcmpl-1",
            model="claude-sonnet-4-5",
            choices=[StreamingChoices(index=0, delta=Delta(**delta), finish_reason=finish)],
        )

    async def chunks() -> AsyncIterator[Any]:
        yield chunk(
            reasoning_content="Need ", thinking_blocks=[{"type": "thinking", "thinking": "Need "}]
        )
        yield chunk(
            reasoning_content="weather.",
            thinking_blocks=[{"type": "thinking", "thinking": "weather."}],
        )
        yield chunk(
            thinking_blocks=[
                {"type": "thinking", "thinking": "Need weather.", "signature": SIGNATURE}
            ]
        )
        yield chunk(content="Done.", finish="stop")

    route = LiteLLMRoute(
        model="anthropic/claude-sonnet-4-5",
        provider="anthropic",
        provider_model="claude-sonnet-4-5",
        api="chat_completions",
    )
    response = await read_chat_stream(chunks(), route, RecordingModelOutputWriter())

    assert json.loads(response.output[0].item)["thinking_blocks"] == [
        {"type": "thinking", "thinking": "Need weather.", "signature": SIGNATURE}
    ]


async def test_items_of_another_provider_drop_their_reasoning(server: FakeProviderServer) -> None:
    openai_reasoning = ModelOutputItem(
        provider="openai",
        api="responses",
        item=json.dumps({"type": "reasoning", "encrypted_content": "E"}),
    )
    openai_message = ModelOutputItem(
        provider="openai",
        api="responses",
        item=json.dumps({"type": "message"}),
        text="Earlier answer.",
    )
    server.enqueue(
        MESSAGES_PATH,
        anthropic_stream(
            blocks=[{"type": "text", "text": "Ok."}], usage=USAGE, stop_reason="end_turn"
        ),
    )

    await claude(server).call_model(
        ModelRequest(
            input=[
                UserTextItem(text="First"),
                openai_reasoning,
                openai_message,
                UserTextItem(text="Second"),
            ]
        ),
        RecordingModelOutputWriter(),
    )

    assert server.bodies(MESSAGES_PATH)[0]["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "First"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Earlier answer."}]},
        {"role": "user", "content": [{"type": "text", "text": "Second"}]},
    ]


async def test_http_500_fails_the_call_once(server: FakeProviderServer, litellm: Any) -> None:
    server.enqueue(MESSAGES_PATH, ErrorReply(status=500, body={"error": {"message": "overloaded"}}))

    with pytest.raises(litellm.InternalServerError, match="overloaded"):
        await claude(server).call_model(
            ModelRequest(input=[UserTextItem(text="Hi")]), RecordingModelOutputWriter()
        )
    assert len(server.requests) == 1


async def test_malformed_stream_fails_clearly(server: FakeProviderServer) -> None:
    server.enqueue(MESSAGES_PATH, RawReply(body=b"event: message_start\ndata: {not json\n\n"))

    with pytest.raises(ModelResponseError, match="carried no text, reasoning or tool calls"):
        await claude(server).call_model(
            ModelRequest(input=[UserTextItem(text="Hi")]), RecordingModelOutputWriter()
        )
