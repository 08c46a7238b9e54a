"""The browser-stream examples under ``examples/`` served for real: the Starlette app
on uvicorn over loopback HTTP (an SSE client reads frames and reconnects with
``Last-Event-ID``), and the Flask app through Flask's test client."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from dex_agents_ray import AgentSessionClient
from examples import ui_stream_flask, ui_stream_starlette
from tests.engine.polling import until
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


async def test_the_starlette_example_over_http(engine_factory: Any, state_dir: Path) -> None:
    flow = build_flow(state_dir, {"hi": [Reply()]})
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("s-1", "hi")
    await snapshot_when(sessions, "s-1", turn_done(1))

    app = ui_stream_starlette.build_app(engine.client, flow, _allow)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    try:

        async def started() -> bool:
            return bool(server.started)

        await until(started, "uvicorn serving")
        port = server.servers[0].sockets[0].getsockname()[1]
        base = f"http://127.0.0.1:{port}/sessions/s-1"
        async with httpx.AsyncClient(timeout=30) as http:
            snapshot = (await http.get(f"{base}/snapshot")).json()
            assert snapshot["snapshot"]["state"]["turn_count"] == 1
            seen: list[dict[str, Any]] = []
            async with http.stream("GET", f"{base}/events?resume_token=") as response:
                assert response.headers["content-type"].startswith("text/event-stream")
                async for chunk in response.aiter_text():
                    seen.extend(_events(chunk))
                    if len(seen) >= 2:
                        break
            # A reconnect sends the last id as Last-Event-ID: the next event follows.
            headers = {"Last-Event-ID": seen[0]["id"]}
            async with http.stream("GET", f"{base}/events", headers=headers) as response:
                async for chunk in response.aiter_text():
                    resumed = _events(chunk)
                    if resumed:
                        assert resumed[0]["id"] == seen[1]["id"]
                        break
            bad = await http.get(f"{base}/events?resume_token=nope")
            assert bad.status_code == 400
    finally:
        server.should_exit = True
        await serving


async def test_the_flask_example(engine_factory: Any, state_dir: Path) -> None:
    flow = build_flow(state_dir, {"hi": [Reply()]})
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("s-1", "hi")
    await snapshot_when(sessions, "s-1", turn_done(1))
    app = ui_stream_flask.build_app(engine.sync_client(), flow, lambda request, session_id: None)

    def serve() -> tuple[Any, list[dict[str, Any]], int]:
        with app.test_client() as http:
            snapshot = http.get("/sessions/s-1/snapshot").get_json()
            response = http.get("/sessions/s-1/events?resume_token=", buffered=False)
            chunks = iter(response.response)
            events: list[dict[str, Any]] = []
            while len(events) < 2:
                events.extend(_events(next(chunks).decode()))
            response.close()
            bad = http.get("/sessions/s-1/events?resume_token=nope").status_code
        return snapshot, events, bad

    snapshot, events, bad = await asyncio.to_thread(serve)
    assert snapshot["snapshot"]["state"]["turn_count"] == 1
    assert [e["type"] for e in events[:1]] == ["turn_started"]
    assert bad == 400
