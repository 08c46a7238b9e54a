"""A built-in loop session whose runner has no media store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dex_agents_ray import AgentSessionClient, MessageRole
from dex_agents_ray.media import LocalDirectoryMediaStore, build_image_reference
from dex_agents_ray.testing import InvocationLog
from tests.images.agents import CAPTURE, build_flow, saw
from tests.media.media_images import png
from tests.session.polling import snapshot_when, turn_done


async def test_without_a_store_images_are_refused_and_the_model_sees_text_only(
    engine_factory: Any, tmp_path: Path
) -> None:
    source_store = LocalDirectoryMediaStore(tmp_path / "source-media")
    flow = build_flow(None, source_store=source_store, flow_type="TextOnlyViewer")
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    image = await source_store.put_image(png(seed=21))

    with pytest.raises(ValueError, match="ImageUserMessageBuilder"):
        await sessions.start_session("text-1", "Look", images=[image])
    await sessions.start_session("text-1", "capture_screen")
    first = await snapshot_when(sessions, "text-1", turn_done(1))
    assert first.state is not None and first.state.last_turn_error is None
    assert not await sessions.send_user_message("text-1", "Look", images=[image])

    # A tool source's references are stored for display; the model sees only the text.
    user, call, result, answer = first.messages
    assert (result.role, result.images) == (
        MessageRole.TOOL,
        (build_image_reference(CAPTURE, source_store.store_uri),),
    )
    assert answer.text == f"capture_screen: Captured the screen. | {saw([])}"

    # A function tool's images fail the call once, without a retry; the model sees why.
    log = InvocationLog(tmp_path / "stale.log")
    assert await sessions.send_user_message("text-1", f"stale_screenshot {log.path}")
    second = await snapshot_when(sessions, "text-1", turn_done(2))
    assert second.state is not None and second.state.last_turn_error is None
    result, answer = second.messages[-2:]
    assert result.images == ()
    assert result.tool_output is not None
    assert result.tool_output.startswith("The tool call failed: ")
    assert "no media store" in result.tool_output
    assert answer.text == f"stale_screenshot: {result.tool_output} | {saw([])}"
    assert log.count("stale_screenshot") == 1
