"""A real MCP server for the tests, written on the MCP SDK's low-level ``Server``.

The same tools serve over stdio (``python -m tests.mcp.mcp_server``, one process
per request) and over Streamable HTTP (:class:`HttpMcpServer`, in a thread of
the test process on a free loopback port), so the test reads the server's
:class:`ServerState` directly. A stdio process appends each call to the JSON
lines file named by ``MCP_TEST_LOG``.

Tasks follow the tasks extension (``io.modelcontextprotocol/tasks``, SEP-2663),
served through ``add_request_handler``: mcp 2.3 has no tasks support of its own.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import struct
import sys
import threading
import time
import uuid
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from pydantic import ConfigDict

TASKS = "io.modelcontextprotocol/tasks"
IDEMPOTENCY_KEY = "io.superdurable.dex/idempotencyKey"
EFFECT = "io.superdurable.dex/effect"
APPROVAL = "io.superdurable.dex/approval"
OUTCOME = "io.superdurable.dex/outcome"
NOW = "2026-01-01T00:00:00Z"


def png(seed: int = 0) -> bytes:
    """A real 2x2 grey PNG."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    rows = b"".join(b"\x00" + bytes((seed + x + y) % 256 for x in range(2)) for y in range(2))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 2, 8, 0, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


@dataclass
class Task:
    """One task the server runs; advanced by each ``tasks/get``."""

    task_id: str
    kind: str
    arguments: dict[str, Any]
    status: str = "working"
    polls: int = 0
    answers: list[dict[str, Any]] = field(default_factory=list)
    cancelled: bool = False
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    status_message: str | None = None
    input_requests: dict[str, Any] | None = None


@dataclass
class ServerState:
    """What the server saw: calls (tool, arguments, request ``_meta``), listings, tasks."""

    calls: list[tuple[str, dict[str, Any], dict[str, Any]]] = field(default_factory=list)
    listings: int = 0
    tasks: dict[str, Task] = field(default_factory=dict)
    updates: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    cancels: list[str] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    log_path: str | None = None

    def called(self, tool: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        return [(arguments, meta) for name, arguments, meta in self.calls if name == tool]

    def record(self, tool: str, arguments: dict[str, Any], meta: dict[str, Any]) -> None:
        self.calls.append((tool, arguments, meta))
        if self.log_path:
            with open(self.log_path, "a", encoding="utf-8") as log:
                entry = {"tool": tool, "key": meta.get(IDEMPOTENCY_KEY), "pid": os.getpid()}
                log.write(json.dumps(entry) + "\n")


def _tool(
    name: str,
    *,
    annotations: dict[str, Any] | None = None,
    meta: dict[str, Any] | None = None,
    description: str | None = None,
    properties: dict[str, Any] | None = None,
) -> types.Tool:
    return types.Tool(
        name=name,
        description=description or f"The {name} test tool.",
        input_schema={"type": "object", "properties": properties or {}},
        annotations=types.ToolAnnotations(**annotations) if annotations else None,
        _meta=meta,
    )


READ = {"read_only_hint": True}
IDEMPOTENT = {"idempotent_hint": True, "destructive_hint": True}

TOOLS = [
    _tool("echo", annotations=READ, properties={"text": {"type": "string"}}),
    _tool("add_note", annotations=IDEMPOTENT),
    _tool("send_email"),
    _tool("fail_tool", annotations=READ),
    _tool("rpc_error", annotations=READ),
    _tool("internal_error", annotations=READ),
    _tool("internal_error_write"),
    _tool("crash", annotations=READ),
    _tool("slow", annotations=READ),
    _tool("repeat_once", annotations=READ),
    _tool("repeat_forever", annotations=READ),
    _tool("ask_direct", annotations=READ),
    _tool("progress", annotations=READ),
    _tool("outcome_unknown", annotations=READ),
    _tool("outcome_rejected"),
    _tool("outcome_unknown_rpc", annotations=READ),
    _tool("outcome_rejected_rpc", annotations=READ),
    _tool("outcome_reserved", annotations=READ),
    _tool("outcome_empty", annotations=READ),
    _tool("declared_read", annotations={"destructive_hint": True}, meta={EFFECT: "read"}),
    _tool(
        "declared_write",
        annotations=READ,
        meta={EFFECT: "idempotent_write", APPROVAL: "recommended"},
    ),
    _tool("declared_once", meta={EFFECT: "non_idempotent_write"}),
    _tool("declared_fail", meta={EFFECT: "idempotent_write"}),
    _tool("declared_odd_approval", meta={EFFECT: "read", APPROVAL: "always"}),
    _tool("declared_bogus", annotations=READ, meta={EFFECT: "sometimes"}),
    _tool("approval_only", annotations=READ, meta={APPROVAL: "recommended"}),
    _tool("image", annotations=READ),
    _tool("image_error", annotations=READ),
    _tool("too_many_images", annotations=READ),
    _tool("bad_base64", annotations=READ),
    _tool("noncanonical_base64", annotations=READ),
    _tool("not_an_image", annotations=READ),
    _tool("gateway_500", annotations=READ),
    _tool("gateway_html", annotations=READ),
    _tool(
        "regional",
        annotations=READ,
        properties={"region": {"type": "string", "x-mcp-header": "Region"}},
    ),
    _tool("task_quick", annotations=READ),
    _tool("task_write", annotations=IDEMPOTENT),
    _tool("task_gated", annotations=IDEMPOTENT),
    _tool("task_ask", annotations=IDEMPOTENT, properties={"kind": {"type": "string"}}),
    _tool("task_url", annotations=READ),
    _tool("task_fail", annotations=READ),
    _tool("task_cancelled", annotations=READ),
    _tool("task_forgotten", annotations=IDEMPOTENT),
]


def _text(text: str, **extra: Any) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], **extra)


