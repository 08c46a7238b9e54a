"""Images both ways through a Pydantic AI session with a media store: a user's
image reaches the model as ``BinaryContent``, and an image a tool returns is
stored in the media store and shown to the model with the tool's result."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent, BinaryContent, ToolReturn
from pydantic_ai import messages as pai
from pydantic_ai.models.function import AgentInfo, FunctionModel

from dex_agents_ray import AgentSessionClient, AgentSessionOptions, MessageRole, ToolEffect
from dex_agents_ray.media import LocalDirectoryMediaStore
from dex_agents_ray.pydantic_ai import PydanticAIRunner, pydantic_ai_session_flow
from tests.media.media_images import png
from tests.session.polling import snapshot_when, turn_done

SCREEN = png(3, 3, seed=9, padding=300)


def _digests(messages: list[pai.ModelMessage]) -> list[str]:
    """Short digests of every image in the request, in order."""
    found: list[str] = []
    for message in messages:
        for part in message.parts:
            content = getattr(part, "content", None)
            items = content if isinstance(content, list) else [content]
            found.extend(
                hashlib.sha256(item.data).hexdigest()[:8]
                for item in items
                if isinstance(item, BinaryContent)
            )
    return found


def _viewer(messages: list[pai.ModelMessage], info: AgentInfo) -> pai.ModelResponse:
    last = messages[-1]
    if any(isinstance(p, pai.ToolReturnPart) for p in last.parts) or len(messages) > 2:
        return pai.ModelResponse(parts=[pai.TextPart(f"saw {_digests(messages)}")])
    call = pai.ToolCallPart("screenshot", {}, tool_call_id="s1")
    return pai.ModelResponse(parts=[pai.TextPart(f"user sent {_digests(messages)}"), call])


def _agent() -> Agent[None, str]:
    agent = Agent(FunctionModel(_viewer))

    @agent.tool_plain
    def screenshot() -> ToolReturn:
        """Take a screenshot."""
        return ToolReturn(
            "took a screenshot", content=[BinaryContent(data=SCREEN, media_type="image/png")]
        )

    return agent


async def test_user_and_tool_images_reach_the_model(engine_factory: Any, tmp_path: Path) -> None:
    store = LocalDirectoryMediaStore(tmp_path / "media")
    flow = pydantic_ai_session_flow(
        _agent(),
        flow_type="PydanticImages",
        media_store=store,
        options=AgentSessionOptions(default_tool_effect=ToolEffect.READ),
    )
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    photo = png(4, 4, seed=3, padding=500)
    photo_ref = await store.put_image(photo)

    await sessions.start_session("img-1", "What is in this photo?", images=[photo_ref])
    done = await snapshot_when(sessions, "img-1", turn_done(1), timeout=120)

    short = [hashlib.sha256(data).hexdigest()[:8] for data in (photo, SCREEN)]
    assert done.messages[0].images == (photo_ref,)
    assert done.messages[1].text == f"user sent {short[:1]}"
    tool = next(m for m in done.messages if m.role is MessageRole.TOOL)
    assert tool.tool_output == "took a screenshot"
    assert done.messages[-1].text == f"saw {short}"  # the photo, then the screenshot
    stored = [path.name for path in (tmp_path / "media").rglob("*") if path.is_file()]
    assert any(hashlib.sha256(SCREEN).hexdigest() in name for name in stored), stored


def test_images_are_refused_without_a_media_store() -> None:
    runner: Any = PydanticAIRunner(_agent())
    assert not hasattr(runner, "build_user_message_with_images")
    with pytest.raises(AttributeError):
        runner.build_user_message_with_images("x", [])
