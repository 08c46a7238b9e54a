"""An OpenAI- and Anthropic-compatible HTTP server on loopback, shared by the model client tests.

The server speaks the three wire formats the model clients reach:
``POST /v1/chat/completions`` (SSE chunks, then ``data: [DONE]``),
``POST /v1/responses`` (SSE with ``event:`` and ``data:`` lines) and
``POST /v1/messages`` (Anthropic SSE). A test queues the replies of each path
in order and reads back every request body the server received.

A request to the Chat Completions or Responses path whose body has
``"stream": false`` or no ``stream`` key gets a JSON reply instead: a queued
:class:`JsonReply` is sent as it is, and a queued chat stream (see
:func:`chat_stream`) or Responses stream (see :func:`responses_stream`) is
answered with the equivalent JSON body, so one queued script serves streaming
and non-streaming clients alike. Error replies are the same either way.
"""

from __future__ import annotations

import json
import socket
import struct
import time
import zlib
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from dex_agents_ray.media import AgentImageReference, build_image_reference

CHAT_PATH = "/v1/chat/completions"
RESPONSES_PATH = "/v1/responses"
MESSAGES_PATH = "/v1/messages"


@dataclass(frozen=True, kw_only=True)
class SseReply:
    """A 200 reply that streams Server-Sent Events.

    Each event is ``(event_name, data)``: a ``None`` name writes only the
    ``data:`` line, and ``data`` that is not a ``str`` is written as JSON.
    """

    events: Sequence[tuple[str | None, object]]


@dataclass(frozen=True, kw_only=True)
class ErrorReply:
    """A reply with an error status and a JSON body."""

    status: int
    body: Mapping[str, object]
    headers: Mapping[str, str] = field(default_factory=dict)
    """Extra response headers (``Retry-After`` on a 429)."""


@dataclass(frozen=True, kw_only=True)
class RawReply:
    """A 200 reply with exactly these bytes as an event stream."""

    body: bytes


@dataclass(frozen=True, kw_only=True)
class JsonReply:
    """A 200 reply with a JSON body (a non-streaming completion), whatever the request asked."""

    body: Mapping[str, object]
    headers: Mapping[str, str] = field(default_factory=dict)


Reply = SseReply | ErrorReply | RawReply | JsonReply


@dataclass(frozen=True, kw_only=True)
class RecordedRequest:
    """One request the server received."""

    path: str
    headers: Mapping[str, str]
    """Header names lower-cased."""
    body: Mapping[str, Any]
    raw_body: bytes
    at: float = field(default_factory=time.time)
    """When it arrived (wall clock), to count requests per second."""


