"""The MCP source's own errors.

Errors, drawn::

    DexAgentsError (dex_agents_ray.errors)
    ├── McpToolCallInterruptedError   a sent ``tools/call`` broke off: a Step failure, so
    │                                 ``CallTool`` sends it again (read, idempotent_write)
    │                                 and other effects record ``outcome_unknown``
    └── McpConnectionError            no connection after every attempt; nothing was sent

The control-flow errors a call raises for the session are the session's own:
``ToolExecutionError`` (``failed``) and ``ToolOutcomeUnknownError``
(``outcome_unknown``).
"""

from __future__ import annotations

from dex_agents_ray.errors import DexAgentsError

__all__ = ["MISSING_EXTRA_MESSAGE", "McpConnectionError", "McpToolCallInterruptedError"]

MISSING_EXTRA_MESSAGE = 'dex_agents_ray.mcp needs the MCP SDK: pip install "dex-agents-ray[mcp]"'


class McpToolCallInterruptedError(DexAgentsError):
    """A ``tools/call`` that was sent broke off before its answer arrived.

    The stream broke, the server exited, the request timed out, or the answer was
    an internal error (``-32603``), an HTTP error status, a body that is not
    JSON-RPC, or a request to repeat the call without end. The server may have
    run the call, so this is a Step failure: ``CallTool`` sends a ``read`` or
    ``idempotent_write`` call again with the same idempotency key, and other
    effects record ``outcome_unknown``.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class McpConnectionError(DexAgentsError):
    """No connection to an MCP server after every attempt; no request was sent."""

    def __init__(self, server_name: str, attempts: int, detail: str) -> None:
        super().__init__(
            f"could not connect to MCP server {server_name} in {attempts} attempt"
            f"{'s' if attempts != 1 else ''}: {detail}"
        )
        self.server_name = server_name
        self.attempts = attempts
        self.detail = detail

    def __reduce__(self) -> tuple[type[McpConnectionError], tuple[str, int, str]]:
        return type(self), (self.server_name, self.attempts, self.detail)
