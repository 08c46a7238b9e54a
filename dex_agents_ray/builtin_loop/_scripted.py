"""``ScriptedModelClient``: a deterministic model for demos, tutorials and tests."""

from __future__ import annotations

import hashlib
import inspect
import json
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

import orjson

from dex_agents_ray.builtin_loop._estimate import estimate_request_tokens, estimate_tokens_of_text
from dex_agents_ray.builtin_loop._model import (
    JsonValue,
    ModelCallMetadata,
    ModelOutputItem,
    ModelOutputWriter,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    ModelToolCall,
    ModelUsage,
    ToolResultItem,
    UserTextItem,
)

SCRIPTED_PROVIDER = "scripted"
"""The ``provider`` and ``api`` of a :class:`ScriptedModelClient`'s output items."""


@dataclass(frozen=True, kw_only=True)
class ScriptedToolCall:
    """A tool call in a scripted reply."""

    tool_name: str
    """The tool to call."""
    arguments: str | Mapping[str, JsonValue] = "{}"
    """The arguments: JSON text sent as written, or a mapping written as JSON."""
    tool_call_id: str | None = None
    """The call's ID; ``None`` derives one from the request, the same on every rerun."""

    def __post_init__(self) -> None:
        if not isinstance(self.tool_name, str) or not self.tool_name:
            raise ValueError("ScriptedToolCall.tool_name must be a non-empty str")
        if not isinstance(self.arguments, str | Mapping):
            raise TypeError("ScriptedToolCall.arguments must be a str or a mapping")
        if self.tool_call_id is not None and (
            not isinstance(self.tool_call_id, str)
            or not self.tool_call_id
            or "/" in self.tool_call_id
        ):
            raise ValueError("ScriptedToolCall.tool_call_id must be a non-empty str without '/'")

    def arguments_text(self) -> str:
        """The arguments as JSON text."""
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments)


