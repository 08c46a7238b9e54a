"""One ``tools/call`` and what its answer records: the spec's table of outcomes.

| What happens | Recorded |
| --- | --- |
| a result | the result (see ``_content``) |
| a JSON-RPC error with the Dex ``outcome`` key | ``outcome_unknown`` or ``failed`` |
| a JSON-RPC error other than the interrupted codes | ``failed`` (``MCP error <code>: <message>``) |
| a broken stream, an exited server, a timeout, ``-32603``, ``-32700``, an HTTP
  error status or a body that is not JSON-RPC, endless requests to repeat | a Step
  failure (:class:`McpToolCallInterruptedError`) |
| ``input_required`` with input requests | ``failed`` (``cannot provide yet``) |
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from dex_agents_ray.mcp._content import raise_for_error
from dex_agents_ray.mcp._errors import McpToolCallInterruptedError
from dex_agents_ray.mcp._inputs import unsupported_input_message
from dex_agents_ray.session import ToolExecutionError

if TYPE_CHECKING:
    from dex_agents_ray.mcp._connection import McpConnection, ProgressCallback

__all__ = ["MAX_REPEAT_ROUNDS", "INTERRUPTED_CODES", "send_tool_call"]

MAX_REPEAT_ROUNDS = 10
"""State-only ``input_required`` answers resent at once before the call counts as interrupted."""

HEADER_MISMATCH = -32020
"""The request's headers do not match its body; the server ran nothing."""

INTERRUPTED_CODES = frozenset({-32603, -32700, -32000, -32001})
"""Internal error, parse error, and the SDK's connection-closed and request-timeout codes:
the server may have run the call, so it is interrupted, not failed."""


def _interrupted(where: str, detail: str) -> McpToolCallInterruptedError:
    return McpToolCallInterruptedError(
        f"the MCP call {where} was interrupted after it was sent: {detail}"
    )


def _classify_error(connection: McpConnection, error: Exception, where: str) -> BaseException:
    from dex_agents_ray.mcp._connection import MCPError

    if isinstance(error, MCPError):
        raise_for_error(error.code, error.message, error.data, where)
        problems = connection.http_problems()
        if problems:
            return _interrupted(where, f"{problems[-1]} (MCP error {error.code}: {error.message})")
        if error.code in INTERRUPTED_CODES:
            return _interrupted(where, f"MCP error {error.code}: {error.message}")
        return ToolExecutionError(f"MCP error {error.code}: {error.message}")
    return _interrupted(where, f"{type(error).__name__}: {error}")


async def send_tool_call(
    connection: McpConnection,
    *,
    tool_name: str,
    arguments: dict[str, Any],
    meta: dict[str, Any],
    timeout: float,
    progress: ProgressCallback | None,
    where: str,
) -> dict[str, Any]:
    """Send ``tools/call`` and return its final answer in wire form: a result
    (``resultType`` ``complete`` or absent) or a task handle (``task``).

    Raises:
        ToolExecutionError: A JSON-RPC error, or a request for input.
        ToolOutcomeUnknownError: A JSON-RPC error with ``outcome: unknown``.
        McpToolCallInterruptedError: The call broke off after it was sent.
    """
    from dex_agents_ray.mcp._connection import MCPError

    request_state: str | None = None
    relisted = False
    for _ in range(MAX_REPEAT_ROUNDS + 1):
        connection.forget_http_problems()
        try:
            answer = await connection.call_tool(
                tool_name,
                arguments,
                meta=meta,
                timeout=timeout,
                request_state=request_state,
                progress=progress,
            )
        except MCPError as error:
            if error.code != HEADER_MISMATCH or relisted:
                raise _classify_error(connection, error, where) from error
            # The server refused the request before running it: it wants the
            # Mcp-Param-* headers of the tool's listed schema. Learn them, send again.
            relisted = True
            try:
                await connection.learn_tool_headers(tool_name)
            except Exception as relist_error:
                raise ToolExecutionError(
                    f"MCP error {error.code}: {error.message}"
                ) from relist_error
            continue
        except Exception as error:  # classified by the outcome table
            raise _classify_error(connection, error, where) from error
        if answer.get("resultType") != "input_required":
            return answer
        requests = answer.get("inputRequests")
        if isinstance(requests, Mapping) and requests:
            raise ToolExecutionError(unsupported_input_message(requests))
        state = answer.get("requestState")
        request_state = state if isinstance(state, str) else None
    raise _interrupted(where, "the MCP server kept asking to repeat the call")
