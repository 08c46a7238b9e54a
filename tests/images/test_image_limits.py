"""Image limits in a whole session: references checked before sending, tool results
over ``MAX_IMAGES_PER_MESSAGE`` failing their attempts."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from dex_agents_ray import AgentSessionClient
from dex_agents_ray.media import (
    MAX_IMAGE_URI_LENGTH,
    MAX_IMAGES_PER_MESSAGE,
    ImageValidationError,
    LocalDirectoryMediaStore,
)
from dex_agents_ray.testing import InvocationLog
from tests.images.agents import SCREENSHOT, build_flow, saw
from tests.media.media_images import png
from tests.session.polling import snapshot_when, turn_done


async def test_image_limits_in_a_session(engine_factory: Any, tmp_path: Path) -> None:
    store = LocalDirectoryMediaStore(tmp_path / "media")
    flow = build_flow(store, flow_type="ImageViewerLimits")
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    image = await store.put_image(png(seed=31))
    await sessions.start_session("limits-1")

    # Bad references are refused before anything is sent.
    with pytest.raises(ImageValidationError, match="MAX_IMAGES_PER_MESSAGE"):
        await sessions.send_user_message(
            "limits-1", "Too many", images=[image] * (MAX_IMAGES_PER_MESSAGE + 1)
        )
    long_uri = image.uri + "x" * MAX_IMAGE_URI_LENGTH
    with pytest.raises(ImageValidationError):
        await sessions.send_user_message(
            "limits-1", "Long", images=[dataclasses.replace(image, uri=long_uri)]
        )
    with pytest.raises(ImageValidationError):
        await sessions.start_session(
            "limits-2", "Bad", images=[dataclasses.replace(image, sha256="0")]
        )

    # A function tool may return MAX_IMAGES_PER_MESSAGE images; the model gets each one.
    log = InvocationLog(tmp_path / "screenshots.log")
    most = MAX_IMAGES_PER_MESSAGE
    assert await sessions.send_user_message("limits-1", f"screenshots {most} {log.path}")
    first = await snapshot_when(sessions, "limits-1", turn_done(1))
    assert first.state is not None and first.state.last_turn_error is None
    result, answer = first.messages[-2:]
    assert len(result.images) == most
    assert answer.text == f"screenshots: Took {most} screenshots. | {saw([SCREENSHOT] * most)}"
    assert log.count("screenshots") == 1

    # One more fails the attempt with ImageValidationError; a read retries, then fails.
    assert await sessions.send_user_message("limits-1", f"screenshots {most + 1} {log.path}")
    second = await snapshot_when(sessions, "limits-1", turn_done(2))
    assert second.state is not None and second.state.last_turn_error is None
    result, answer = second.messages[-2:]
    assert result.images == ()
    assert result.tool_output == (
        "The tool call failed: a message or tool result carries at most "
        f"MAX_IMAGES_PER_MESSAGE ({most}) images, got {most + 1}"
    )
    # The model sees the error text, and only the first call's images, replayed.
    assert answer.text == f"screenshots: {result.tool_output} | {saw([SCREENSHOT] * most)}"
    assert log.count("screenshots") == 1 + 2
