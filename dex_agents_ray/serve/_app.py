"""The inspector's FastAPI app: the session pages, their JSON API, the event stream and
the graph, and (with ``evals_dir``) the eval pages of :mod:`dex_agents_ray.serve._evals`."""

from __future__ import annotations

import inspect
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from dex.runtime_errors import FlowNotFoundError
from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, Field

from dex_agents_ray.engine import EngineClient
from dex_agents_ray.serve._auth import InspectorAuth, InspectorAuthMiddleware
from dex_agents_ray.serve._evals import EvalRuns, add_eval_routes
from dex_agents_ray.session import AgentSessionClient, AgentSessionFlow
from dex_agents_ray.session_graph import session_flow_graph_svg
from dex_agents_ray.session_listing import active_step_types, list_sessions
from dex_agents_ray.ui_stream import (
    AGENT_EVENT_STREAM_HEADERS,
    InvalidAgentEventResumeTokenError,
    read_agent_event_stream_snapshot,
    stream_agent_event_frames,
)

AuthorizeSession = Callable[[Request, str], Awaitable[bool | None] | bool | None]
"""``authorize_session(request, session_id)``: may the caller see and operate the
session? Return ``False`` (403), raise an ``HTTPException``, or return ``True`` or
``None`` to allow. Called before every route that names a session, and for each
session of the sessions page (a refused one is left out)."""

_RECONNECT_MS = 500
_STATIC = resources.files("dex_agents_ray.serve").joinpath("static")
_EVALS_LINK = '<a href="/evals" class="nav" id="evals-link">Evaluations</a>'


class ResolveBody(BaseModel):
    approved: bool
    message: str | None = Field(default=None, max_length=10_000)


class AnswerBody(BaseModel):
    answer: str = Field(max_length=10_000)


class TextBody(BaseModel):
    text: str = Field(max_length=100_000)


class CancelBody(BaseModel):
    turn_id: str


class ExecutePlanBody(BaseModel):
    revision: int


class _Sessions:
    """Finds the session Flow of a session ID and checks the caller may use it."""

    def __init__(
        self,
        client: EngineClient,
        flows: Sequence[AgentSessionFlow],
        authorize: AuthorizeSession | None,
    ) -> None:
        self.client = client
        self.flows = {flow.get_flow_type(): flow for flow in flows}
        self.authorize = authorize

    async def allowed(self, request: Request, session_id: str) -> bool:
        if self.authorize is None:
            return True
        verdict = self.authorize(request, session_id)
        if inspect.isawaitable(verdict):
            verdict = await verdict
        return verdict is not False

    async def flow_of(self, request: Request, session_id: str) -> tuple[AgentSessionFlow, Any]:
        if not await self.allowed(request, session_id):
            raise HTTPException(403, f"not allowed to see session {session_id!r}")
        try:
            info = await self.client.describe_flow(session_id)
        except FlowNotFoundError:
            raise HTTPException(404, f"no session {session_id!r}") from None
        flow = self.flows.get(info.flow_type)
        if flow is None:
            raise HTTPException(
                404, f"session {session_id!r} is a {info.flow_type!r}, not served here"
            )
        return flow, info

    async def served(self, request: Request, session_id: str) -> bool:
        """Whether the session exists and its Flow is served (403 when the caller may
        not see it)."""
        try:
            await self.flow_of(request, session_id)
        except HTTPException as error:
            if error.status_code == 404:
                return False
            raise
        return True

    async def operator(self, request: Request, session_id: str) -> AgentSessionClient:
        flow, _ = await self.flow_of(request, session_id)
        return AgentSessionClient(self.client, flow)


def _page(name: str, auth: InspectorAuth, *, evals: bool) -> HTMLResponse:
    html = _STATIC.joinpath(name).read_text(encoding="utf-8")
    html = html.replace("{{evals_link}}", _EVALS_LINK if evals else "")
    return HTMLResponse(html.replace("{{csrf_token}}", auth.csrf_token))


