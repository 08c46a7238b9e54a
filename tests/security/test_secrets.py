"""A canary secret given as an ``EnvironmentSecret`` never reaches the store, a
snapshot, an event, a log or a ``repr``; a literal one does reach the stored Flow
(which is why the reference exists, and shows the scan finds what it looks for)."""

from __future__ import annotations

import http.server
import logging
import pickle
import secrets
import threading
from pathlib import Path
from typing import Any, ClassVar

import pytest
from ray import cloudpickle

from dex_agents_ray import AgentSessionClient
from dex_agents_ray.mcp import (
    EnvironmentSecret,
    McpConnectionError,
    McpStreamableHttpServerConfig,
    McpToolSource,
)
from dex_agents_ray.mcp._config import resolve_headers
from dex_agents_ray.mcp._connection import ConnectionSettings, open_connection
from dex_agents_ray.testing import wait_for_agent_snapshot
from tests.mcp.agents import mcp_flow
from tests.session.polling import turn_done

CANARY_ENV = "DEX_TEST_CANARY_TOKEN"


def _server(headers: dict[str, Any]) -> McpStreamableHttpServerConfig:
    # Nothing listens on port 9 of loopback: every connection is refused.
    return McpStreamableHttpServerConfig(
        name="tickets", url="http://127.0.0.1:9/mcp", headers=headers
    )


def test_an_environment_secret_is_read_when_headers_are_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    canary = secrets.token_hex(16)
    reference = EnvironmentSecret(name=CANARY_ENV, template="Bearer {}")
    server = _server({"Authorization": reference, "X-Plain": "visible"})
    monkeypatch.delenv(CANARY_ENV, raising=False)
    with pytest.raises(LookupError, match=CANARY_ENV):
        resolve_headers(server.headers)
    monkeypatch.setenv(CANARY_ENV, canary)

    assert resolve_headers(server.headers) == {
        "Authorization": f"Bearer {canary}",
        "X-Plain": "visible",
    }
    assert canary.encode() not in pickle.dumps(server)
    assert canary not in repr(server) + repr(reference)
    with pytest.raises(ValueError, match="one '\\{\\}'"):
        EnvironmentSecret(name=CANARY_ENV, template="Bearer")
    with pytest.raises(TypeError, match="headers must map str to str or EnvironmentSecret"):
        _server({"Authorization": 42})


def test_a_literal_header_is_stored_with_the_flow() -> None:
    canary = secrets.token_hex(16)
    flow = mcp_flow("Literal", McpToolSource([_server({"Authorization": canary})]), [])

    assert canary.encode() in cloudpickle.dumps(flow)


async def test_a_canary_secret_is_in_no_stored_value_snapshot_event_or_log(
    engine_factory: Any,
    store_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    canary = secrets.token_hex(16)
    monkeypatch.setenv(CANARY_ENV, canary)  # the driver resolves it too, if anything does
    reference = EnvironmentSecret(name=CANARY_ENV, template="Bearer {}")
    tools = McpToolSource([_server({"Authorization": reference})])
    flow = mcp_flow("Canary", tools, [("c1", "tickets__open", {"title": canary[:4]})])
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("canary-1", "open a ticket")
    done = await wait_for_agent_snapshot(sessions, "canary-1", turn_done(1), timeout=120)
    events = []
    token = ""
    while True:
        message = await sessions.read_event("canary-1", token, timeout=1)
        events.append(message.value)
        token = message.resume_token
        if message.value.type.value == "turn_completed":
            break
    history = await engine.client.read_step_history("canary-1")
    server = _server({"Authorization": reference})
    settings = ConnectionSettings(
        connection_timeout=2.0, connection_attempts=1, request_timeout=2.0
    )
    with pytest.raises(McpConnectionError) as refused:  # resolved here, where the canary is set
        async with open_connection(server, settings):
            pass

    stored = b"".join(
        p.read_bytes() for p in store_path.parent.iterdir() if p.name.startswith(store_path.name)
    )
    assert canary.encode() not in stored
    assert canary not in repr(done) + repr(events) + repr(history)
    assert canary not in repr(tools) + repr(flow)
    assert canary not in caplog.text + str(refused.value) + repr(refused.value.__cause__)


class _HeaderRecorder(http.server.BaseHTTPRequestHandler):
    """Records each request's Authorization header and answers 401 (no MCP here)."""

    seen: ClassVar[list[str | None]] = []

    def do_POST(self) -> None:
        self.seen.append(self.headers.get("Authorization"))
        self.send_response(401)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST

    def log_message(self, format: str, *args: Any) -> None:
        pass


async def test_the_environment_secret_is_what_the_server_receives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    canary = secrets.token_hex(16)
    monkeypatch.setenv(CANARY_ENV, canary)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HeaderRecorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        config = McpStreamableHttpServerConfig(
            name="rec",
            url=f"http://127.0.0.1:{server.server_address[1]}/mcp",
            headers={"Authorization": EnvironmentSecret(name=CANARY_ENV, template="Bearer {}")},
        )
        settings = ConnectionSettings(
            connection_timeout=5.0, connection_attempts=1, request_timeout=5.0
        )
        with pytest.raises(McpConnectionError) as refused:
            async with open_connection(config, settings):
                pass
    finally:
        server.shutdown()
        server.server_close()

    assert _HeaderRecorder.seen and set(_HeaderRecorder.seen) == {f"Bearer {canary}"}
    assert canary not in str(refused.value)
