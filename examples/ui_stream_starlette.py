"""A Starlette app that serves one agent session to a browser: the snapshot and its
Server-Sent Events (``dex_agents_ray.ui_stream``).

    app = build_app(engine.client, flow, authorize)
    uvicorn.run(app)   # GET /sessions/{id}/snapshot, GET /sessions/{id}/events

``authorize(request, session_id)`` must raise (or return a response) when the
caller may not read the session: the session ID and the token come from the browser.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from dex_agents_ray import AgentSessionFlow
from dex_agents_ray.ui_stream import (
    AGENT_EVENT_STREAM_HEADERS,
    InvalidAgentEventResumeTokenError,
    read_agent_event_stream_snapshot,
    stream_agent_event_frames,
)

Authorize = Callable[[Request, str], Awaitable[None]]


def build_app(client: Any, flow: AgentSessionFlow, authorize: Authorize) -> Starlette:
    async def snapshot(request: Request) -> Response:
        session_id = request.path_params["session_id"]
        await authorize(request, session_id)
        value = await read_agent_event_stream_snapshot(client, flow, session_id)
        return JSONResponse(value.to_json())

    async def events(request: Request) -> Response:
        session_id = request.path_params["session_id"]
        await authorize(request, session_id)
        resume_token = request.headers.get("last-event-id") or request.query_params.get(
            "resume_token", ""
        )
        try:
            frames = await stream_agent_event_frames(
                client, flow, session_id, resume_token=resume_token
            )
        except InvalidAgentEventResumeTokenError:
            return Response(status_code=400)
        return StreamingResponse(frames, headers=dict(AGENT_EVENT_STREAM_HEADERS))

    return Starlette(
        routes=[
            Route("/sessions/{session_id}/snapshot", snapshot),
            Route("/sessions/{session_id}/events", events),
        ]
    )
