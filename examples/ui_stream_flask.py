"""A Flask app that serves one agent session to a browser over a synchronous engine
client (``engine.sync_client()``). Each open stream holds a worker thread, so serve
it from a threaded server.

    app = build_app(engine.sync_client(), flow, authorize)
    app.run(threaded=True)   # GET /sessions/<id>/snapshot, GET /sessions/<id>/events
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Flask, Request, Response, request

from dex_agents_ray import AgentSessionFlow
from dex_agents_ray.ui_stream import (
    AGENT_EVENT_STREAM_HEADERS,
    InvalidAgentEventResumeTokenError,
    read_agent_event_stream_snapshot_sync,
    stream_agent_event_frames_sync,
)


def build_app(
    sync_client: Any, flow: AgentSessionFlow, authorize: Callable[[Request, str], None]
) -> Flask:
    app = Flask(__name__)

    @app.get("/sessions/<session_id>/snapshot")
    def get_session_snapshot(session_id: str) -> Any:
        authorize(request, session_id)
        return read_agent_event_stream_snapshot_sync(sync_client, flow, session_id).to_json()

    @app.get("/sessions/<session_id>/events")
    def get_session_events(session_id: str) -> Response:
        authorize(request, session_id)
        resume_token = request.headers.get("Last-Event-ID") or request.args.get("resume_token", "")
        try:
            frames = stream_agent_event_frames_sync(
                sync_client, flow, session_id, resume_token=resume_token
            )
        except InvalidAgentEventResumeTokenError:
            return Response(status=400)
        return Response(frames, headers=dict(AGENT_EVENT_STREAM_HEADERS))

    return app
