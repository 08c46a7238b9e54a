"""``McpToolSource``: MCP servers' tools as durable agent tools.

Every call runs in its own tool Step, with an effect class from the tool's
annotations or the Dex MCP conventions. The source lists servers on the Worker
(cached per process), and the tool Step reaches the server named in the call's
``tool_source_reference`` directly, without a listing.

Lifecycle: the source is pickled with its Flow; a Worker rebuilds its listing
cache empty. Its methods may run concurrently, on any Worker, and again after a
crash.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from dex_agents_ray.mcp._calls import send_tool_call
from dex_agents_ray.mcp._config import (
    McpServerConfig,
    McpStdioServerConfig,
    McpStreamableHttpServerConfig,
)
from dex_agents_ray.mcp._content import finish_result
from dex_agents_ray.mcp._conventions import IDEMPOTENCY_KEY_META_KEY, merge_tool_policy
from dex_agents_ray.mcp._errors import McpConnectionError
from dex_agents_ray.mcp._listing import ListingCache, combine_listings
from dex_agents_ray.mcp._tools import McpTool, resource_and_prompt_tools, tool_from_listing
from dex_agents_ray.media import MediaStore
from dex_agents_ray.session import (
    AgentEventType,
    AgentEventWriter,
    AgentToolCall,
    AgentTurnContext,
    DeferredToolCall,
    DeferredToolExecution,
    DeferredToolOutcome,
    ToolCallStepOptions,
    ToolEffect,
    ToolExecutionError,
    ToolExecutionResult,
    ToolPolicy,
    ToolTaskCancellation,
    ToolTaskPoll,
    ToolTaskPollOutcome,
    ToolTaskStarted,
)

if TYPE_CHECKING:
    from dex_agents_ray.mcp._connection import ConnectionSettings, ProgressCallback

__all__ = ["DeferredToolHandler", "McpToolSource"]

DeferredToolHandler = Callable[[DeferredToolExecution], Awaitable[DeferredToolOutcome]]
"""What :meth:`McpToolSource.deferred_tool_handlers` maps each tool name to."""

_CHECKPOINT_KEY = "mcp_task"


def _positive(name: str, value: timedelta) -> float:
    if not isinstance(value, timedelta) or value <= timedelta(0):
        raise ValueError(f"{name} must be a positive timedelta, got {value!r}")
    return value.total_seconds()


def _parse_arguments(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text) if text.strip() else {}
    except ValueError as error:
        raise ToolExecutionError(f"the tool arguments are not valid JSON: {error}") from error
    if not isinstance(value, dict):
        raise ToolExecutionError("the tool arguments must be a JSON object")
    return value


class McpToolSource:
    """MCP servers' tools as a ``ToolSource`` of the built-in loop, or for any runner.

    Configure it on the Worker, never from Flow input, a user message, or a
    browser: a stdio server's command runs with the Worker's privileges.

    Example::

        tools = McpToolSource([
            McpStdioServerConfig(name="files", command="mcp-server-files", args=["/srv/reports"]),
            McpStreamableHttpServerConfig(name="tickets", url="https://tickets.example.com/mcp"),
        ])
        agent = AgentDefinition(name="reports", instructions="...", model=model,
                                tool_sources=[tools])

    Args:
        servers: The servers, in offer order; names must be unique.
        source_name: The source's stable name; stored calls find it by this name.
        media_store: Where images in results are uploaded; ``None`` keeps them as JSON
            text in a result (error results never keep image bytes).
        resource_and_prompt_tools_enabled: Also offer the three resource and prompt
            tools (on one source of an agent only).
        trusts_tool_annotations: Whether annotations and Dex ``_meta`` keys set
            effects; a server's own setting wins.
        listing_ttl: How long a listing is fresh; later it is refreshed in the background.
        listing_failure_backoff: How long a server that could not be listed is left out.
        connection_timeout: Bounds connecting, each handshake request, listings and task
            requests.
        connection_attempts: Connections tried per request before it counts as never sent.
        request_timeout: Bounds a ``tools/call`` (and a resource read or prompt).
        task_wait_timeout: How long a tool Step polls a task itself (stdio, or a runner
            that does not poll tasks) before the attempt fails.
        clock: Monotonic seconds for the listing cache; for tests.

    Raises:
        ValueError: Two servers share a name, or an option is out of range.
    """

    def __init__(
        self,
        servers: Sequence[McpServerConfig],
        *,
        source_name: str = "mcp",
        media_store: MediaStore | None = None,
        resource_and_prompt_tools_enabled: bool = False,
        trusts_tool_annotations: bool = True,
        listing_ttl: timedelta = timedelta(minutes=5),
        listing_failure_backoff: timedelta = timedelta(seconds=30),
        connection_timeout: timedelta = timedelta(seconds=30),
        connection_attempts: int = 3,
        request_timeout: timedelta = timedelta(minutes=10),
        task_wait_timeout: timedelta = timedelta(minutes=10),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not isinstance(source_name, str) or not source_name:
            raise ValueError("source_name must be a non-empty string")
        servers = tuple(servers)
        by_name: dict[str, McpServerConfig] = {}
        for server in servers:
            if not isinstance(server, McpStdioServerConfig | McpStreamableHttpServerConfig):
                raise TypeError(f"servers must hold MCP server configs, got {server!r}")
            if server.name in by_name:
                raise ValueError(f"two MCP servers are named {server.name}")
            by_name[server.name] = server
        if isinstance(connection_attempts, bool) or not isinstance(connection_attempts, int):
            raise TypeError("connection_attempts must be an int")
        if connection_attempts < 1:
            raise ValueError(f"connection_attempts must be at least 1, got {connection_attempts}")
        self._source_name = source_name
        self._servers = by_name
        self._media_store = media_store
        self._resource_tools_enabled = bool(resource_and_prompt_tools_enabled)
        self._trusts = bool(trusts_tool_annotations)
        self._ttl = _positive("listing_ttl", listing_ttl)
        self._backoff = _positive("listing_failure_backoff", listing_failure_backoff)
        self._connection_timeout = _positive("connection_timeout", connection_timeout)
        self._connection_attempts = connection_attempts
        self._request_timeout = _positive("request_timeout", request_timeout)
        self._task_wait_timeout = _positive("task_wait_timeout", task_wait_timeout)
        self._clock = clock
        self._cache = self._new_cache()

    def _new_cache(self) -> ListingCache:
        return ListingCache(
            tuple(self._servers.values()),
            self._list_server,
            ttl=self._ttl,
            backoff=self._backoff,
            clock=self._clock,
        )

    def __getstate__(self) -> dict[str, Any]:
        # The listing cache belongs to a process; a Worker starts with an empty one.
        return {k: v for k, v in self.__dict__.items() if k != "_cache"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._cache = self._new_cache()

    def __repr__(self) -> str:
        return f"McpToolSource({list(self._servers)!r}, source_name={self._source_name!r})"

    @property
    def source_name(self) -> str:
        """The source's stable name (``"mcp"`` by default)."""
        return self._source_name

    @property
    def servers(self) -> tuple[McpServerConfig, ...]:
        """The configured servers, in offer order."""
        return tuple(self._servers.values())

    # -- listing ---------------------------------------------------------------------

    @property
    def _settings(self) -> ConnectionSettings:
        from dex_agents_ray.mcp._connection import ConnectionSettings

        return ConnectionSettings(
            connection_timeout=self._connection_timeout,
            connection_attempts=self._connection_attempts,
            request_timeout=self._request_timeout,
        )

    def _trusted(self, server: McpServerConfig) -> bool:
        own = server.trusts_tool_annotations
        return self._trusts if own is None else own

    async def _list_server(self, server: McpServerConfig) -> tuple[McpTool, ...]:
        from dex_agents_ray.mcp._connection import open_connection

        async with open_connection(server, self._settings) as connection:
            definitions = await connection.list_tools(self._connection_timeout)
        trusted = self._trusted(server)
        tools = (tool_from_listing(server.name, d, trusted=trusted) for d in definitions)
        return tuple(tool for tool in tools if tool is not None)

    def _with_resource_tools(self, tools: list[McpTool]) -> list[McpTool]:
        if self._resource_tools_enabled and self._servers:
            tools.extend(resource_and_prompt_tools(list(self._servers)))
        return tools

    async def list_tools(self, *, refresh: bool = False) -> list[McpTool]:
        """The tools to offer now: each server's (cached per Worker), then the resource
        and prompt tools when enabled.

        The first listing of a server is awaited; a stale one is refreshed in the
        background; a server that cannot be listed is left out with a warning.
        ``refresh=True`` lists every server again now.
        """
        listings = await self._cache.listings(refresh=refresh)
        return self._with_resource_tools(combine_listings(listings))

    def cached_tools(self) -> list[McpTool]:
        """The last listing, without I/O (for token estimates)."""
        return self._with_resource_tools(combine_listings(self._cache.cached()))

    def declared_tool_names(self) -> list[str]:
        """Names this source always lists: the resource and prompt tools, when enabled."""
        return [tool.name for tool in self._with_resource_tools([])]

    def _find(self, name: str) -> McpTool | None:
        return next((tool for tool in self.cached_tools() if tool.name == name), None)

    # -- policies --------------------------------------------------------------------

    @staticmethod
    def _own_policy(tool: McpTool) -> ToolPolicy | None:
        if tool.effect is None:
            return None
        if tool.effect_declared:
            return merge_tool_policy(tool.effect, tool.approval_requested, None)
        return ToolPolicy(tool.effect)

    def tool_policies(self) -> dict[str, ToolPolicy]:
        """The policy each cached tool sets by itself: declared or annotated effects.

        Do not spread your own policies after these: a declared tool's policy may
        only be raised; use :meth:`merge_tool_policies`.
        """
        policies: dict[str, ToolPolicy] = {}
        for tool in self.cached_tools():
            policy = self._own_policy(tool)
            if policy is not None:
                policies[tool.name] = policy
        return policies

    def merge_tool_policies(self, policies: Mapping[str, ToolPolicy]) -> dict[str, ToolPolicy]:
        """``policies`` over the cached tools' own: yours win over annotations, and a
        declared tool gets the more conservative of its declaration and your policy."""
        merged = dict(policies)
        for tool in self.cached_tools():
            if tool.effect is None:
                continue
            if tool.effect_declared:
                merged[tool.name] = merge_tool_policy(
                    tool.effect, tool.approval_requested, policies.get(tool.name)
                )
            elif tool.name not in merged:
                merged[tool.name] = ToolPolicy(tool.effect)
        return merged

    def _policy(self, turn: AgentTurnContext, tool: McpTool | None, name: str) -> ToolPolicy:
        if tool is not None and tool.effect is not None and tool.effect_declared:
            return merge_tool_policy(
                tool.effect, tool.approval_requested, turn.tool_policies.get(name)
            )
        return turn.resolve_tool_policy(name, tool.effect if tool is not None else None)

    # -- calls -----------------------------------------------------------------------

    def deferred_tool_call(
        self,
        turn: AgentTurnContext,
        *,
        tool_call_id: str,
        tool_name: str,
        arguments: str,
        listed_tool: Any = None,
    ) -> DeferredToolCall:
        """The deferred call of a listed tool: its policy, and a reference naming the
        server and the tool's MCP name so the tool Step needs no listing."""
        tool = listed_tool if isinstance(listed_tool, McpTool) else self._find(tool_name)
        reference: str | None = None
        if tool is not None and tool.server_name is not None:
            reference = json.dumps({"server": tool.server_name, "tool": tool.mcp_name})
        elif tool is not None:
            reference = json.dumps({"builtin": tool.name})
        policy = self._policy(turn, tool, tool_name)
        # A declared write runs in the model's order after the response's earlier
        # writes, and is skipped after one that did not succeed (Dex MCP conventions).
        declared = tool is not None and tool.effect is not None and tool.effect_declared
        return DeferredToolCall(
            tool_call_id=tool_call_id,
            tool_name=tool_name,
            arguments=arguments,
            policy=policy,
            tool_source_reference=reference,
            ordered=declared and policy.effect is not ToolEffect.READ,
        )

    async def deferred_tool_handlers(self) -> dict[str, DeferredToolHandler]:
        """A handler per listed tool name, each running ``execute_deferred_tool_call``."""
        return {tool.name: self.execute_deferred_tool_call for tool in await self.list_tools()}

    def _target(self, record: AgentToolCall) -> tuple[McpServerConfig | None, str, str | None]:
        """``(server, MCP tool name, None)`` or ``(None, "", builtin tool name)``."""
        try:
            value = json.loads(record.tool_source_reference or "")
        except ValueError:
            value = None
        if isinstance(value, dict) and isinstance(value.get("builtin"), str):
            return None, "", value["builtin"]
        if not isinstance(value, dict) or not isinstance(value.get("tool"), str):
            raise ToolExecutionError(f"unknown tool {record.tool_name}")
        server = self._servers.get(str(value.get("server")))
        if server is None:
            raise ToolExecutionError(f"MCP server {value.get('server')} is not configured")
        return server, value["tool"], None

    def will_resume_tool_task_without_sending(self, call: DeferredToolExecution) -> bool:
        """Whether executing ``call`` returns a task an earlier attempt started and can
        never send ``tools/call``: the session polls tasks, the server uses Streamable
        HTTP, and the call's checkpoint names the task."""
        try:
            server, _, builtin = self._target(call.tool_call)
        except ToolExecutionError:
            return False
        return (
            builtin is None
            and call.supports_tool_tasks
            and isinstance(server, McpStreamableHttpServerConfig)
            and _checkpointed_task(call.heartbeat_checkpoint) is not None
        )

    async def execute_deferred_tool_call(
        self, call: DeferredToolExecution, *, request_meta: Mapping[str, Any] | None = None
    ) -> DeferredToolOutcome:
        """Run one call in its tool Step: a new connection, one ``tools/call`` carrying
        the idempotency key (and ``request_meta``) in ``_meta``.

        Raises:
            ToolExecutionError: ``failed`` (see the outcome table).
            ToolOutcomeUnknownError: The server reported ``outcome: unknown``.
            McpToolCallInterruptedError: The call broke off after it was sent.
        """
        record = call.tool_call
        server, mcp_name, builtin = self._target(record)
        if builtin is not None:
            return await self._run_resource_tool(builtin, record.arguments)
        assert server is not None
        if self.will_resume_tool_task_without_sending(call):
            task_id, interval = _checkpointed_task(call.heartbeat_checkpoint) or ("", 1)
            return ToolTaskStarted(task_id=task_id, poll_interval_seconds=interval)
        meta = {**(request_meta or {}), IDEMPOTENCY_KEY_META_KEY: call.idempotency_key}
        return await self._call(server, mcp_name, _parse_arguments(record.arguments), meta, call)

    async def _call(
        self,
        server: McpServerConfig,
        mcp_name: str,
        arguments: dict[str, Any],
        meta: dict[str, Any],
        call: DeferredToolExecution | None,
    ) -> ToolExecutionResult | ToolTaskStarted:
        """Send one ``tools/call`` on a new connection and record its answer; a task
        becomes a tool task (Streamable HTTP, a session that polls) or is polled here."""
        from dex_agents_ray.mcp._connection import open_connection
        from dex_agents_ray.mcp._tasks import first_poll_interval, wait_in_step

        where = f"{server.name}/{mcp_name}"
        fields: dict[str, Any] = {}
        if call is not None:
            fields = {
                "tool_call_id": call.tool_call.tool_call_id,
                "tool_name": call.tool_call.tool_name,
            }
        try:
            async with open_connection(server, self._settings) as connection:
                answer = await send_tool_call(
                    connection,
                    tool_name=mcp_name,
                    arguments=arguments,
                    meta=meta,
                    timeout=self._request_timeout,
                    progress=None if call is None else _progress_events(call.events, fields),
                    where=where,
                )
                if answer.get("resultType") == "task":
                    task_id = _task_id(answer)
                    if (
                        call is not None
                        and call.supports_tool_tasks
                        and isinstance(server, McpStreamableHttpServerConfig)
                    ):
                        interval = first_poll_interval(answer)
                        checkpoint = {_CHECKPOINT_KEY: task_id, "poll_interval_seconds": interval}
                        await call.save_heartbeat_checkpoint(json.dumps(checkpoint))
                        return ToolTaskStarted(task_id=task_id, poll_interval_seconds=interval)

                    return await wait_in_step(
                        connection,
                        answer,
                        settings=self._settings,
                        wait_timeout=self._task_wait_timeout,
                        heartbeat=_no_heartbeat if call is None else call.heartbeat,
                        on_status=_status_events(call, fields, task_id),
                        media_store=self._media_store,
                        effect=None if call is None else call.tool_call.effect,
                        where=where,
                    )
        except McpConnectionError as error:
            raise ToolExecutionError(str(error)) from error
        return await finish_result(answer, media_store=self._media_store, where=where)

    async def _run_resource_tool(self, name: str, arguments: str) -> ToolExecutionResult:
        from dex_agents_ray.mcp._resources import run_resource_tool

        if not self._resource_tools_enabled:
            raise ToolExecutionError(f"unknown tool {name}")
        output = await run_resource_tool(
            name, _parse_arguments(arguments), self._servers, self._settings
        )
        return ToolExecutionResult(output=output)

    def _task_server(self, record: AgentToolCall) -> McpStreamableHttpServerConfig:
        # A Step failure, not ``failed``: the task may still run, so its effect decides.
        try:
            server, _, _ = self._target(record)
        except ToolExecutionError as error:
            raise LookupError(error.message) from error
        if not isinstance(server, McpStreamableHttpServerConfig) or not record.task_id:
            raise LookupError(f"tool call {record.tool_call_id} has no MCP task to reach")
        return server

    async def poll_tool_task(self, poll: ToolTaskPoll) -> ToolTaskPollOutcome:
        """Poll a Streamable HTTP server's task once, on a new connection."""
        from dex_agents_ray.mcp._connection import open_connection
        from dex_agents_ray.mcp._tasks import PollContext, poll_task

        server = self._task_server(poll.tool_call)
        context = PollContext(
            settings=self._settings,
            media_store=self._media_store,
            where=f"{server.name}/{poll.tool_call.tool_name}",
        )
        async with open_connection(server, self._settings) as connection:
            return await poll_task(connection, poll, context)

    async def cancel_tool_task(self, cancellation: ToolTaskCancellation) -> None:
        """Send ``tasks/cancel``; any answer from the server ends the cancellation."""
        from dex_agents_ray.mcp._connection import MCPError, open_connection

        server = self._task_server(cancellation.tool_call)
        async with open_connection(server, self._settings) as connection:
            try:
                await connection.cancel_task(
                    cancellation.tool_call.task_id or "", self._connection_timeout
                )
            except MCPError:
                return

    def tool_call_step_options(self, tool_call: AgentToolCall) -> ToolCallStepOptions | None:
        """A tool Step timeout that fits a ``tools/call`` and a task polled in the Step."""
        connecting = self._connection_timeout * (self._connection_attempts + 1)
        seconds = self._request_timeout + self._task_wait_timeout + connecting + 60
        return ToolCallStepOptions(timeout=timedelta(seconds=seconds))

    # -- the framework adapter path ----------------------------------------------------

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | str | None = None,
        *,
        idempotency_key: str | None = None,
        request_meta: Mapping[str, Any] | None = None,
    ) -> ToolExecutionResult:
        """Call a listed tool by its offered name, polling any task in place.

        For a framework adapter's schema-only tool: pass the key from the adapter's
        tool context as ``idempotency_key``.

        Raises:
            ToolExecutionError: An unknown tool, or ``failed`` per the outcome table.
            ToolOutcomeUnknownError: The server reported ``outcome: unknown``.
            McpToolCallInterruptedError: The call broke off after it was sent.
        """

        text = arguments if isinstance(arguments, str) else json.dumps(dict(arguments or {}))
        tool = next((t for t in await self.list_tools() if t.name == name), None)
        if tool is None:
            raise ToolExecutionError(f"unknown tool {name}")
        if tool.server_name is None or tool.mcp_name is None:
            return await self._run_resource_tool(tool.name, text)
        meta = dict(request_meta or {})
        if idempotency_key is not None:
            meta[IDEMPOTENCY_KEY_META_KEY] = idempotency_key
        server = self._servers[tool.server_name]
        result = await self._call(server, tool.mcp_name, _parse_arguments(text), meta, None)
        assert isinstance(result, ToolExecutionResult)  # without a call, tasks are polled here
        return result


