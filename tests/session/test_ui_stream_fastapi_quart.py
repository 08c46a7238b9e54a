"""The FastAPI and Quart browser-stream examples served for real on loopback: FastAPI
on uvicorn, Quart on hypercorn; an SSE client reads frames and reconnects with
``Last-Event-ID`` and gets the next event; a foreign token answers 400."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from hypercorn.asyncio import serve as hypercorn_serve
from hypercorn.config import Config as HypercornConfig

from dex_agents_ray import AgentSessionClient
from examples import ui_stream_fastapi, ui_stream_quart
from tests.serve.helpers import serving
from tests.session.agents import Reply, build_flow
from tests.session.polling import snapshot_when, turn_done


async def _allow(request: Any, session_id: str) -> None:
    return None


def _events(chunk: str) -> list[dict[str, Any]]:
    events = []
    for frame in chunk.split("\n\n"):
        lines = dict(line.split(": ", 1) for line in frame.split("\n") if ": " in line)
        if "data" in lines:
            events.append({"id": lines["id"], **json.loads(lines["data"])})
    return events


@asynccontextmanager
async def _hypercorn(app: Any) -> AsyncIterator[str]:
    """Serve ``app`` with hypercorn on a socket bound to a free loopback port."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    port = sock.getsockname()[1]
    config = HypercornConfig()
    config.bind = [f"fd://{sock.detach()}"]  # hypercorn owns (and closes) it now
    config.graceful_timeout = 1
    stop = asyncio.Event()
    task = asyncio.create_task(hypercorn_serve(app, config, shutdown_trigger=stop.wait))
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop.set()
        await task


async def _exercise(base: str, other_session_token: str) -> None:
    async with asyncio.timeout(60), httpx.AsyncClient(timeout=30) as http:
        snapshot = (await http.get(f"{base}/sessions/s-1/snapshot")).json()
        assert snapshot["snapshot"]["state"]["turn_count"] == 1
        assert set(snapshot) == {"snapshot", "resume_token"}
        seen: list[dict[str, Any]] = []
        async with http.stream("GET", f"{base}/sessions/s-1/events?resume_token=") as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            async for chunk in response.aiter_text():
                seen.extend(_events(chunk))
                if len(seen) >= 3:
                    break
        assert seen[0]["type"] == "turn_started"
        assert isinstance(seen[0]["payload"], str)  # payload is JSON text
        # A reconnect sends the last id as Last-Event-ID: the next event follows.
        headers = {"Last-Event-ID": seen[0]["id"]}
        resumed: list[dict[str, Any]] = []
        async with http.stream("GET", f"{base}/sessions/s-1/events", headers=headers) as response:
            async for chunk in response.aiter_text():
                resumed.extend(_events(chunk))
                if len(resumed) >= 2:
                    break
        assert [e["id"] for e in resumed[:2]] == [seen[1]["id"], seen[2]["id"]]
        for bad in ("nope", other_session_token):
            answer = await http.get(f"{base}/sessions/s-1/events?resume_token={bad}")
            assert answer.status_code == 400, bad


async def _two_sessions(engine_factory: Any, state_dir: Path) -> tuple[Any, Any, str]:
    flow = build_flow(state_dir, {"hi": [Reply()]})
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("s-1", "hi")
    await sessions.start_session("s-2", "hi")
    await snapshot_when(sessions, "s-1", turn_done(1))
    await snapshot_when(sessions, "s-2", turn_done(1))
    page = await engine.client.list_stream_messages("s-2", flow.agent_events, 1)
    return engine, flow, page.messages[0].resume_token


async def test_the_fastapi_example_over_http(engine_factory: Any, state_dir: Path) -> None:
    engine, flow, foreign = await _two_sessions(engine_factory, state_dir)
    async with serving(ui_stream_fastapi.build_app(engine.client, flow, _allow)) as base:
        await _exercise(base, foreign)


async def test_the_quart_example_over_http(engine_factory: Any, state_dir: Path) -> None:
    engine, flow, foreign = await _two_sessions(engine_factory, state_dir)
    async with _hypercorn(ui_stream_quart.build_app(engine.client, flow, _allow)) as base:
        await _exercise(base, foreign)
