"""The shared loopback provider server answers the same script streamed or as JSON."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.fake_provider import (
    CHAT_PATH,
    MESSAGES_PATH,
    RESPONSES_PATH,
    ErrorReply,
    FakeProviderServer,
    JsonReply,
    anthropic_stream,
    chat_completion,
    chat_stream,
    responses_stream,
)

USAGE = {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19}
CALLS = [
    ("call_a", "lookup_order", '{"order_id": "42"}'),
    ("call_b", "lookup_customer", '{"customer_id": "c-7"}'),
]


@pytest.fixture
async def server() -> AsyncIterator[FakeProviderServer]:
    server = FakeProviderServer()
    await server.start()
    try:
        yield server
    finally:
        await server.close()


@pytest.fixture
async def client(server: FakeProviderServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.openai_api_base, timeout=10) as client:
        yield client


def sse_data(text: str) -> list[Any]:
    """The ``data:`` payloads of an SSE body, JSON-decoded except ``[DONE]``."""
    payloads: list[Any] = []
    for line in text.splitlines():
        if line.startswith("data: "):
            data = line.removeprefix("data: ")
            payloads.append(data if data == "[DONE]" else json.loads(data))
    return payloads


def test_openai_api_base_is_the_v1_root(server: FakeProviderServer) -> None:
    assert server.openai_api_base.startswith("http://127.0.0.1:")
    assert server.openai_api_base.endswith("/v1")
    assert server.openai_api_base == f"{server.base_url}/v1"


async def test_chat_stream_answers_json_without_stream_and_sse_with_it(
    server: FakeProviderServer, client: httpx.AsyncClient
) -> None:
    script = chat_stream(
        text="Looking it up.", reasoning="Order 42.", tool_calls=CALLS, usage=USAGE
    )
    server.enqueue(CHAT_PATH, script, script, script)
    messages = [{"role": "user", "content": "Where is order 42?"}]

    absent = await client.post("/chat/completions", json={"model": "m", "messages": messages})
    false = await client.post(
        "/chat/completions", json={"model": "m", "messages": messages, "stream": False}
    )
    streamed = await client.post(
        "/chat/completions", json={"model": "m", "messages": messages, "stream": True}
    )

    for response in (absent, false):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("application/json")
        body = response.json()
        assert body["object"] == "chat.completion"
        assert body["model"] == "qwen3-local"
        assert isinstance(body["id"], str) and isinstance(body["created"], int)
        [choice] = body["choices"]
        assert choice["index"] == 0
        assert choice["finish_reason"] == "tool_calls"
        assert choice["message"] == {
            "role": "assistant",
            "content": "Looking it up.",
            "reasoning_content": "Order 42.",
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "lookup_order", "arguments": '{"order_id": "42"}'},
                },
                {
                    "id": "call_b",
                    "type": "function",
                    "function": {"name": "lookup_customer", "arguments": '{"customer_id": "c-7"}'},
                },
            ],
        }
        assert body["usage"] == USAGE
        # The JSON twin of the stream is exactly what chat_completion builds.
        expected = chat_completion(
            text="Looking it up.", reasoning="Order 42.", tool_calls=CALLS, usage=USAGE
        )
        assert body == expected.body

    assert streamed.status_code == 200
    assert streamed.headers["content-type"].startswith("text/event-stream")
    chunks = sse_data(streamed.text)
    assert chunks[-1] == "[DONE]"
    assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks[:-1])
    text = "".join(
        choice["delta"].get("content") or "" for chunk in chunks[:-1] for choice in chunk["choices"]
    )
    assert text == "Looking it up."
    assert chunks[-2]["usage"] == USAGE

    bodies = server.bodies(CHAT_PATH)
    assert [body.get("stream") for body in bodies] == [None, False, True]
    assert all(body["messages"] == messages for body in bodies)
    assert [request.path for request in server.requests] == [CHAT_PATH] * 3


async def test_chat_text_only_stops_and_usage_defaults_to_zero(
    server: FakeProviderServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(CHAT_PATH, chat_stream(text="Hi!", model="other-model"))

    body = (await client.post("/chat/completions", json={"model": "x", "messages": []})).json()

    assert body["model"] == "other-model"
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "Hi!"}
    assert body["usage"] == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    assert body == chat_completion(text="Hi!", model="other-model").body


async def test_chat_tool_calls_only_have_null_content(
    server: FakeProviderServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(CHAT_PATH, chat_stream(tool_calls=CALLS[:1], usage=USAGE))

    body = (await client.post("/chat/completions", json={"model": "x", "messages": []})).json()

    message = body["choices"][0]["message"]
    assert message["content"] is None
    assert [call["id"] for call in message["tool_calls"]] == ["call_a"]
    assert body == chat_completion(tool_calls=CALLS[:1], usage=USAGE).body


async def test_json_reply_is_sent_as_it_is_even_to_a_streaming_request(
    server: FakeProviderServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(CHAT_PATH, chat_completion(text="Plain."), JsonReply(body={"custom": 1}))

    first = await client.post("/chat/completions", json={"stream": True, "messages": []})
    second = await client.post("/chat/completions", json={"messages": []})

    assert first.headers["content-type"].startswith("application/json")
    assert first.json()["choices"][0]["message"]["content"] == "Plain."
    assert second.json() == {"custom": 1}


async def test_error_replies_are_the_same_streamed_or_not(
    server: FakeProviderServer, client: httpx.AsyncClient
) -> None:
    error = ErrorReply(status=429, body={"error": {"message": "slow down"}}, headers={"X-A": "1"})
    server.enqueue(CHAT_PATH, error, error)

    for stream in (False, True):
        response = await client.post("/chat/completions", json={"stream": stream})
        assert response.status_code == 429
        assert response.json() == {"error": {"message": "slow down"}}
        assert response.headers["x-a"] == "1"


async def test_nothing_queued_is_a_599(
    server: FakeProviderServer, client: httpx.AsyncClient
) -> None:
    response = await client.post("/chat/completions", json={"messages": []})
    assert response.status_code == 599
    assert len(server.requests) == 1


async def test_responses_stream_answers_its_completed_response_without_stream(
    server: FakeProviderServer, client: httpx.AsyncClient
) -> None:
    output = [
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Shipped.", "annotations": []}],
        },
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_a",
            "name": "lookup_order",
            "arguments": '{"order_id": "42"}',
            "status": "completed",
        },
    ]
    usage = {"input_tokens": 5, "output_tokens": 3, "total_tokens": 8}
    script = responses_stream(output=output, usage=usage)
    server.enqueue(RESPONSES_PATH, script, script)

    plain = await client.post("/responses", json={"model": "m", "input": "hi"})
    streamed = await client.post("/responses", json={"model": "m", "input": "hi", "stream": True})

    assert plain.headers["content-type"].startswith("application/json")
    body = plain.json()
    assert body["object"] == "response"
    assert body["status"] == "completed"
    assert body["output"] == output
    assert body["usage"] == usage
    events = sse_data(streamed.text)
    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"] == body
    assert [body.get("stream") for body in server.bodies(RESPONSES_PATH)] == [None, True]


async def test_responses_stream_without_an_end_is_streamed_even_without_stream(
    server: FakeProviderServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(RESPONSES_PATH, responses_stream(output=[], terminal=""))

    response = await client.post("/responses", json={"model": "m", "input": "hi"})

    assert response.headers["content-type"].startswith("text/event-stream")
    assert sse_data(response.text)[0]["type"] == "response.created"


async def test_anthropic_messages_keep_streaming(
    server: FakeProviderServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(
        MESSAGES_PATH,
        anthropic_stream(
            blocks=[{"type": "text", "text": "Hi"}],
            usage={"input_tokens": 3, "output_tokens": 1},
            stop_reason="end_turn",
        ),
    )

    response = await client.post("/messages", json={"model": "m"})

    assert response.headers["content-type"].startswith("text/event-stream")
    assert sse_data(response.text)[-1] == {"type": "message_stop"}
