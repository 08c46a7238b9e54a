"""One connection per request, on the MCP SDK: the only module that talks to it.

Imported lazily (``import mcp`` takes about a second), by the first request of
a process. Every request opens a new connection: a new process for a stdio
server, a new HTTP client for a Streamable HTTP server. The SDK speaks MCP
2026-07-28, which has no protocol session, and falls back to the ``initialize``
handshake for older servers.

The source declares the tasks extension (``io.modelcontextprotocol/tasks``) on
every request; mcp 2.3 has no client for it, so its three requests are built
here on the SDK's extension hooks. Results come back in wire form (plain
dicts) for the SDK-free modules that record them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Literal, cast

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.context import ClientRequestContext
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from pydantic import ConfigDict

from dex_agents_ray.mcp._config import McpServerConfig, McpStdioServerConfig, resolve_headers
from dex_agents_ray.mcp._errors import McpConnectionError

__all__ = [
    "TASKS_EXTENSION",
    "ConnectionSettings",
    "McpConnection",
    "MCPError",
    "open_connection",
]

_LOG = logging.getLogger("dex_agents_ray.mcp")

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
"""The tasks extension (SEP-2663) the source declares on every request."""

ProgressCallback = ProgressFnT
"""``async (progress, total, message) -> None``, for ``notifications/progress``."""


@dataclass(frozen=True, kw_only=True)
class ConnectionSettings:
    """The source's timeouts, in seconds, and connection attempts."""

    connection_timeout: float
    """Connecting, each handshake request, and each short request (listing, task requests)."""
    connection_attempts: int
    """Connections tried before a request counts as never sent."""
    request_timeout: float
    """A ``tools/call``, a resource read, or a prompt."""


class _WireResult(types.Result):
    """Any result, kept in wire form."""

    model_config = ConfigDict(extra="allow")


