"""A Quart app that serves one agent session to a browser, as in the spec's Quart
example. The response timeout is off, because the event stream stays open.

    app = build_app(engine.client, flow, authorize_session)
    # hypercorn: GET /sessions/<id>/snapshot, GET /sessions/<id>/events
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from quart import Quart, Request, make_response, request

from dex_agents_ray import AgentSessionFlow
from dex_agents_ray.ui_stream import (
    AGENT_EVENT_STREAM_HEADERS,
    InvalidAgentEventResumeTokenError,
    read_agent_event_stream_snapshot,
    stream_agent_event_frames,
)

AuthorizeSession = Callable[[Request, str], Awaitable[None]]


def build_app(client: Any, flow: AgentSessionFlow, authorize_session: AuthorizeSession) -> Quart:
    app = Quart(__name__)

    @app.get("/sessions/<session_id>/snapshot")
    async def get_session_snapshot(session_id: str) -> Any:
        await authorize_session(request, session_id)
        return (await read_agent_event_stream_snapshot(client, flow, session_id)).to_json()

    @app.get("/sessions/<session_id>/events")
    async def get_session_events(session_id: str) -> Any:
        await authorize_session(request, session_id)
        resume_token = request.headers.get("Last-Event-ID") or request.args.get("resume_token", "")
        try:
            frames = await stream_agent_event_frames(
                client, flow, session_id, resume_token=resume_token
            )
        except InvalidAgentEventResumeTokenError:
            return "", 400
        response = await make_response(frames, dict(AGENT_EVENT_STREAM_HEADERS))
        response.timeout = None
        return response

    return app