@dataclass(frozen=True, kw_only=True)
class ScriptedModelReply:
    """What a script answers to one model call."""

    text: str | None = None
    """The answer text; ``None`` for none."""
    tool_calls: Sequence[ScriptedToolCall] = ()
    """Tool calls, in order; empty for none."""
    reasoning: str | None = None
    """Reasoning streamed as ``reasoning_delta`` before the text; ``None`` for none."""
    usage: ModelUsage | None = None
    """The usage to report; ``None`` estimates it at three UTF-8 bytes per token."""

    def __post_init__(self) -> None:
        for name in ("text", "reasoning"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise TypeError(f"ScriptedModelReply.{name} must be a str or None")
        if isinstance(self.tool_calls, str) or not isinstance(self.tool_calls, Sequence):
            raise TypeError("ScriptedModelReply.tool_calls must be a sequence")
        calls = tuple(self.tool_calls)
        for call in calls:
            if not isinstance(call, ScriptedToolCall):
                raise TypeError("ScriptedModelReply.tool_calls holds only ScriptedToolCall values")
        ids = [call.tool_call_id for call in calls if call.tool_call_id is not None]
        if len(ids) != len(set(ids)):
            raise ValueError("ScriptedModelReply.tool_calls repeats a tool_call_id")
        object.__setattr__(self, "tool_calls", calls)
        if self.usage is not None and not isinstance(self.usage, ModelUsage):
            raise TypeError("ScriptedModelReply.usage must be a ModelUsage or None")


ScriptedResponder = Callable[[ModelRequest], ScriptedModelReply | Awaitable[ScriptedModelReply]]
"""A script: a sync or async function from the request to the reply."""


class ScriptedModelClient:
    """A :class:`ModelClient` that answers each call from a function of the request.

    An agent then runs without a model key: a local demo mode, a tutorial, or
    a test. Keep the script deterministic, because a crashed ``RunModel``
    reruns it; tool call IDs the script leaves out derive from the request,
    so a rerun produces the same ones.

    Example::

        def reply(request: ModelRequest) -> ScriptedModelReply:
            results = ScriptedModelClient.tool_results(request)
            if results:
                return ScriptedModelReply(text="; ".join(r.output for r in results))
            return ScriptedModelReply(text=f"Demo: {ScriptedModelClient.user_texts(request)[-1]}")

        model = ScriptedModelClient(reply)

    Args:
        respond: The script, sync or async.
        max_recorded_requests: How many of the latest requests :attr:`requests` keeps.
    """

    def __init__(self, respond: ScriptedResponder, *, max_recorded_requests: int = 100) -> None:
        if not callable(respond):
            raise TypeError("ScriptedModelClient respond must be callable")
        if (
            isinstance(max_recorded_requests, bool)
            or not isinstance(max_recorded_requests, int)
            or max_recorded_requests < 0
        ):
            raise ValueError("ScriptedModelClient max_recorded_requests must be an int >= 0")
        self._respond = respond
        self._requests: deque[ModelRequest] = deque(maxlen=max_recorded_requests)

    def __repr__(self) -> str:
        name = getattr(self._respond, "__qualname__", type(self._respond).__name__)
        return f"ScriptedModelClient({name})"

    @property
    def requests(self) -> list[ModelRequest]:
        """The latest requests this client received, oldest first."""
        return list(self._requests)

    async def call_model(self, request: ModelRequest, output: ModelOutputWriter) -> ModelResponse:
        """Record the request, run the script, and stream and return its reply."""
        self._requests.append(request)
        result = self._respond(request)
        reply = await result if inspect.isawaitable(result) else result
        if not isinstance(reply, ScriptedModelReply):
            raise TypeError(
                f"ScriptedModelClient respond must return a ScriptedModelReply, "
                f"not {type(reply).__name__}"
            )
        fingerprint = _fingerprint(request)
        calls = tuple(
            ModelToolCall(
                tool_call_id=call.tool_call_id or f"call_{fingerprint[:12]}_{index}",
                tool_name=call.tool_name,
                arguments=call.arguments_text(),
            )
            for index, call in enumerate(reply.tool_calls, start=1)
        )
        if reply.reasoning:
            output.write_reasoning_delta(reply.reasoning)
        if reply.text:
            output.write_text_delta(reply.text)
        item = {
            "text": reply.text,
            "reasoning": reply.reasoning,
            "tool_calls": [
                {"id": call.tool_call_id, "name": call.tool_name, "arguments": call.arguments}
                for call in calls
            ],
        }
        output_item = ModelOutputItem(
            provider=SCRIPTED_PROVIDER,
            api=SCRIPTED_PROVIDER,
            item=json.dumps(item, separators=(",", ":"), ensure_ascii=False),
            text=reply.text,
            tool_calls=calls,
        )
        return ModelResponse(
            output=(output_item,),
            usage=reply.usage or self._estimate_usage(request, reply, calls),
            model_call_metadata=ModelCallMetadata(
                request_model=SCRIPTED_PROVIDER,
                response_model=SCRIPTED_PROVIDER,
                provider_name=SCRIPTED_PROVIDER,
                response_id=f"scripted_{fingerprint[:24]}",
                finish_reasons=("tool_calls",) if calls else ("stop",),
            ),
        )

    def estimate_input_tokens(self, request: ModelRequest) -> int:
        """Estimate at three UTF-8 bytes per token, plus a fixed count per image."""
        return estimate_request_tokens(request)

    def supports_forced_tool_choice(self, settings: ModelSettings) -> bool:
        """A script can always be made to call a tool."""
        return True

    @staticmethod
    def user_texts(request: ModelRequest) -> list[str]:
        """The text of every user item in the request, oldest first."""
        return [item.text for item in request.input if isinstance(item, UserTextItem)]

    @staticmethod
    def tool_results(request: ModelRequest) -> list[ToolResultItem]:
        """The results of the previous model response's tool calls.

        These are the tool results after the last model output item; empty
        when the request ends with a user message that follows no tool call,
        such as a turn's first model call.
        """
        results: list[ToolResultItem] = []
        for item in request.input:
            if isinstance(item, ModelOutputItem):
                results = []
            elif isinstance(item, ToolResultItem):
                results.append(item)
        return results

    def _estimate_usage(
        self, request: ModelRequest, reply: ScriptedModelReply, calls: Sequence[ModelToolCall]
    ) -> ModelUsage:
        reasoning = estimate_tokens_of_text(reply.reasoning or "")
        answer = estimate_tokens_of_text(
            (reply.text or "") + "".join(call.tool_name + call.arguments for call in calls)
        )
        return ModelUsage(
            input_tokens=self.estimate_input_tokens(request),
            output_tokens=answer + reasoning,
            reasoning_tokens=reasoning,
        )


def _fingerprint(request: ModelRequest) -> str:
    """A digest of the request's instructions and input, stable across processes."""
    parts: list[object] = [request.instructions]
    for item in request.input:
        if isinstance(item, UserTextItem):
            parts.append(["user", item.text, [image.sha256 for image in item.images]])
        elif isinstance(item, ToolResultItem):
            parts.append(["tool", item.tool_call_id, item.output])
        else:
            parts.append(["model", item.provider, item.api, item.item])
    try:
        # The same bytes as the ``json.dumps`` below for strings, lists and ``None``
        # (``orjson`` escapes exactly what ``ensure_ascii=False`` does), several times
        # faster; whatever ``orjson`` refuses (a lone surrogate, which the encoding
        # below refuses too) takes the standard library's path.
        encoded = orjson.dumps(parts)
    except TypeError:
        encoded = json.dumps(parts, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return hashlib.sha256(encoded).hexdigest()