async def _no_heartbeat() -> None:
    return None


def _task_id(answer: Mapping[str, Any]) -> str:
    task_id = answer.get("taskId")
    if not isinstance(task_id, str) or not task_id:
        raise ToolExecutionError("the MCP server answered with a task handle without a taskId")
    return task_id


def _checkpointed_task(checkpoint: str | None) -> tuple[str, int] | None:
    """The task an earlier attempt saved as its heartbeat checkpoint, with its interval."""
    if not checkpoint:
        return None
    try:
        value = json.loads(checkpoint)
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get(_CHECKPOINT_KEY), str):
        return None
    interval = value.get("poll_interval_seconds")
    return value[_CHECKPOINT_KEY], interval if isinstance(interval, int) and interval > 0 else 1


def _status_events(
    call: DeferredToolExecution | None, fields: Mapping[str, Any], task_id: str
) -> Callable[[Mapping[str, Any]], None]:
    """Writes ``mcp.task_status`` for a task polled in the Step (nothing without a call)."""

    def write(task: Mapping[str, Any]) -> None:
        if call is not None:
            payload = {
                **fields,
                "task_id": task_id,
                "status": task.get("status"),
                "status_message": task.get("statusMessage"),
            }
            call.events.write_event(AgentEventType.MCP_TASK_STATUS, payload)

    return write


def _progress_events(events: AgentEventWriter, fields: Mapping[str, Any]) -> ProgressCallback:
    async def report(progress: float, total: float | None, message: str | None) -> None:
        events.write_event(
            AgentEventType.MCP_TOOL_PROGRESS,
            {**fields, "progress": progress, "total": total, "message": message},
        )

    return report
