"""The inspector over real HTTP on loopback (httpx): the token gate, cross-site refusal,
the sessions list with its "waiting for a person" filter, the graph, ``authorize_session``."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from starlette.requests import Request

from dex_agents_ray.serve import CSRF_HEADER, InspectorAuth, build_inspector_app
from examples.inspector_agent import flow
from tests.serve.helpers import serving
from tests.serve.sessions import TOKEN, start_example_sessions
from tests.session.polling import snapshot_when, turn_done


async def test_every_route_needs_the_token_and_posts_refuse_cross_site(
    engine_factory: Any,
) -> None:
    engine, sessions = await start_example_sessions(engine_factory)
    app = build_inspector_app(engine.client, [flow], token=TOKEN)
    auth = InspectorAuth(TOKEN)
    async with serving(app) as base, httpx.AsyncClient(base_url=base, timeout=30) as http:
        for path in ("/", "/sessions/refund-a1", "/api/sessions", "/api/sessions/refund-a1/events"):
            response = await http.get(path)
            assert response.status_code == 401, path
        assert (await http.get("/?token=wrong-token-0123456789")).status_code == 401
        resolve = "/api/sessions/refund-a1/interrupts/call-refund/resolve"
        refused = await http.post(resolve, json={"approved": True})
        assert refused.status_code == 401

        login = await http.get("/sessions/refund-a1?token=" + TOKEN)
        assert login.status_code == 303 and login.headers["location"] == "/sessions/refund-a1"
        cookie = login.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and TOKEN not in cookie
        page = await http.get("/sessions/refund-a1")  # the client keeps the cookie
        assert page.status_code == 200
        assert f'content="{auth.csrf_token}"' in page.text
        assert "script-src 'self'" in page.headers["content-security-policy"]

        # An authenticated POST without the CSRF header, or from another origin: 403.
        assert (await http.post(resolve, json={"approved": True})).status_code == 403
        other = {CSRF_HEADER: auth.csrf_token, "Origin": "http://127.0.0.1:1"}
        assert (await http.post(resolve, json={"approved": True}, headers=other)).status_code == 403
        site = {CSRF_HEADER: auth.csrf_token, "Sec-Fetch-Site": "same-site"}
        assert (await http.post(resolve, json={"approved": True}, headers=site)).status_code == 403
        assert (await sessions.get_agent_snapshot("refund-a1")).pending_interrupts

        # A bearer token works without the cookie; the same-origin POST approves.
        bearer = httpx.AsyncClient(base_url=base, timeout=30)
        async with bearer:
            headers = {"Authorization": f"Bearer {TOKEN}", CSRF_HEADER: auth.csrf_token}
            answer = await bearer.post(resolve, json={"approved": True}, headers=headers)
            assert answer.status_code == 200 and answer.json() == {"ok": True}
    await snapshot_when(sessions, "refund-a1", turn_done(1), description="refund done")


async def test_the_sessions_list_filters_waiting_sessions_and_the_graph_shows_the_step(
    engine_factory: Any,
) -> None:
    engine, sessions = await start_example_sessions(engine_factory)
    app = build_inspector_app(engine.client, [flow], token=TOKEN)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        serving(app) as base,
        httpx.AsyncClient(base_url=base, timeout=30, headers=headers) as http,
    ):
        every = (await http.get("/api/sessions")).json()["sessions"]
        assert {row["session_id"] for row in every} == {
            "refund-a1",
            "which-order",
            "order-status",
        }
        by_id = {row["session_id"]: row for row in every}
        assert by_id["refund-a1"]["waiting_for"] == ["approval"]
        assert by_id["which-order"]["waiting_for"] == ["question"]
        assert by_id["order-status"]["waiting_for"] == []
        assert by_id["order-status"]["status"] == "waiting_for_user_message"
        assert all(row["agent"] == flow.get_flow_type() for row in every)
        assert all(row["last_activity"] >= row["started_at"] for row in every)

        waiting = (await http.get("/api/sessions?waiting=true")).json()["sessions"]
        assert sorted(row["session_id"] for row in waiting) == ["refund-a1", "which-order"]

        graph = await http.get("/api/sessions/refund-a1/graph.svg")
        assert graph.headers["content-type"].startswith("image/svg+xml")
        assert graph.headers["x-dex-active-steps"] == "AwaitToolApproval,ResumeTurn"
        assert '<g class="step active" data-step="AwaitToolApproval">' in graph.text
        assert '<g class="step" data-step="RunModel">' in graph.text
        idle = await http.get("/api/sessions/order-status/graph.svg")
        assert idle.headers["x-dex-active-steps"] == "AwaitUserMessage"

        snapshot = (await http.get("/api/sessions/refund-a1")).json()
        assert snapshot["agent"] == flow.get_flow_type() and snapshot["flow_status"] == "running"
        assert snapshot["snapshot"]["pending_interrupts"][0]["tool_name"] == "refund_order"
        assert "framework_item" not in snapshot["snapshot"]["messages"][0]
        question = (await http.get("/api/sessions/which-order")).json()["snapshot"]
        (asked,) = question["pending_interrupts"]
        assert asked["tool_name"] == "ask_user" and asked["allows_free_text"] is True
        assert asked["choices"] == [
            "A2: office chair, shipped",
            "A3: monitor arm, processing",
            "A6: headset, shipped",
            "A8: usb hub, processing",
        ]
        assert (await http.get("/api/sessions/nope")).status_code == 404
        assert (await http.get("/api/sessions/refund-a1/events?resume_token=x")).status_code == 400


async def test_authorize_session_hides_and_refuses_sessions(engine_factory: Any) -> None:
    engine, _ = await start_example_sessions(engine_factory)

    async def authorize(request: Request, session_id: str) -> bool:
        return session_id != "refund-a1"

    app = build_inspector_app(engine.client, [flow], token=TOKEN, authorize_session=authorize)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        serving(app) as base,
        httpx.AsyncClient(base_url=base, timeout=30, headers=headers) as http,
    ):
        listed = {row["session_id"] for row in (await http.get("/api/sessions")).json()["sessions"]}
        assert listed == {"which-order", "order-status"}
        assert (await http.get("/api/sessions/refund-a1")).status_code == 403
        assert (await http.get("/api/sessions/refund-a1/events")).status_code == 403
        assert (await http.get("/sessions/refund-a1")).status_code == 403
        assert (await http.get("/api/sessions/order-status")).status_code == 200


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 16"):
        build_inspector_app(object(), [flow], token="short")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least one"):
        build_inspector_app(object(), [], token=TOKEN)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_stream_events"):
        build_inspector_app(object(), [flow], token=TOKEN, max_stream_events=0)  # type: ignore[arg-type]
