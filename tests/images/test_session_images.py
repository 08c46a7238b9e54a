"""Images through whole built-in loop sessions on the engine, with each media store.

The scripted model (tests/images/agents.py) checks every image's bytes
against its reference and answers with what it saw, so each answer shows
which images reached ``ModelRequest.image_bytes``.
"""

from __future__ import annotations

import json
from typing import Any

from dex_agents_ray import AgentSessionClient, AgentSnapshot, MessageRole
from dex_agents_ray.media import AgentImageReference, build_image_reference
from tests.images.agents import CAPTURE, SCREENSHOT, build_flow, saw
from tests.images.conftest import StoreCase
from tests.media.media_images import jpeg, png
from tests.session.polling import snapshot_when, turn_done


def _stored_images(framework_item: str) -> list[AgentImageReference]:
    value = json.loads(framework_item)
    return [AgentImageReference.from_dict(image) for image in value.get("images", ())]


def _turn(snapshot: AgentSnapshot, turn: int) -> list[Any]:
    return [m for m in snapshot.messages if m.turn_id == f"turn-{turn}"]


async def _finished(sessions: AgentSessionClient, session_id: str, turns: int) -> AgentSnapshot:
    snapshot = await snapshot_when(sessions, session_id, turn_done(turns))
    assert snapshot.state is not None
    return snapshot


async def test_user_and_tool_images_reach_the_model(
    engine_factory: Any, store_case: StoreCase
) -> None:
    store = store_case.store
    flow = build_flow(store, flow_type=f"ImageViewer-{store_case.kind}")
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    photo = png(4, 4, seed=3, padding=2_000)
    photo_ref = await store.put_image(photo)

    await sessions.start_session("view-1", "What is in this photo?", images=[photo_ref])
    first = await _finished(sessions, "view-1", 1)
    assert first.state is not None and first.state.last_turn_error is None
    user, answer = _turn(first, 1)
    assert user.images == (photo_ref,)
    assert _stored_images(user.framework_item) == [photo_ref]
    assert answer.text == saw([photo])

    # A second user message with an image, then a function tool's screenshot.
    chart = jpeg(padding=500, seed=4)
    chart_ref = await store.put_image(chart)
    assert await sessions.send_user_message("view-1", "And this one?", images=[chart_ref])
    second = await _finished(sessions, "view-1", 2)
    assert [m.text for m in _turn(second, 2)] == ["And this one?", saw([photo, chart])]

    assert await sessions.send_user_message("view-1", "take_screenshot")
    third = await _finished(sessions, "view-1", 3)
    assert third.state is not None and third.state.last_turn_error is None
    shot_ref = build_image_reference(SCREENSHOT, store.store_uri)
    user, call, result, answer = _turn(third, 3)
    assert (call.role, call.tool_name) == (MessageRole.ASSISTANT, "take_screenshot")
    assert (result.role, result.tool_output, result.images) == (
        MessageRole.TOOL,
        "Took a screenshot.",
        (shot_ref,),
    )
    assert _stored_images(result.framework_item) == [shot_ref]
    assert answer.text == f"take_screenshot: Took a screenshot. | {saw([photo, chart, SCREENSHOT])}"
    assert await store.get_image(shot_ref) == SCREENSHOT

    # A tool source's ToolExecutionResult.images, uploaded inside its tool Step.
    assert await sessions.send_user_message("view-1", "capture_screen")
    fourth = await _finished(sessions, "view-1", 4)
    capture_ref = build_image_reference(CAPTURE, store.store_uri)
    result, answer = _turn(fourth, 4)[2:]
    assert (result.tool_name, result.images) == ("capture_screen", (capture_ref,))
    everything = [photo, chart, SCREENSHOT, CAPTURE]
    assert answer.text == f"capture_screen: Captured the screen. | {saw(everything)}"
    # Session state holds references only, never bytes.
    assert all(len(m.framework_item) < 2_000 for m in fourth.messages)


async def test_a_missing_image_fails_the_turn_with_media_store_error(
    engine_factory: Any, store_case: StoreCase
) -> None:
    store = store_case.store
    flow = build_flow(store, flow_type=f"ImageViewerMissing-{store_case.kind}")
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    # A well-formed reference into the store whose object was never written.
    ghost = build_image_reference(png(seed=99), store.store_uri)

    await sessions.start_session("ghost-1", "Look at this", images=[ghost])
    failed = await _finished(sessions, "ghost-1", 1)
    assert failed.state is not None
    error = failed.state.last_turn_error
    assert error is not None and error.startswith("MediaStoreError: "), error
    # After its user message, nothing else is stored; the model was never called.
    assert [(m.role, m.text, m.images) for m in failed.messages] == [
        (MessageRole.USER, "Look at this", (ghost,))
    ]
    assert failed.usage.model_calls == 0

    # A later turn replays the image and fails the same way.
    assert await sessions.send_user_message("ghost-1", "Hello again")
    again = await _finished(sessions, "ghost-1", 2)
    assert again.state is not None
    error = again.state.last_turn_error
    assert error is not None and error.startswith("MediaStoreError: "), error
    assert [m.text for m in again.messages] == ["Look at this", "Hello again"]