@dataclass
class FakeProviderServer:
    """The loopback server; start it with :meth:`start`, stop it with :meth:`close`."""

    requests: list[RecordedRequest] = field(default_factory=list)
    _replies: dict[str, deque[Reply]] = field(default_factory=dict)
    _runner: web.AppRunner | None = None
    _port: int = 0

    @property
    def base_url(self) -> str:
        """The server's origin, ``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self._port}"

    @property
    def openai_api_base(self) -> str:
        """The ``api_base`` of OpenAI-compatible providers (with ``/v1``)."""
        return f"{self.base_url}/v1"

    def enqueue(self, path: str, *replies: Reply) -> None:
        """Queue replies for the next requests to ``path``, in order."""
        self._replies.setdefault(path, deque()).extend(replies)

    def reset(self) -> None:
        """Forget every recorded request and queued reply."""
        self.requests.clear()
        self._replies.clear()

    def bodies(self, path: str) -> list[Mapping[str, Any]]:
        """The JSON bodies received on ``path``, oldest first."""
        return [request.body for request in self.requests if request.path == path]

    async def start(self) -> None:
        app = web.Application()
        for path in (CHAT_PATH, RESPONSES_PATH, MESSAGES_PATH):
            app.router.add_post(path, self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        self._port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        self.requests.append(
            RecordedRequest(
                path=request.path,
                headers={name.lower(): value for name, value in request.headers.items()},
                body=json.loads(raw),
                raw_body=raw,
            )
        )
        queue = self._replies.get(request.path)
        if not queue:
            return web.json_response(
                {"error": {"message": f"no reply queued for {request.path}"}}, status=599
            )
        reply = queue.popleft()
        if isinstance(reply, ErrorReply):
            return web.json_response(
                dict(reply.body), status=reply.status, headers=dict(reply.headers)
            )
        if isinstance(reply, SseReply) and not _wants_stream(self.requests[-1].body):
            reply = _as_json(request.path, reply) or reply
        if isinstance(reply, JsonReply):
            return web.json_response(dict(reply.body), status=200, headers=dict(reply.headers))
        response = web.StreamResponse(
            status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        if isinstance(reply, RawReply):
            await response.write(reply.body)
        else:
            for name, data in reply.events:
                text = data if isinstance(data, str) else json.dumps(data)
                frame = f"event: {name}\n" if name is not None else ""
                await response.write(f"{frame}data: {text}\n\n".encode())
        await response.write_eof()
        return response


def _wants_stream(body: object) -> bool:
    return isinstance(body, Mapping) and body.get("stream") is True


def _as_json(path: str, reply: SseReply) -> JsonReply | None:
    """The non-streaming equivalent of a stream on ``path``; ``None`` when there is none."""
    if path == CHAT_PATH:
        body = _chat_completion_from_chunks([data for _, data in reply.events])
    elif path == RESPONSES_PATH:
        body = _response_from_events(reply.events)
    else:
        body = None
    return None if body is None else JsonReply(body=body)


# --- Replies in each wire format -------------------------------------------------------------


def _chat_chunk(model: str, delta: Mapping[str, object] | None, finish: str | None = None) -> dict:
    choices = [] if delta is None else [{"index": 0, "delta": dict(delta), "finish_reason": finish}]
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": model,
        "choices": choices,
    }


def chat_stream(
    *,
    text: str | None = None,
    reasoning: str | None = None,
    tool_calls: Sequence[tuple[str, str, str]] = (),
    usage: Mapping[str, object] | None = None,
    model: str = "qwen3-local",
) -> SseReply:
    """A Chat Completions stream: reasoning, then text in two pieces, then tool calls.

    ``tool_calls`` holds ``(id, name, arguments)``; each call's arguments
    arrive split in two chunks.
    """
    chunks: list[dict] = [_chat_chunk(model, {"role": "assistant", "content": ""})]
    if reasoning:
        half = len(reasoning) // 2
        chunks += [
            _chat_chunk(model, {"reasoning_content": reasoning[:half]}),
            _chat_chunk(model, {"reasoning_content": reasoning[half:]}),
        ]
    if text:
        half = len(text) // 2
        chunks += [
            _chat_chunk(model, {"content": text[:half]}),
            _chat_chunk(model, {"content": text[half:]}),
        ]
    for index, (call_id, name, arguments) in enumerate(tool_calls):
        half = len(arguments) // 2
        start = {"index": index, "id": call_id, "type": "function"}
        chunks += [
            _chat_chunk(
                model,
                {
                    "tool_calls": [
                        {**start, "function": {"name": name, "arguments": arguments[:half]}}
                    ]
                },
            ),
            _chat_chunk(
                model,
                {"tool_calls": [{"index": index, "function": {"arguments": arguments[half:]}}]},
            ),
        ]
    chunks.append(_chat_chunk(model, {}, "tool_calls" if tool_calls else "stop"))
    if usage is not None:
        chunks.append({**_chat_chunk(model, None), "usage": dict(usage)})
    return SseReply(events=[*((None, chunk) for chunk in chunks), (None, "[DONE]")])


def _chat_completion_body(
    *,
    model: str,
    content: str | None,
    reasoning: str | None,
    tool_calls: Sequence[Mapping[str, object]],
    finish_reason: str,
    usage: Mapping[str, object] | None,
    completion_id: str = "chatcmpl-test",
    created: object = 1_700_000_000,
) -> dict[str, Any]:
    message: dict[str, object] = {"role": "assistant", "content": content}
    if reasoning:
        message["reasoning_content"] = reasoning
    if tool_calls:
        message["tool_calls"] = [dict(call) for call in tool_calls]
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}
        ],
        "usage": dict(usage)
        if usage is not None
        else {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


def chat_completion(
    *,
    text: str | None = None,
    reasoning: str | None = None,
    tool_calls: Sequence[tuple[str, str, str]] = (),
    usage: Mapping[str, object] | None = None,
    model: str = "qwen3-local",
) -> JsonReply:
    """A non-streaming Chat Completions reply: the JSON twin of :func:`chat_stream`.

    ``tool_calls`` holds ``(id, name, arguments)``; the finish reason is
    ``"tool_calls"`` when there are any, else ``"stop"``. ``usage`` (the
    ``prompt_tokens``, ``completion_tokens`` and ``total_tokens`` of the reply)
    defaults to zeros.
    """
    return JsonReply(
        body=_chat_completion_body(
            model=model,
            content=text or None,
            reasoning=reasoning,
            tool_calls=[
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
                for call_id, name, args in tool_calls
            ],
            finish_reason="tool_calls" if tool_calls else "stop",
            usage=usage,
        )
    )


def _chat_completion_from_chunks(chunks: Sequence[object]) -> dict[str, Any] | None:
    """Assemble Chat Completions stream chunks into one completion; ``None`` if they are not."""
    chunks = [chunk for chunk in chunks if chunk != "[DONE]"]
    if not chunks or not all(
        isinstance(chunk, Mapping) and chunk.get("object") == "chat.completion.chunk"
        for chunk in chunks
    ):
        return None
    content: list[str] = []
    reasoning: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    finish_reason = "stop"
    usage: Mapping[str, object] | None = None
    for chunk in chunks:
        assert isinstance(chunk, Mapping)
        if chunk.get("usage"):
            usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            content.append(delta.get("content") or "")
            reasoning.append(delta.get("reasoning_content") or "")
            for piece in delta.get("tool_calls") or ():
                call = calls.setdefault(
                    piece.get("index", len(calls)),
                    {"id": None, "type": "function", "function": {"name": "", "arguments": ""}},
                )
                if piece.get("id"):
                    call["id"] = piece["id"]
                function = piece.get("function") or {}
                call["function"]["name"] += function.get("name") or ""
                call["function"]["arguments"] += function.get("arguments") or ""
            if choice.get("finish_reason"):
                finish_reason = choice["finish_reason"]
    first = chunks[0]
    assert isinstance(first, Mapping)
    return _chat_completion_body(
        model=first.get("model", ""),
        content="".join(content) or None,
        reasoning="".join(reasoning) or None,
        tool_calls=[calls[index] for index in sorted(calls)],
        finish_reason=finish_reason,
        usage=usage,
        completion_id=first.get("id", "chatcmpl-test"),
        created=first.get("created", 1_700_000_000),
    )


_RESPONSES_TERMINALS = ("response.completed", "response.incomplete", "response.failed")


def _response_from_events(events: Sequence[tuple[str | None, object]]) -> dict[str, Any] | None:
    """The ``response`` of a Responses stream's terminal event; ``None`` if it has none."""
    for name, data in reversed(events):
        if name in _RESPONSES_TERMINALS and isinstance(data, Mapping) and "response" in data:
            return dict(data["response"])
    return None