def build_inspector_app(
    client: EngineClient,
    flows: Sequence[AgentSessionFlow],
    *,
    token: str,
    authorize_session: AuthorizeSession | None = None,
    max_stream_events: int | None = None,
    evals_dir: str | os.PathLike[str] | None = None,
    evals_namespace: str | None = None,
) -> FastAPI:
    """The session inspector as an ASGI app (serve it with uvicorn).

    Args:
        client: The engine client (``FlowEngine.client``).
        flows: The session Flows whose sessions it shows.
        token: What every request must present (see :mod:`dex_agents_ray.serve`);
            at least 16 characters (``generate_token()`` makes one).
        authorize_session: The application's check per session (:data:`AuthorizeSession`).
        max_stream_events: End each event response after this many events (the
            browser reconnects with ``Last-Event-ID``); ``None``: never.
        evals_dir: The folder of eval run directories (``run_eval(out=...)``'s, each
            a child, such as ``evals/<run_id>``) the eval pages show (``/evals``);
            ``None``: no eval pages.
        evals_namespace: The Ray namespace of the runs' drivers (``run_eval``'s
            ``namespace``), where their pause / resume / cancel and status live;
            ``None``: the current one.

    Raises:
        ValueError: No flows, a short token, or a ``max_stream_events`` below 1.
    """
    if not flows:
        raise ValueError("build_inspector_app needs at least one session Flow")
    if max_stream_events is not None and max_stream_events < 1:
        raise ValueError(f"max_stream_events must be at least 1, got {max_stream_events}")
    auth = InspectorAuth(token)
    sessions = _Sessions(client, flows, authorize_session)
    app = FastAPI(title="dex-agents-ray inspector", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(InspectorAuthMiddleware, auth=auth)
    app.mount("/static", StaticFiles(directory=str(_STATIC)), name="static")

    evals = evals_dir is not None

    def page(name: str) -> HTMLResponse:
        return _page(name, auth, evals=evals)

    _add_read_routes(app, sessions, page, max_stream_events)
    _add_action_routes(app, sessions)
    if evals_dir is not None:
        runs = EvalRuns(Path(evals_dir), evals_namespace)
        add_eval_routes(app, runs, page, sessions.served, max_stream_events)

    @app.exception_handler(ValueError)
    async def bad_value(request: Request, error: ValueError) -> JSONResponse:
        return JSONResponse({"detail": str(error)}, status_code=400)

    return app


def _add_read_routes(
    app: FastAPI,
    sessions: _Sessions,
    page: Callable[[str], HTMLResponse],
    max_stream_events: int | None,
) -> None:
    client = sessions.client
    flows = list(sessions.flows.values())

    @app.get("/", response_class=HTMLResponse)
    async def sessions_page() -> HTMLResponse:
        return page("sessions.html")

    @app.get("/sessions/{session_id}", response_class=HTMLResponse)
    async def session_page(session_id: str, request: Request) -> HTMLResponse:
        await sessions.flow_of(request, session_id)
        return page("session.html")

    @app.get("/api/sessions")
    async def sessions_list(
        request: Request,
        waiting: bool = False,
        limit: int = Query(default=100, ge=1, le=1000),
    ) -> dict[str, Any]:
        async def allowed(session_id: str) -> bool:
            return await sessions.allowed(request, session_id)

        rows = await list_sessions(
            client, flows, waiting_only=waiting, limit=limit, allowed=allowed
        )
        return {"sessions": [row.to_json() for row in rows], "agents": sorted(sessions.flows)}

    @app.get("/api/sessions/{session_id}")
    async def session_snapshot(session_id: str, request: Request) -> dict[str, Any]:
        flow, info = await sessions.flow_of(request, session_id)
        value = await read_agent_event_stream_snapshot(client, flow, session_id)
        data = value.to_json()
        data["agent"] = info.flow_type
        data["flow_status"] = str(info.status.value)
        return data

    @app.get("/api/sessions/{session_id}/events")
    async def session_events(session_id: str, request: Request) -> Response:
        flow, _ = await sessions.flow_of(request, session_id)
        resume_token = request.headers.get("last-event-id") or request.query_params.get(
            "resume_token", ""
        )
        try:
            frames = await stream_agent_event_frames(
                client, flow, session_id, resume_token=resume_token
            )
        except InvalidAgentEventResumeTokenError:
            return Response("invalid resume token: load the snapshot again\n", status_code=400)
        return StreamingResponse(
            _bounded(frames, max_stream_events), headers=dict(AGENT_EVENT_STREAM_HEADERS)
        )

    @app.get("/api/sessions/{session_id}/graph.svg")
    async def session_graph(session_id: str, request: Request) -> Response:
        flow, _ = await sessions.flow_of(request, session_id)
        steps = active_step_types(await client.read_step_history(session_id))
        return Response(
            session_flow_graph_svg(flow.get_flow_type(), steps),
            media_type="image/svg+xml",
            headers={
                "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'",
                "X-Dex-Active-Steps": ",".join(steps),
            },
        )


def _add_action_routes(app: FastAPI, sessions: _Sessions) -> None:
    @app.post("/api/sessions/{session_id}/interrupts/{interrupt_id}/resolve")
    async def resolve(
        session_id: str, interrupt_id: str, body: ResolveBody, request: Request
    ) -> dict[str, bool]:
        operator = await sessions.operator(request, session_id)
        ok = await operator.resolve_interrupt(
            session_id,
            interrupt_id,
            approved=body.approved,
            rejection_message=None if body.approved else (body.message or None),
        )
        return {"ok": ok}

    @app.post("/api/sessions/{session_id}/interrupts/{interrupt_id}/answer")
    async def answer(
        session_id: str, interrupt_id: str, body: AnswerBody, request: Request
    ) -> dict[str, bool]:
        operator = await sessions.operator(request, session_id)
        return {"ok": await operator.answer_question(session_id, interrupt_id, body.answer)}

    @app.post("/api/sessions/{session_id}/messages")
    async def send(session_id: str, body: TextBody, request: Request) -> dict[str, bool]:
        operator = await sessions.operator(request, session_id)
        return {"ok": await _checked(operator.send_user_message(session_id, body.text))}

    @app.post("/api/sessions/{session_id}/steer")
    async def steer(session_id: str, body: TextBody, request: Request) -> dict[str, bool]:
        operator = await sessions.operator(request, session_id)
        return {"ok": await _checked(operator.steer_user_message(session_id, text=body.text))}

    @app.post("/api/sessions/{session_id}/cancel")
    async def cancel(session_id: str, body: CancelBody, request: Request) -> dict[str, bool]:
        operator = await sessions.operator(request, session_id)
        return {"ok": await operator.cancel_turn(session_id, body.turn_id)}

    @app.post("/api/sessions/{session_id}/plan/execute")
    async def execute_plan(
        session_id: str, body: ExecutePlanBody, request: Request
    ) -> dict[str, bool]:
        operator = await sessions.operator(request, session_id)
        return {"ok": await operator.execute_plan(session_id, body.revision)}


async def _checked(call: Awaitable[bool]) -> bool:
    try:
        return await call
    except (ValueError, TypeError) as error:
        raise HTTPException(400, str(error)) from error


async def _bounded(frames: AsyncIterator[str], limit: int | None) -> AsyncIterator[str]:
    """The frames after a ``retry`` hint, ending after ``limit`` events."""
    yield f"retry: {_RECONNECT_MS}\n\n"
    sent = 0
    try:
        async for frame in frames:
            yield frame
            if not frame.startswith(":"):
                sent += 1
                if limit is not None and sent >= limit:
                    return
    finally:
        close = getattr(frames, "aclose", None)
        if close is not None:
            await close()
