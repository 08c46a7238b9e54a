"""A FastAPI app that serves one agent session to a browser: the snapshot and its
Server-Sent Events (``dex_agents_ray.ui_stream``), as in the spec's FastAPI example.

    app = build_app(engine.client, flow, authorize_session)
    uvicorn.run(app)   # GET /sessions/{id}/snapshot, GET /sessions/{id}/events

``authorize_session(request, session_id)`` must raise (an ``HTTPException``) when
the caller may not read the session: the session ID and the token come from the
browser.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import StreamingResponse

from dex_agents_ray import AgentSessionFlow
from dex_agents_ray.ui_stream import (
    AGENT_EVENT_STREAM_HEADERS,
    InvalidAgentEventResumeTokenError,
    read_agent_event_stream_snapshot,
    stream_agent_event_frames,
)

AuthorizeSession = Callable[[Request, str], Awaitable[None]]


def build_app(client: Any, flow: AgentSessionFlow, authorize_session: AuthorizeSession) -> FastAPI:
    app = FastAPI()

    @app.get("/sessions/{session_id}/snapshot")
    async def get_session_snapshot(session_id: str, request: Request) -> dict[str, Any]:
        await authorize_session(request, session_id)
        return (await read_agent_event_stream_snapshot(client, flow, session_id)).to_json()

    @app.get("/sessions/{session_id}/events")
    async def get_session_events(session_id: str, request: Request) -> Response:
        await authorize_session(request, session_id)
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

    return app