def _declares_tasks(ctx: ServerRequestContext[Any]) -> bool:
    capabilities = (ctx.meta or {}).get("io.modelcontextprotocol/clientCapabilities") or {}
    extensions = capabilities.get("extensions") or {}
    return TASKS in extensions


class _TaskParams(types.RequestParams):
    model_config = ConfigDict(extra="allow")
    task_id: str


class _UpdateParams(_TaskParams):
    input_responses: dict[str, Any]


def _elicitation(message: str, kind: str) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "string": {"answer": {"type": "string"}},
        "enum": {"answer": {"type": "string", "enum": ["red", "blue"]}},
        "boolean": {"answer": {"type": "boolean"}},
        "two_fields": {"a": {"type": "string"}, "b": {"type": "string"}},
    }[kind]
    return {
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": message,
            "requestedSchema": {"type": "object", "properties": properties},
        },
    }


class ServerHandlers:
    """The handlers, bound to one :class:`ServerState`."""

    def __init__(self, state: ServerState) -> None:
        self.state = state

    def build(self) -> Server[Any]:
        schemas = {tool.name: tool.input_schema for tool in TOOLS}
        server: Server[Any] = Server(
            "dex-test",
            version="1",
            # Mcp-Param-* headers are checked against these schemas (and never by
            # calling tools/list, which would count as a listing).
            get_tool_input_schema=schemas.get,
            on_list_tools=self.list_tools,
            on_call_tool=self.call_tool,
            on_list_resources=self.list_resources,
            on_list_resource_templates=self.list_resource_templates,
            on_read_resource=self.read_resource,
            on_list_prompts=self.list_prompts,
            on_get_prompt=self.get_prompt,
        )
        server.add_request_handler("tasks/get", _TaskParams, self.tasks_get)
        server.add_request_handler("tasks/update", _UpdateParams, self.tasks_update)
        server.add_request_handler("tasks/cancel", _TaskParams, self.tasks_cancel)
        return server

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        # Two pages, so the source follows the cursor; a listing counts once.
        if params is None or params.cursor is None:
            self.state.listings += 1
            return types.ListToolsResult(tools=TOOLS[:5], next_cursor="page-2")
        return types.ListToolsResult(tools=TOOLS[5:])

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> Any:
        name, arguments = params.name, dict(params.arguments or {})
        meta = dict(ctx.meta or {})
        self.state.record(name, arguments, meta)
        handler = _CALLS.get(name)
        if handler is not None:
            return handler(arguments, meta)
        if name.startswith("task_"):
            return self._start_task(ctx, name, arguments)
        if name == "repeat_once":
            if params.request_state is None:
                return types.InputRequiredResult(request_state="round-2")
            return _text(f"repeated after {params.request_state}")
        if name == "progress":
            for step in (1, 2, 3):
                await ctx.session.report_progress(step, 3, f"step {step}")
            return _text("progressed")
        if name == "slow":
            await asyncio.sleep(30)
            return _text("slow done")
        if name == "crash":
            os._exit(3)
        raise MCPError(types.INVALID_PARAMS, f"unknown tool {name}")

    def _start_task(
        self, ctx: ServerRequestContext[Any], name: str, arguments: dict[str, Any]
    ) -> Any:
        if not _declares_tasks(ctx):
            return _text(f"{name} ran without a task")
        task = Task(task_id=uuid.uuid4().hex, kind=name, arguments=arguments)
        self.state.tasks[task.task_id] = task
        return {
            "resultType": "task",
            "taskId": task.task_id,
            "status": "working",
            "createdAt": NOW,
            "lastUpdatedAt": NOW,
            "ttlMs": None,
            "pollIntervalMs": 100,
        }

    def _advance(self, task: Task) -> None:
        task.polls += 1
        if task.status in ("completed", "failed", "cancelled"):
            return
        kind = task.kind
        if kind in ("task_quick", "task_write") and task.polls >= 2:
            task.status = "completed"
            task.result = _text(f"{kind} done").model_dump(by_alias=True, mode="json")
        elif kind == "task_gated" and self.state.release.is_set():
            task.status = "completed"
            task.result = _text("gated task done").model_dump(by_alias=True, mode="json")
        elif kind == "task_ask":
            self._advance_question(task)
        elif kind == "task_url":
            task.status = "input_required"
            task.input_requests = {
                "visit": {
                    "method": "elicitation/create",
                    "params": {
                        "mode": "url",
                        "message": "Sign in",
                        "url": "https://example.invalid/login",
                        "elicitationId": "e1",
                    },
                }
            }
        elif kind == "task_fail":
            task.status = "failed"
            task.error = {"code": types.INTERNAL_ERROR, "message": "the job exploded"}
        elif kind == "task_cancelled":
            task.status = "cancelled"
            task.status_message = "an operator cancelled it"

    def _advance_question(self, task: Task) -> None:
        if not task.answers:
            task.status = "input_required"
            kind = task.arguments.get("kind", "enum")
            task.input_requests = {"ask-1": _elicitation("Which colour?", kind)}
            return
        answer = task.answers[-1]
        task.input_requests = None
        if answer.get("action") == "accept":
            task.status = "completed"
            content = answer.get("content") or {}
            text = f"painted {json.dumps(content, sort_keys=True)}"
            task.result = _text(text).model_dump(by_alias=True, mode="json")
        else:
            task.status = "cancelled"
            task.status_message = f"the user chose {answer.get('action')}"

    async def tasks_get(self, ctx: ServerRequestContext[Any], params: _TaskParams) -> Any:
        task = self.state.tasks.get(params.task_id)
        if task is None or task.kind == "task_forgotten":
            raise MCPError(types.INVALID_PARAMS, f"Failed to retrieve task: {params.task_id}")
        self._advance(task)
        body: dict[str, Any] = {
            "resultType": "complete",
            "taskId": task.task_id,
            "status": task.status,
            "createdAt": NOW,
            "lastUpdatedAt": NOW,
            "ttlMs": None,
            "pollIntervalMs": 100,
        }
        if task.status_message:
            body["statusMessage"] = task.status_message
        if task.status == "input_required":
            body["inputRequests"] = task.input_requests
        if task.result is not None:
            body["result"] = task.result
        if task.error is not None:
            body["error"] = task.error
        return body

    async def tasks_update(self, ctx: ServerRequestContext[Any], params: _UpdateParams) -> Any:
        task = self.state.tasks.get(params.task_id)
        if task is None:
            raise MCPError(types.INVALID_PARAMS, "unknown task")
        self.state.updates.append((params.task_id, params.input_responses))
        for key, response in params.input_responses.items():
            if task.input_requests and key in task.input_requests:
                task.answers.append(response)
                task.status = "working"
        return {"resultType": "complete"}

    async def tasks_cancel(self, ctx: ServerRequestContext[Any], params: _TaskParams) -> Any:
        self.state.cancels.append(params.task_id)
        task = self.state.tasks.get(params.task_id)
        if task is None:
            raise MCPError(types.INVALID_PARAMS, "unknown task")
        if task.status not in ("completed", "failed"):
            task.status = "cancelled"
        return {"resultType": "complete"}

    async def list_resources(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        resource = types.Resource(uri="memo://readme", name="readme", mime_type="text/plain")
        if params is None or params.cursor is None:
            return types.ListResourcesResult(resources=[resource], next_cursor="more")
        second = types.Resource(uri="memo://changelog", name="changelog")
        return types.ListResourcesResult(resources=[second])

    async def list_resource_templates(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        template = types.ResourceTemplate(uri_template="memo://{name}", name="memo")
        return types.ListResourceTemplatesResult(resource_templates=[template])

    async def read_resource(
        self, ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        if params.uri != "memo://readme":
            raise MCPError(types.INVALID_PARAMS, f"no resource {params.uri}")
        contents = types.TextResourceContents(uri=params.uri, text="hello", mime_type="text/plain")
        return types.ReadResourceResult(contents=[contents])

    async def list_prompts(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        argument = types.PromptArgument(name="name", required=True)
        return types.ListPromptsResult(prompts=[types.Prompt(name="greet", arguments=[argument])])

    async def get_prompt(
        self, ctx: ServerRequestContext[Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        name = (params.arguments or {}).get("name", "nobody")
        message = types.PromptMessage(
            role="user", content=types.TextContent(type="text", text=f"Say hi to {name}")
        )
        return types.GetPromptResult(description="A greeting", messages=[message])


def _echo(arguments: dict[str, Any], meta: dict[str, Any]) -> Any:
    sdk = ("io.modelcontextprotocol/", "progress")  # the SDK's own keys
    extra = {k: v for k, v in meta.items() if not k.startswith(sdk)}
    return _text(json.dumps({"arguments": arguments, "meta": extra}, sort_keys=True))


def _outcome(outcome: Any, text: str | None = "the provider timed out") -> Any:
    content = [types.TextContent(type="text", text=text)] if text else []
    return types.CallToolResult(content=content, is_error=True, _meta={OUTCOME: outcome})


def _raise(code: int, message: str, outcome: str | None = None) -> Any:
    raise MCPError(code, message, {"_meta": {OUTCOME: outcome}} if outcome else None)


def _image_result(count: int, data: str, *, is_error: bool = False) -> Any:
    content: list[Any] = [types.TextContent(type="text", text="before")]
    content += [types.ImageContent(type="image", data=data, mime_type="image/png")] * count
    content.append(types.TextContent(type="text", text="after"))
    return types.CallToolResult(content=content, is_error=is_error)


_CALLS: dict[str, Callable[[dict[str, Any], dict[str, Any]], Any]] = {
    "echo": _echo,
    "add_note": lambda a, m: _text(f"noted {m.get(IDEMPOTENCY_KEY)}"),
    "send_email": lambda a, m: _text("sent"),
    "declared_read": lambda a, m: _text("declared read"),
    "declared_write": lambda a, m: _text("declared write"),
    "declared_once": lambda a, m: _text("declared once"),
    "declared_fail": lambda a, m: _text("the ledger is closed", is_error=True),
    "declared_odd_approval": lambda a, m: _text("declared odd"),
    "declared_bogus": lambda a, m: _text("bogus"),
    "approval_only": lambda a, m: _text("approval only"),
    "fail_tool": lambda a, m: _text("the record is locked", is_error=True),
    "rpc_error": lambda a, m: _raise(types.INVALID_PARAMS, "bad input"),
    "internal_error": lambda a, m: _raise(types.INTERNAL_ERROR, "internal"),
    "internal_error_write": lambda a, m: _raise(types.INTERNAL_ERROR, "internal"),
    "repeat_forever": lambda a, m: types.InputRequiredResult(request_state="again"),
    "ask_direct": lambda a, m: types.InputRequiredResult(
        input_requests={
            "q": types.ElicitRequest(
                params=types.ElicitRequestFormParams(
                    message="Which account?",
                    requested_schema={"type": "object", "properties": {"a": {"type": "string"}}},
                )
            )
        }
    ),
    "outcome_unknown": lambda a, m: _outcome("unknown"),
    "outcome_rejected": lambda a, m: _outcome("rejected", "the account is frozen"),
    "outcome_unknown_rpc": lambda a, m: _raise(types.INTERNAL_ERROR, "gateway lost it", "unknown"),
    "outcome_rejected_rpc": lambda a, m: _raise(-32050, "not allowed", "rejected"),
    "outcome_reserved": lambda a, m: _text("fine", _meta={OUTCOME: "maybe"}),
    "outcome_empty": lambda a, m: _outcome("unknown", None),
    "image": lambda a, m: _image_result(2, b64(png())),
    "image_error": lambda a, m: _image_result(1, b64(png()), is_error=True),
    "too_many_images": lambda a, m: _image_result(21, b64(png())),
    "bad_base64": lambda a, m: _image_result(1, "not base64!"),
    "noncanonical_base64": lambda a, m: _image_result(1, "QR=="),  # decodes, but QQ== is canonical
    "not_an_image": lambda a, m: _image_result(1, b64(b"plain text, not an image")),
    "regional": lambda a, m: _text(f"served {a.get('region')}"),
    "gateway_500": lambda a, m: _text("the gateway answers before this"),
    "gateway_html": lambda a, m: _text("the gateway answers before this"),
}


class _Gateway:
    """ASGI middleware: answers ``gateway_*`` tool calls as a broken gateway would."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        name = ""
        try:
            request = json.loads(body)
            if request.get("method") == "tools/call":
                name = request["params"]["name"]
        except (ValueError, KeyError, TypeError, AttributeError):
            pass
        if name in ("gateway_500", "gateway_html"):
            status, kind = (500, b"text/plain") if name == "gateway_500" else (200, b"text/html")
            await send(
                {
                    "type": "http.response.start",
                    "status": status,
                    "headers": [(b"content-type", kind)],
                }
            )
            await send({"type": "http.response.body", "body": b"<html>upstream failed</html>"})
            return
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


class HttpMcpServer:
    """The test server over Streamable HTTP, in a thread, on a loopback port.

    ``stop`` and ``start`` again keep the port, so a server can go down and come back.
    """

    def __init__(self, state: ServerState | None = None) -> None:
        self.state = state or ServerState()
        self.port = 0
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self, timeout: float = 30.0) -> str:
        import uvicorn

        app = _Gateway(ServerHandlers(self.state).build().streamable_http_app(host="127.0.0.1"))
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False)
        server = uvicorn.Server(config)
        self._server = server
        self._thread = threading.Thread(
            target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not server.started:  # poll the observable state with a deadline
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the test MCP server did not start")
            threading.Event().wait(0.01)
        return self.url

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=30)
        self._server = None
        self._thread = None


async def _serve_stdio() -> None:
    from mcp.server.stdio import stdio_server

    state = ServerState(log_path=os.environ.get("MCP_TEST_LOG"))
    server = ServerHandlers(state).build()
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def stdio_main(run: Callable[[], Awaitable[None]] = _serve_stdio) -> None:
    import anyio

    anyio.run(run)


if __name__ == "__main__":
    stdio_main()
    sys.exit(0)