class _TaskHandle(types.Result):
    """``CreateTaskResult``: ``resultType: "task"`` with the task's fields (SEP-2663)."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"] = "task"


async def _never_resolved(result: _TaskHandle, context: ClaimContext) -> types.CallToolResult:
    raise RuntimeError("task handles are read by dex_agents_ray.mcp, not by Client.call_tool")


class _TasksExtension(ClientExtension):
    """Declares the tasks extension; the handles are read by the source itself."""

    identifier = TASKS_EXTENSION

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=_TaskHandle, resolve=_never_resolved)]


class _TaskParams(types.RequestParams):
    task_id: str


class _TaskUpdateParams(_TaskParams):
    input_responses: dict[str, Any]


class _GetTask(types.Request[_TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: _TaskParams
    name_param = "taskId"


class _UpdateTask(types.Request[_TaskUpdateParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    params: _TaskUpdateParams
    name_param = "taskId"


class _CancelTask(types.Request[_TaskParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: _TaskParams
    name_param = "taskId"


async def _refuse_elicitation(
    context: ClientRequestContext, params: types.ElicitRequestParams
) -> types.ErrorData:
    # Declares form elicitation, which task input requests need; a handshake-era
    # server's direct elicitation/create has no session question to go to.
    return types.ErrorData(
        code=types.INVALID_REQUEST,
        message="this agent session cannot answer an elicitation outside a task",
    )


@dataclass
class _HttpAnswers:
    """What the HTTP responses of one connection looked like, for the outcome table."""

    problems: list[str] = field(default_factory=list)

    async def record(self, response: httpx2.Response) -> None:
        content_type = response.headers.get("content-type", "").lower()
        readable = content_type.startswith(("application/json", "text/event-stream"))
        if response.status_code >= 400 and not content_type.startswith("application/json"):
            self.problems.append(f"HTTP {response.status_code}")
        elif response.status_code < 300 and response.status_code != 202 and not readable:
            self.problems.append(f"HTTP {response.status_code} with content type {content_type!r}")


_MAX_PAGES = 100
"""Pages read from one listing, so a paginator that never ends cannot hang a request."""

_LISTS: dict[str, tuple[Any, str]] = {
    "tools": (types.ListToolsRequest, "tools"),
    "resources": (types.ListResourcesRequest, "resources"),
    "resource_templates": (types.ListResourceTemplatesRequest, "resourceTemplates"),
    "prompts": (types.ListPromptsRequest, "prompts"),
}


def _client_version() -> str:
    try:
        return metadata.version("dex-agents-ray")
    except metadata.PackageNotFoundError:
        return "0"


class McpConnection:
    """An open connection to one server; lives for one request (and its task polls)."""

    def __init__(self, client: Client, server: McpServerConfig, answers: _HttpAnswers) -> None:
        self._client = client
        self.server = server
        self._answers = answers

    @property
    def protocol_version(self) -> str:
        """The negotiated MCP version."""
        return self._client.protocol_version

    @property
    def capabilities(self) -> dict[str, Any]:
        """The server's capabilities, in wire form."""
        return self._client.server_capabilities.model_dump(
            by_alias=True, mode="json", exclude_none=True
        )

    def http_problems(self) -> list[str]:
        """HTTP answers since the last ``forget_http_problems`` that were not JSON-RPC."""
        return list(self._answers.problems)

    def forget_http_problems(self) -> None:
        self._answers.problems.clear()

    async def _send(
        self,
        request: types.Request[Any, Any],
        timeout: float,
        progress: ProgressCallback | None = None,
    ) -> dict[str, Any]:
        result = await self._client.session.send_request(
            request,
            _WireResult,
            request_read_timeout_seconds=timeout,
            progress_callback=progress,
        )
        return result.model_dump(by_alias=True, mode="json")

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        meta: dict[str, Any],
        timeout: float,
        request_state: str | None = None,
        progress: ProgressCallback | None = None,
    ) -> dict[str, Any]:
        """One ``tools/call``; the answer in wire form (a result, a task, or input_required)."""
        params = types.CallToolRequestParams(
            name=name,
            arguments=arguments,
            request_state=request_state,
            _meta=cast(types.RequestParamsMeta, meta),
        )
        return await self._send(types.CallToolRequest(params=params), timeout, progress)

    async def list_tools(self, timeout: float) -> list[Any]:
        """Every page of ``tools/list``, each tool as the server sent it."""
        return await self.list_all("tools", timeout)

    async def learn_tool_headers(self, name: str) -> None:
        """List tools through the SDK session until ``name`` is seen, so a resent
        ``tools/call`` carries the ``Mcp-Param-*`` headers its schema asks for."""
        cursor: str | None = None
        for _ in range(_MAX_PAGES):
            params = types.PaginatedRequestParams(cursor=cursor)
            page = await self._client.session.list_tools(params=params)
            cursor = page.next_cursor
            if cursor is None or any(tool.name == name for tool in page.tools):
                return

    async def get_task(self, task_id: str, timeout: float) -> dict[str, Any]:
        """``tasks/get``: the task in wire form."""
        return await self._send(_GetTask(params=_TaskParams(task_id=task_id)), timeout)

    async def update_task(self, task_id: str, responses: dict[str, Any], timeout: float) -> None:
        """``tasks/update`` with input responses."""
        params = _TaskUpdateParams(task_id=task_id, input_responses=responses)
        await self._send(_UpdateTask(params=params), timeout)

    async def cancel_task(self, task_id: str, timeout: float) -> None:
        """``tasks/cancel``."""
        await self._send(_CancelTask(params=_TaskParams(task_id=task_id)), timeout)

    async def list_all(
        self, kind: Literal["tools", "resources", "resource_templates", "prompts"], timeout: float
    ) -> list[Any]:
        """Every page of ``tools/list``, ``resources/list``, ``resources/templates/list`` or
        ``prompts/list``, each item as the server sent it."""
        request_type, key = _LISTS[kind]
        items: list[Any] = []
        cursor: str | None = None
        for _ in range(_MAX_PAGES):
            request = request_type(params=types.PaginatedRequestParams(cursor=cursor))
            page = await self._send(request, timeout)
            listed = page.get(key)
            items.extend(listed if isinstance(listed, list) else [])
            next_cursor = page.get("nextCursor")
            cursor = next_cursor if isinstance(next_cursor, str) else None
            if cursor is None:
                break
        return items

    async def read_resource(self, uri: str, timeout: float) -> dict[str, Any]:
        """``resources/read`` in wire form."""
        params = types.ReadResourceRequestParams(uri=uri)
        return await self._send(types.ReadResourceRequest(params=params), timeout)

    async def get_prompt(
        self, name: str, arguments: dict[str, str] | None, timeout: float
    ) -> dict[str, Any]:
        """``prompts/get`` in wire form."""
        params = types.GetPromptRequestParams(name=name, arguments=arguments)
        return await self._send(types.GetPromptRequest(params=params), timeout)


