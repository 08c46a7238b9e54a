"""Read a streaming Responses API call into a ``ModelResponse``."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

from dex_agents_ray.builtin_loop import (
    ModelCallMetadata,
    ModelOutputItem,
    ModelOutputWriter,
    ModelResponse,
    ModelResponseError,
    ModelToolCall,
    ModelUsage,
)
from dex_agents_ray.litellm._convert import LiteLLMRoute
from dex_agents_ray.litellm._providers import otel_provider_name

_REASONING_DELTAS = frozenset(
    {"response.reasoning_summary_text.delta", "response.reasoning_text.delta"}
)
_TERMINAL = frozenset({"response.completed", "response.incomplete"})
_INCOMPLETE_REASONS = {"max_output_tokens": "length", "content_filter": "content_filter"}


def event_type(event: Any) -> str:
    """An event's ``type`` as text: LiteLLM gives an enum for typed events, a str otherwise."""
    kind = getattr(event, "type", None)
    return str(getattr(kind, "value", kind))


def as_plain(value: Any) -> Any:
    """A pydantic object as the plain data it was parsed from."""
    dump = getattr(value, "model_dump", None)
    return dump() if callable(dump) else value


def _field(value: Any, name: str) -> Any:
    if isinstance(value, Mapping):
        return value.get(name)
    return getattr(value, name, None)


def _count(value: Any, *names: str) -> int:
    for name in names:
        value = _field(value, name)
        if value is None:
            return 0
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def usage_of(usage: Any) -> ModelUsage:
    """Usage from a Responses API ``usage`` object."""
    if usage is None:
        return ModelUsage()
    return ModelUsage(
        input_tokens=_count(usage, "input_tokens"),
        output_tokens=_count(usage, "output_tokens"),
        cached_input_tokens=_count(usage, "input_tokens_details", "cached_tokens"),
        reasoning_tokens=_count(usage, "output_tokens_details", "reasoning_tokens"),
    )


def original_response_id(response_id: str | None) -> str | None:
    """The provider's response ID, without the routing data LiteLLM encodes into it."""
    if not response_id or not response_id.startswith("resp_"):
        return response_id
    try:
        decoded = base64.b64decode(response_id[len("resp_") :], validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return response_id
    for part in decoded.split(";"):
        if part.startswith("response_id:"):
            return part[len("response_id:") :]
    return response_id


def output_item(route: LiteLLMRoute, item: Mapping[str, Any]) -> ModelOutputItem:
    """One Responses API output item, provider-exact, with its text and tool calls."""
    kind = item.get("type")
    text: str | None = None
    calls: list[ModelToolCall] = []
    if kind == "message":
        pieces = [
            str(part.get("text") or part.get("refusal") or "")
            for part in item.get("content") or ()
            if isinstance(part, Mapping) and part.get("type") in ("output_text", "refusal")
        ]
        text = "".join(pieces) or None
    elif kind == "function_call":
        call_id, name = item.get("call_id"), item.get("name")
        if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
            raise ModelResponseError(
                "a Responses API function_call item has no call_id or name",
                provider=route.provider,
                api=route.api,
            )
        arguments = item.get("arguments")
        calls.append(
            ModelToolCall(
                tool_call_id=call_id,
                tool_name=name,
                arguments=arguments if isinstance(arguments, str) and arguments else "{}",
            )
        )
    return ModelOutputItem(
        provider=route.provider,
        api=route.api,
        item=json.dumps(item, separators=(",", ":"), ensure_ascii=False),
        text=text,
        tool_calls=calls,
    )


def _failure_message(event: Any) -> str:
    response = getattr(event, "response", None)
    error = _field(response, "error") if response is not None else getattr(event, "error", None)
    message = _field(error, "message") if error is not None else getattr(event, "message", None)
    return str(message or "no error message")


def _finish_reasons(terminal: Any, items: list[ModelOutputItem]) -> tuple[str, ...]:
    if _field(terminal, "status") == "incomplete":
        reason = _field(_field(terminal, "incomplete_details"), "reason")
        return (_INCOMPLETE_REASONS.get(str(reason), str(reason or "incomplete")),)
    return ("tool_calls",) if any(item.tool_calls for item in items) else ("stop",)


async def read_responses_stream(
    stream: AsyncIterator[Any], route: LiteLLMRoute, output: ModelOutputWriter
) -> ModelResponse:
    """Stream text and reasoning summaries to ``output`` and return the response.

    The output items are the ``response.output_item.done`` items, as the
    provider sent them.

    Raises:
        ModelResponseError: The provider reported a failure, or the stream
            ended before ``response.completed`` or ``response.incomplete``.
    """
    done: dict[int, Mapping[str, Any]] = {}
    terminal: Any = None
    async for event in stream:
        kind = event_type(event)
        if kind == "response.output_text.delta":
            delta = getattr(event, "delta", None)
            if isinstance(delta, str) and delta:
                output.write_text_delta(delta)
        elif kind in _REASONING_DELTAS:
            delta = getattr(event, "delta", None)
            if isinstance(delta, str) and delta:
                output.write_reasoning_delta(delta)
        elif kind == "response.output_item.done":
            item = as_plain(getattr(event, "item", None))
            if isinstance(item, Mapping):
                done[int(getattr(event, "output_index", len(done)))] = item
        elif kind in _TERMINAL:
            terminal = getattr(event, "response", None)
        elif kind in ("response.failed", "error"):
            raise ModelResponseError(
                f"the {route.provider} Responses API call failed: {_failure_message(event)}",
                provider=route.provider,
                api=route.api,
            )
    if terminal is None:
        raise ModelResponseError(
            f"the {route.provider} Responses API stream ended before response.completed",
            provider=route.provider,
            api=route.api,
        )
    if not done:
        # A provider that streams no per-item events still lists the output at the end.
        for index, item in enumerate(_field(terminal, "output") or ()):
            plain = as_plain(item)
            if isinstance(plain, Mapping):
                done[index] = {key: value for key, value in plain.items() if value is not None}
    items = [output_item(route, done[index]) for index in sorted(done)]
    response_id = _field(terminal, "id")
    return ModelResponse(
        output=items,
        usage=usage_of(_field(terminal, "usage")),
        model_call_metadata=ModelCallMetadata(
            request_model=route.provider_model,
            response_model=_field(terminal, "model"),
            provider_name=otel_provider_name(route.provider),
            response_id=original_response_id(response_id if isinstance(response_id, str) else None),
            finish_reasons=_finish_reasons(terminal, items),
        ),
    )