def _response(status: str, output: Sequence[object], usage: object, model: str) -> dict:
    return {
        "id": "resp_test_1",
        "object": "response",
        "created_at": 1_700_000_000,
        "status": status,
        "model": model,
        "output": list(output),
        "usage": usage,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "store": False,
    }


def _item_events(index: int, item: Mapping[str, Any]) -> list[tuple[str, dict]]:
    """The added, delta and done events of one output item."""
    kind = item["type"]
    item_id = item.get("id", f"item_{index}")
    base = {"item_id": item_id, "output_index": index}
    events: list[tuple[str, dict]] = []
    if kind == "reasoning":
        events.append(("response.output_item.added", {**item, "summary": []}))
        for summary_index, part in enumerate(item.get("summary", [])):
            text = part["text"]
            for piece in (text[: len(text) // 2], text[len(text) // 2 :]):
                events.append(
                    (
                        "response.reasoning_summary_text.delta",
                        {**base, "summary_index": summary_index, "delta": piece},
                    )
                )
    elif kind == "message":
        events.append(("response.output_item.added", {**item, "content": []}))
        for content_index, part in enumerate(item["content"]):
            text = part["text"]
            for piece in (text[: len(text) // 2], text[len(text) // 2 :]):
                events.append(
                    (
                        "response.output_text.delta",
                        {**base, "content_index": content_index, "delta": piece},
                    )
                )
    elif kind == "function_call":
        events.append(("response.output_item.added", {**item, "arguments": ""}))
        events.append(
            ("response.function_call_arguments.delta", {**base, "delta": item["arguments"]})
        )
    events.append(("response.output_item.done", dict(item)))
    wrapped: list[tuple[str, dict]] = []
    for name, payload in events:
        if name in ("response.output_item.added", "response.output_item.done"):
            payload = {"output_index": index, "item": payload}
        wrapped.append((name, payload))
    return wrapped


def responses_stream(
    *,
    output: Sequence[Mapping[str, Any]],
    usage: Mapping[str, object] | None = None,
    model: str = "gpt-5-mini-2025-08-07",
    terminal: str = "response.completed",
) -> SseReply:
    """A Responses API stream of ``output`` items; ``terminal=""`` leaves out the end."""
    raw: list[tuple[str, dict]] = [
        ("response.created", {"response": _response("in_progress", [], None, model)})
    ]
    for index, item in enumerate(output):
        raw += _item_events(index, item)
    if terminal:
        status = terminal.removeprefix("response.")
        raw.append((terminal, {"response": _response(status, output, usage, model)}))
    events = [
        (name, {"type": name, "sequence_number": number, **payload})
        for number, (name, payload) in enumerate(raw)
    ]
    return SseReply(events=events)


def anthropic_stream(
    *,
    blocks: Sequence[Mapping[str, Any]],
    usage: Mapping[str, int],
    stop_reason: str,
    model: str = "claude-sonnet-4-5-20250929",
) -> SseReply:
    """An Anthropic Messages stream of content ``blocks``.

    Thinking text and tool input arrive in two deltas each, a thinking
    block's signature in a last ``signature_delta``.
    """

    def event(name: str, **fields: object) -> tuple[str, dict]:
        return (name, {"type": name, **fields})

    start_usage = {**usage, "output_tokens": 1}
    events = [
        event(
            "message_start",
            message={
                "id": "msg_test_1",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": start_usage,
            },
        )
    ]
    for index, block in enumerate(blocks):
        kind = block["type"]
        if kind == "thinking":
            events.append(
                event(
                    "content_block_start",
                    index=index,
                    content_block={"type": "thinking", "thinking": "", "signature": ""},
                )
            )
            text = block["thinking"]
            for piece in (text[: len(text) // 2], text[len(text) // 2 :]):
                events.append(
                    event(
                        "content_block_delta",
                        index=index,
                        delta={"type": "thinking_delta", "thinking": piece},
                    )
                )
            events.append(
                event(
                    "content_block_delta",
                    index=index,
                    delta={"type": "signature_delta", "signature": block["signature"]},
                )
            )
        elif kind == "redacted_thinking":
            events.append(event("content_block_start", index=index, content_block=dict(block)))
        elif kind == "text":
            events.append(
                event(
                    "content_block_start", index=index, content_block={"type": "text", "text": ""}
                )
            )
            events.append(
                event(
                    "content_block_delta",
                    index=index,
                    delta={"type": "text_delta", "text": block["text"]},
                )
            )
        elif kind == "tool_use":
            events.append(
                event(
                    "content_block_start",
                    index=index,
                    content_block={
                        "type": "tool_use",
                        "id": block["id"],
                        "name": block["name"],
                        "input": {},
                    },
                )
            )
            arguments = json.dumps(block["input"])
            for piece in (arguments[: len(arguments) // 2], arguments[len(arguments) // 2 :]):
                events.append(
                    event(
                        "content_block_delta",
                        index=index,
                        delta={"type": "input_json_delta", "partial_json": piece},
                    )
                )
        events.append(event("content_block_stop", index=index))
    events.append(
        event(
            "message_delta",
            delta={"stop_reason": stop_reason, "stop_sequence": None},
            usage={"output_tokens": usage.get("output_tokens", 0)},
        )
    )
    events.append(event("message_stop"))
    return SseReply(events=events)


# --- Images ----------------------------------------------------------------------------------


def png_bytes(red: int) -> bytes:
    """A real 1x1 PNG of one colour."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(bytes([0, red, 0, 0]))
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


def image(red: int) -> tuple[AgentImageReference, bytes]:
    """A checked image reference in an in-memory store, and its bytes."""
    data = png_bytes(red)
    return build_image_reference(data, "memory://media"), data