def _build_client(
    server: McpServerConfig,
    settings: ConnectionSettings,
    answers: _HttpAnswers,
    stack: AsyncExitStack,
) -> Client:
    transport: Any
    if isinstance(server, McpStdioServerConfig):
        transport = StdioServerParameters(
            command=server.command,
            args=list(server.args),
            env=dict(server.env) if server.env is not None else None,
            cwd=server.cwd,
        )
    else:
        timeout = httpx2.Timeout(
            settings.connection_timeout,
            read=max(settings.request_timeout, settings.connection_timeout) + 5.0,
        )
        http_client = httpx2.AsyncClient(
            headers=resolve_headers(server.headers),
            timeout=timeout,
            event_hooks={"response": [answers.record]},
        )
        stack.push_async_callback(http_client.aclose)
        transport = streamable_http_client(server.url, http_client=http_client)
    return Client(
        transport,
        mode="auto",
        read_timeout_seconds=settings.connection_timeout,
        extensions=[_TasksExtension()],
        elicitation_callback=_refuse_elicitation,
        cache=None,
        client_info=types.Implementation(name="dex-agents-ray", version=_client_version()),
    )


async def _close_quietly(stack: AsyncExitStack, server: McpServerConfig) -> None:
    try:
        await stack.aclose()
    except Exception as error:  # cleanup after the answer is in: nothing to record
        _LOG.debug("closing the connection to MCP server %s failed: %r", server.name, error)


def _describe(error: BaseException) -> str:
    if isinstance(error, BaseExceptionGroup) and error.exceptions:
        return _describe(error.exceptions[0])
    if isinstance(error, MCPError):
        return f"MCP error {error.code}: {error.message}"
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


@contextlib.asynccontextmanager
async def open_connection(
    server: McpServerConfig, settings: ConnectionSettings
) -> AsyncIterator[McpConnection]:
    """A new connection to ``server``, after up to ``connection_attempts`` tries.

    Raises:
        McpConnectionError: Every attempt failed; nothing was sent.
    """
    last: BaseException | None = None
    attempts = max(1, settings.connection_attempts)
    for attempt in range(attempts):
        if attempt:
            await asyncio.sleep(min(0.1 * 2 ** (attempt - 1), 1.0))
        stack = AsyncExitStack()
        answers = _HttpAnswers()
        try:
            client = _build_client(server, settings, answers, stack)
            # The handshake requests are bounded by read_timeout_seconds; no outer
            # timer, which would run the SDK's task groups in another task.
            await stack.enter_async_context(client)
        except Exception as error:  # any failure to connect: try again, then give up
            last = error
            await _close_quietly(stack, server)
            continue
        break
    else:
        raise McpConnectionError(
            server.name, attempts, _describe(last) if last else "no attempt"
        ) from last
    try:
        yield McpConnection(client, server, answers)
    finally:
        await _close_quietly(stack, server)
