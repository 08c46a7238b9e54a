"""Provider rules that need no server: routes, tool result images, estimates, tool choice."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dex_agents_ray.builtin_loop import (
    ESTIMATED_IMAGE_INPUT_TOKENS,
    ModelOutputItem,
    ModelRequest,
    ModelSettings,
    ModelToolCall,
    ToolResultItem,
    UserTextItem,
)
from dex_agents_ray.litellm import (
    TOOL_RESULT_IMAGES_OMITTED_TEXT,
    TOOL_RESULT_IMAGES_TEXT,
    LiteLLMApi,
    LiteLLMModelClient,
)
from dex_agents_ray.litellm._convert import build_chat_messages, build_responses_input
from tests.fake_provider import image

PHOTO, PHOTO_BYTES = image(1)
SHOT_A, SHOT_A_BYTES = image(2)
SHOT_B, SHOT_B_BYTES = image(3)
CALL = ModelToolCall(tool_call_id="t1", tool_name="screenshot", arguments="{}")
REQUEST = ModelRequest(
    input=[
        UserTextItem(text="Look", images=[PHOTO]),
        ModelOutputItem(provider="scripted", api="scripted", item="{}", tool_calls=[CALL]),
        ToolResultItem(
            tool_call_id="t1", tool_name="screenshot", output="Two shots.", images=[SHOT_A, SHOT_B]
        ),
    ],
    image_bytes={
        PHOTO.sha256: PHOTO_BYTES,
        SHOT_A.sha256: SHOT_A_BYTES,
        SHOT_B.sha256: SHOT_B_BYTES,
    },
)
OMITTED = "[The tool returned 2 images; this model does not receive images from tool results.]"


@pytest.mark.parametrize(
    ("model", "provider", "api"),
    [
        ("openai/gpt-5-mini", "openai", "responses"),
        ("gpt-5-mini", "openai", "responses"),
        ("anthropic/claude-sonnet-4-5", "anthropic", "chat_completions"),
        ("gemini/gemini-2.5-pro", "gemini", "chat_completions"),
        ("bedrock/anthropic.claude-sonnet-4-5-v1:0", "bedrock", "chat_completions"),
    ],
)
def test_openai_models_use_the_responses_api_and_others_chat(
    litellm: Any, model: str, provider: str, api: str
) -> None:
    route = LiteLLMModelClient(model).route()

    assert (route.provider, route.api) == (provider, api)


def test_api_can_be_chosen_and_is_checked(litellm: Any) -> None:
    assert (
        LiteLLMModelClient("anthropic/claude-sonnet-4-5", api="responses").route().api
        == "responses"
    )
    assert LiteLLMModelClient("openai/gpt-5", api=LiteLLMApi.CHAT_COMPLETIONS).route().api == (
        "chat_completions"
    )
    with pytest.raises(ValueError, match="api must be 'responses', 'chat_completions' or None"):
        LiteLLMModelClient("openai/gpt-5", api="completions")
    with pytest.raises(ValueError, match="model must be a non-empty str"):
        LiteLLMModelClient(" ")


@pytest.mark.parametrize("model", ["gemini/gemini-2.5-pro", "vertex_ai/gemini-3-pro-preview"])
def test_gemini_sees_a_note_instead_of_tool_result_images(litellm: Any, model: str) -> None:
    route = LiteLLMModelClient(model).route()

    messages = build_chat_messages(REQUEST, route)

    assert messages[0]["content"][1]["type"] == "image_url"  # user images still go
    assert messages[2:] == [
        {"role": "tool", "tool_call_id": "t1", "content": f"Two shots.\n{OMITTED}"}
    ]
    assert OMITTED == TOOL_RESULT_IMAGES_OMITTED_TEXT.format(images="2 images")


def test_gemini_on_the_responses_api_gets_the_note_in_the_function_call_output(
    litellm: Any,
) -> None:
    route = LiteLLMModelClient("gemini/gemini-2.5-pro", api="responses").route()

    items = build_responses_input(REQUEST, route)

    assert items[-1] == {
        "type": "function_call_output",
        "call_id": "t1",
        "output": f"Two shots.\n{OMITTED}",
    }


def test_bedrock_keeps_tool_result_images_in_the_tool_message(litellm: Any) -> None:
    route = LiteLLMModelClient("bedrock/anthropic.claude-sonnet-4-5-v1:0").route()

    messages = build_chat_messages(REQUEST, route)

    assert len(messages) == 3
    assert [part["type"] for part in messages[2]["content"]] == ["text", "image_url", "image_url"]


def test_claude_on_vertex_gets_the_images_in_a_following_user_message(litellm: Any) -> None:
    route = LiteLLMModelClient("vertex_ai/claude-sonnet-4-5").route()

    messages = build_chat_messages(REQUEST, route)

    assert messages[2] == {"role": "tool", "tool_call_id": "t1", "content": "Two shots."}
    assert messages[3]["role"] == "user"
    assert messages[3]["content"][0] == {
        "type": "text",
        "text": TOOL_RESULT_IMAGES_TEXT.format(tool_name="screenshot", tool_call_id="t1"),
    }
    assert [part["type"] for part in messages[3]["content"]] == ["text", "image_url", "image_url"]


def test_missing_image_bytes_raise_on_chat_completions(litellm: Any) -> None:
    route = LiteLLMModelClient("anthropic/claude-sonnet-4-5").route()
    request = ModelRequest(input=[UserTextItem(text="Look", images=[PHOTO])])

    with pytest.raises(ValueError, match=f"no bytes for image {PHOTO.sha256}"):
        build_chat_messages(request, route)


@pytest.mark.parametrize(
    ("model", "counted_images"),
    [("anthropic/claude-sonnet-4-5", 3), ("openai/gpt-5-mini", 3), ("gemini/gemini-2.5-pro", 1)],
)
def test_estimates_count_each_sent_image(litellm: Any, model: str, counted_images: int) -> None:
    client = LiteLLMModelClient(model)
    without_images = ModelRequest(
        input=[
            UserTextItem(text="Look"),
            REQUEST.input[1],
            ToolResultItem(tool_call_id="t1", tool_name="screenshot", output="Two shots."),
        ]
    )
    # Estimates read no bytes: the runner passes requests without them.
    with_images = ModelRequest(input=REQUEST.input)

    difference = client.estimate_input_tokens(with_images) - client.estimate_input_tokens(
        without_images
    )

    assert difference == counted_images * ESTIMATED_IMAGE_INPUT_TOKENS
    assert client.estimate_input_tokens(without_images) > 0


def test_estimates_grow_with_the_text(litellm: Any) -> None:
    client = LiteLLMModelClient("openai/gpt-5-mini")
    short = ModelRequest(input=[UserTextItem(text="Hi")])
    long = ModelRequest(input=[UserTextItem(text="Hi " * 500)])

    assert client.estimate_input_tokens(long) > client.estimate_input_tokens(short) + 400


THINKING = {"type": "enabled", "budget_tokens": 1024}


@pytest.mark.parametrize(
    ("model", "settings", "expected"),
    [
        ("anthropic/claude-sonnet-4-5", ModelSettings(), True),
        ("anthropic/claude-sonnet-4-5", ModelSettings(thinking=THINKING), False),
        ("anthropic/claude-sonnet-4-5", ModelSettings(thinking={"type": "disabled"}), True),
        ("anthropic/claude-sonnet-4-5", ModelSettings(reasoning_effort="low"), False),
        ("anthropic/claude-sonnet-4-5", ModelSettings(reasoning_effort="none"), True),
        ("claude-sonnet-4-5", ModelSettings(reasoning_effort="high"), False),
        ("bedrock/anthropic.claude-sonnet-4-5-v1:0", ModelSettings(thinking=THINKING), False),
        ("vertex_ai/claude-sonnet-4-5", ModelSettings(reasoning_effort="medium"), False),
        ("anthropic/claude-opus-5-5", ModelSettings(), False),
        ("anthropic/claude-sonnet-5.5", ModelSettings(), False),
        ("bedrock/anthropic.claude-opus-5-5-20261101-v1:0", ModelSettings(), False),
        ("anthropic/claude-sonnet-4-5", ModelSettings(extra_args={"thinking": THINKING}), False),
        ("openai/gpt-5", ModelSettings(reasoning_effort="high"), True),
        ("gemini/gemini-2.5-pro", ModelSettings(thinking=THINKING), True),
        ("vertex_ai/gemini-2.5-pro", ModelSettings(reasoning_effort="high"), True),
    ],
)
def test_forced_tool_choice_support(model: str, settings: ModelSettings, expected: bool) -> None:
    assert LiteLLMModelClient(model).supports_forced_tool_choice(settings) is expected


def test_forced_tool_choice_reads_request_options() -> None:
    client = LiteLLMModelClient(
        "anthropic/claude-sonnet-4-5", request_options={"thinking": THINKING}
    )

    assert client.supports_forced_tool_choice(ModelSettings()) is False


def test_same_provider_items_replay_as_stored_json(litellm: Any) -> None:
    route = LiteLLMModelClient("anthropic/claude-sonnet-4-5").route()
    stored = {
        "role": "assistant",
        "content": None,
        "thinking_blocks": [{"type": "thinking", "thinking": "x", "signature": "S"}],
    }
    request = ModelRequest(
        input=[
            UserTextItem(text="Hi"),
            ModelOutputItem(provider="anthropic", api="chat_completions", item=json.dumps(stored)),
        ]
    )

    assert build_chat_messages(request, route)[1] == stored
