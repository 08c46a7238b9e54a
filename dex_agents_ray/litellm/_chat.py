"""Read a streaming Chat Completions call into a ``ModelResponse``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
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
from dex_agents_ray.litellm._responses import as_plain


def _count(value: Any, *names: str) -> int:
    for name in names:
        value = getattr(value, name, None) if not isinstance(value, Mapping) else value.get(name)
        if value is None:
            return 0
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def chat_usage(usage: Any) -> ModelUsage:
    """Usage from a Chat Completions ``usage`` object.

    ``prompt_tokens`` includes cache reads for every provider LiteLLM maps,
    Anthropic's included, so input tokens are the prompt tokens and cached
    tokens a part of them.
    """
    if usage is None:
        return ModelUsage()
    return ModelUsage(
        input_tokens=_count(usage, "prompt_tokens"),
        output_tokens=_count(usage, "completion_tokens"),
        cached_input_tokens=_count(usage, "prompt_tokens_details", "cached_tokens"),
        reasoning_tokens=_count(usage, "completion_tokens_details", "reasoning_tokens"),
    )


@dataclass
class _ToolCallParts:
    tool_call_id: str | None = None
    name: str | None = None
    arguments: list[str] = field(default_factory=list)


@dataclass
class _ThinkingBlocks:
    """Anthropic thinking blocks, rebuilt from streamed deltas.

    Thinking text comes from deltas without a signature; from a delta with a
    signature only the signature is taken. Some LiteLLM releases repeat the
    block's whole text in the signature delta, so its ``thinking`` is never
    trusted.
    """

    blocks: list[dict[str, Any]] = field(default_factory=list)
    by_index: dict[object, dict[str, Any]] = field(default_factory=dict)
    open_block: dict[str, Any] | None = None

    def add(self, delta_block: Mapping[str, Any]) -> None:
        kind = delta_block.get("type")
        index = delta_block.get("index")
        if kind == "redacted_thinking":
            self.blocks.append({"type": "redacted_thinking", "data": delta_block.get("data")})
            self.open_block = None
            return
        block = self.by_index.get(index) if index is not None else self.open_block
        if block is None:
            block = {"type": "thinking", "thinking": ""}
            self.blocks.append(block)
            if index is not None:
                self.by_index[index] = block
            self.open_block = block
        signature = delta_block.get("signature")
        if signature:
            block["signature"] = signature
            if index is None:
                self.open_block = None
        else:
            block["thinking"] += str(delta_block.get("thinking") or "")


@dataclass
class _ChatStreamState:
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    tool_calls: dict[object, _ToolCallParts] = field(default_factory=dict)
    thinking: _ThinkingBlocks = field(default_factory=_ThinkingBlocks)
    finish_reason: str | None = None
    usage: Any = None
    response_id: str | None = None
    response_model: str | None = None

    def add_delta(self, delta: Any, output: ModelOutputWriter) -> None:
        content = getattr(delta, "content", None)
        if isinstance(content, str) and content:
            self.text.append(content)
            output.write_text_delta(content)
        reasoning = getattr(delta, "reasoning_content", None)
        if isinstance(reasoning, str) and reasoning:
            self.reasoning.append(reasoning)
            output.write_reasoning_delta(reasoning)
        for block in getattr(delta, "thinking_blocks", None) or ():
            plain = as_plain(block)
            if isinstance(plain, Mapping):
                self.thinking.add(plain)
        for call in getattr(delta, "tool_calls", None) or ():
            index = getattr(call, "index", None)
            parts = self.tool_calls.setdefault(
                index if index is not None else len(self.tool_calls), _ToolCallParts()
            )
            parts.tool_call_id = parts.tool_call_id or getattr(call, "id", None)
            function = getattr(call, "function", None)
            parts.name = parts.name or getattr(function, "name", None)
            arguments = getattr(function, "arguments", None)
            if isinstance(arguments, str):
                parts.arguments.append(arguments)


def _tool_calls(state: _ChatStreamState, route: LiteLLMRoute) -> list[ModelToolCall]:
    calls: list[ModelToolCall] = []
    for parts in state.tool_calls.values():
        if not parts.tool_call_id or not parts.name:
            raise ModelResponseError(
                f"a {route.provider} tool call arrived without an ID or a name",
                provider=route.provider,
                api=route.api,
            )
        calls.append(
            ModelToolCall(
                tool_call_id=parts.tool_call_id,
                tool_name=parts.name,
                arguments="".join(parts.arguments) or "{}",
            )
        )
    return calls


def _assistant_message(
    state: _ChatStreamState, text: str | None, calls: list[ModelToolCall]
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [
            {
                "id": call.tool_call_id,
                "type": "function",
                "function": {"name": call.tool_name, "arguments": call.arguments},
            }
            for call in calls
        ]
    if state.thinking.blocks:
        message["thinking_blocks"] = state.thinking.blocks
    elif state.reasoning:
        message["reasoning_content"] = "".join(state.reasoning)
    return message


async def read_chat_stream(
    stream: AsyncIterator[Any], route: LiteLLMRoute, output: ModelOutputWriter
) -> ModelResponse:
    """Stream text and reasoning to ``output`` and return the response.

    The one output item is the assistant message as LiteLLM takes it back:
    ``content``, ``tool_calls``, and ``thinking_blocks`` with their
    signatures (or ``reasoning_content`` from a provider without blocks).

    Raises:
        ModelResponseError: The stream ended before a ``finish_reason``, or
            carried no text, reasoning or tool calls.
    """
    state = _ChatStreamState()
    async for chunk in stream:
        state.response_id = state.response_id or getattr(chunk, "id", None)
        state.response_model = getattr(chunk, "model", None) or state.response_model
        usage = getattr(chunk, "usage", None)
        if usage is not None:
            state.usage = usage
        for choice in getattr(chunk, "choices", None) or ():
            if getattr(choice, "index", 0) != 0:
                continue
            delta = getattr(choice, "delta", None)
            if delta is not None:
                state.add_delta(delta, output)
            reason = getattr(choice, "finish_reason", None)
            if reason:
                state.finish_reason = str(reason)
    if state.finish_reason is None:
        raise ModelResponseError(
            f"the {route.provider} Chat Completions stream ended before a finish_reason",
            provider=route.provider,
            api=route.api,
        )
    text = "".join(state.text) or None
    calls = _tool_calls(state, route)
    if text is None and not calls and not state.reasoning and not state.thinking.blocks:
        # LiteLLM skips lines it cannot parse and closes such a stream with a
        # made-up "stop", so an empty answer is how a malformed stream shows.
        raise ModelResponseError(
            f"the {route.provider} Chat Completions stream carried no text, reasoning or "
            f"tool calls (finish_reason {state.finish_reason!r}); it may be malformed",
            provider=route.provider,
            api=route.api,
        )
    item = ModelOutputItem(
        provider=route.provider,
        api=route.api,
        item=json.dumps(
            _assistant_message(state, text, calls), separators=(",", ":"), ensure_ascii=False
        ),
        text=text,
        tool_calls=calls,
    )
    return ModelResponse(
        output=(item,),
        usage=chat_usage(state.usage),
        model_call_metadata=ModelCallMetadata(
            request_model=route.provider_model,
            response_model=state.response_model,
            provider_name=otel_provider_name(route.provider),
            response_id=state.response_id,
            finish_reasons=(state.finish_reason,),
        ),
    )
