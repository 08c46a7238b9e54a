"""An older MCP server, written by hand without the SDK: protocol 2025-06-18 over stdio.

It knows only the ``initialize`` handshake, ``tools/list`` and ``tools/call``, and
answers ``server/discover`` with "method not found", as servers from before
MCP 2026-07-28 do. Run: ``python -m tests.mcp.legacy_server``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

VERSION = "2025-06-18"


def _answer(request_id: Any, result: Any = None, error: Any = None) -> None:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id}
    message.update({"error": error} if error is not None else {"result": result})
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def _handle(message: dict[str, Any], negotiated: list[str]) -> None:
    method, params = message.get("method"), message.get("params") or {}
    if method == "initialize":
        negotiated.append(VERSION)
        info = {"name": "legacy", "version": "1"}
        _answer(
            message["id"],
            {"protocolVersion": VERSION, "capabilities": {"tools": {}}, "serverInfo": info},
        )
    elif method == "tools/list":
        tool = {
            "name": "add",
            "description": "Add two numbers.",
            "inputSchema": {"type": "object"},
            "annotations": {"readOnlyHint": True},
        }
        _answer(message["id"], {"tools": [tool]})
    elif method == "tools/call":
        arguments, meta = params.get("arguments") or {}, params.get("_meta") or {}
        text = json.dumps(
            {
                "sum": arguments["a"] + arguments["b"],
                "protocol": negotiated,
                "key": meta.get("io.superdurable.dex/idempotencyKey"),
            }
        )
        _answer(message["id"], {"content": [{"type": "text", "text": text}]})
    else:
        _answer(message["id"], error={"code": -32601, "message": f"Method not found: {method}"})


def main() -> None:
    negotiated: list[str] = []
    for line in sys.stdin:
        message = json.loads(line)
        if "id" in message and "method" in message:
            _handle(message, negotiated)


if __name__ == "__main__":
    main()
