"""Images in the browser snapshot (the spec's "Images": "The browser snapshot JSON
includes the ``images`` of messages and tool calls"): a user message's and a tool
result's references reach ``dex_agents_ray.ui_stream``'s JSON and the inspector's
snapshot route over real HTTP, as wire dicts, never bytes. Real Ray, SQLite and a
local media store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from dex_agents_ray import (
    AgentSessionClient,
    AgentSessionFlow,
    AgentSessionOptions,
    AgentSnapshot,
    AgentToolCallStatus,
    ToolEffect,
    ToolPolicy,
)
from dex_agents_ray.media import AgentImageReference, build_image_reference
from dex_agents_ray.serve import build_inspector_app
from dex_agents_ray.ui_stream import read_agent_event_stream_snapshot
from tests.media.media_images import jpeg
from tests.serve.helpers import serving
from tests.serve.image_agents import SCREENSHOT, ScreenshotRunner, media_store
from tests.session.agents import Call, Reply
from tests.session.polling import snapshot_when, turn_done

TOKEN = "test-token-images-0123456789"
OPTIONS = AgentSessionOptions(
    tool_policies={
        "screenshot": ToolPolicy(ToolEffect.READ),
        "refund": ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE, requires_approval=True),
    }
)


def _flow(state_dir: Path) -> AgentSessionFlow:
    script = {"look": [Reply(calls=[Call("s1", "screenshot"), Call("r1", "refund")]), Reply()]}
    runner = ScreenshotRunner(str(state_dir), script, {"screenshot": "screenshot"})
    return AgentSessionFlow(runner, flow_type="ImageSnapshots", options=OPTIONS)


def _shot_taken(snapshot: AgentSnapshot) -> bool:
    done = {
        r.tool_call_id for r in snapshot.tool_calls if r.status is AgentToolCallStatus.SUCCEEDED
    }
    return "s1" in done and bool(snapshot.pending_interrupts)


def _images_of(wire: dict[str, Any]) -> tuple[list[Any], dict[str, list[Any]]]:
    """The ``images`` of each message and of each tool call (by ID) in snapshot JSON."""
    messages = [m["images"] for m in wire["messages"]]
    calls = {r["tool_call_id"]: r["images"] for r in wire["tool_calls"]}
    return messages, calls


async def test_the_browser_snapshot_shows_message_and_tool_call_images(
    engine_factory: Any, state_dir: Path
) -> None:
    flow = _flow(state_dir)
    engine = await engine_factory([flow])
    client = engine.client
    sessions = AgentSessionClient(client, flow)
    store = media_store(state_dir)
    photo = await store.put_image(jpeg(padding=200, seed=2))
    await sessions.start_session("img-1", "look", images=[photo])
    # The screenshot's record is final while the refund waits: the turn is still active.
    await snapshot_when(sessions, "img-1", _shot_taken, description="the screenshot")
    shot = build_image_reference(SCREENSHOT, store.store_uri)
    assert await store.get_image(shot) == SCREENSHOT

    wire = (await read_agent_event_stream_snapshot(client, flow, "img-1")).to_json()
    snapshot = json.loads(json.dumps(wire))["snapshot"]  # plain JSON all the way
    messages, calls = _images_of(snapshot)
    assert messages == [[photo.to_dict()]]
    assert calls == {"s1": [shot.to_dict()], "r1": []}
    # The spec's wire form, which a reference reads back from.
    assert AgentImageReference.from_dict(calls["s1"][0]) == shot

    # The inspector's snapshot route serves the same JSON over HTTP.
    app = build_inspector_app(client, [flow], token=TOKEN)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with serving(app) as base, httpx.AsyncClient(base_url=base, timeout=30) as http:
        response = await http.get("/api/sessions/img-1", headers=headers)
    assert response.status_code == 200
    assert _images_of(response.json()["snapshot"]) == (messages, calls)

    # After the turn, the user message still shows its image.
    assert await sessions.resolve_interrupt("img-1", "r1", approved=False)
    await snapshot_when(sessions, "img-1", turn_done(1))
    after = (await read_agent_event_stream_snapshot(client, flow, "img-1")).to_json()
    assert [m["images"] for m in after["snapshot"]["messages"]] == [[photo.to_dict()], []]
