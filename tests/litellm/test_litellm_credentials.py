"""Credentials reach the provider and nothing else: not repr, logs, results or errors."""

from __future__ import annotations

import logging
import pickle

import pytest

from dex_agents_ray.builtin_loop import (
    ModelRequest,
    ModelSettings,
    RecordingModelOutputWriter,
    UserTextItem,
)
from dex_agents_ray.litellm import LiteLLMModelClient
from tests.fake_provider import RESPONSES_PATH, ErrorReply, FakeProviderServer, responses_stream

SECRET = "sk-live-0123456789-do-not-leak"
MESSAGE = {
    "type": "message",
    "id": "msg_1",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "Hello.", "annotations": []}],
}
REQUEST = ModelRequest(input=[UserTextItem(text="Hi")])


async def test_api_key_provider_reaches_only_the_provider(
    server: FakeProviderServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="LiteLLM")
    calls: list[str] = []

    async def api_key() -> str:
        calls.append("called")
        return SECRET

    model = LiteLLMModelClient(
        "openai/gpt-5-mini", api_base=server.openai_api_base, api_key_provider=api_key
    )
    server.enqueue(
        RESPONSES_PATH,
        responses_stream(output=[MESSAGE]),
        ErrorReply(status=500, body={"error": {"message": "boom"}}),
    )

    response = await model.call_model(REQUEST, RecordingModelOutputWriter())
    with pytest.raises(Exception, match="boom") as raised:
        await model.call_model(REQUEST, RecordingModelOutputWriter())

    assert [request.headers["authorization"] for request in server.requests] == [
        f"Bearer {SECRET}"
    ] * 2
    assert calls == ["called", "called"]
    assert SECRET not in repr(model)
    assert SECRET not in repr(vars(model))  # the key is fetched per call, never kept
    assert SECRET.encode() not in pickle.dumps(response)
    error = raised.value
    assert SECRET not in f"{error}{error!r}{error.__cause__!r}"
    assert SECRET.encode() not in pickle.dumps(error)
    assert caplog.records, "debug logging was captured"
    assert SECRET not in caplog.text
    assert all(SECRET not in repr(record.args) for record in caplog.records)


async def test_environment_key_is_used_without_a_provider(
    server: FakeProviderServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    server.enqueue(RESPONSES_PATH, responses_stream(output=[MESSAGE]))

    await LiteLLMModelClient("openai/gpt-5-mini", api_base=server.openai_api_base).call_model(
        REQUEST, RecordingModelOutputWriter()
    )

    assert server.requests[0].headers["authorization"] == f"Bearer {SECRET}"


def test_repr_hides_credentials_in_the_base_url() -> None:
    model = LiteLLMModelClient(
        "openai/gpt-5-mini",
        api="responses",
        api_base=f"https://user:{SECRET}@llm.internal:8443/v1?key={SECRET}",
        api_key_provider=lambda: SECRET,
        request_options={"timeout": 30},
    )

    assert repr(model) == (
        "LiteLLMModelClient('openai/gpt-5-mini', api='responses', "
        "api_base='https://llm.internal:8443/v1')"
    )


@pytest.mark.parametrize("key", ["api_key", "model", "stream", "max_retries", "api_base"])
def test_request_options_refuse_credentials_and_owned_arguments(key: str) -> None:
    with pytest.raises(ValueError, match=f"may not (hold|set) '{key}'"):
        LiteLLMModelClient("openai/gpt-5-mini", request_options={key: "x"})


async def test_credentials_in_model_settings_are_refused_before_any_request(
    server: FakeProviderServer,
) -> None:
    model = LiteLLMModelClient("openai/gpt-5-mini", api_base=server.openai_api_base)
    request = ModelRequest(
        input=[UserTextItem(text="Hi")], settings=ModelSettings(extra_args={"api_key": SECRET})
    )

    with pytest.raises(ValueError, match="ModelSettings.extra_args may not hold 'api_key'"):
        await model.call_model(request, RecordingModelOutputWriter())
    assert server.requests == []


async def test_blank_key_from_the_provider_is_refused(server: FakeProviderServer) -> None:
    model = LiteLLMModelClient(
        "openai/gpt-5-mini", api_base=server.openai_api_base, api_key_provider=lambda: ""
    )

    with pytest.raises(ValueError, match="api_key_provider must return a non-empty str"):
        await model.call_model(REQUEST, RecordingModelOutputWriter())
    assert server.requests == []


async def test_request_options_and_extra_args_reach_the_provider(
    server: FakeProviderServer,
) -> None:
    model = LiteLLMModelClient(
        "openai/gpt-5-mini",
        api_base=server.openai_api_base,
        api_key_provider=lambda: SECRET,
        request_options={"extra_headers": {"X-Dex-Team": "support"}},
    )
    server.enqueue(RESPONSES_PATH, responses_stream(output=[MESSAGE]))

    await model.call_model(
        ModelRequest(
            input=[UserTextItem(text="Hi")],
            settings=ModelSettings(max_output_tokens=256, extra_args={"user": "customer-7"}),
        ),
        RecordingModelOutputWriter(),
    )

    [sent] = server.requests
    assert sent.headers["x-dex-team"] == "support"
    assert sent.body["user"] == "customer-7"
    assert sent.body["max_output_tokens"] == 256
