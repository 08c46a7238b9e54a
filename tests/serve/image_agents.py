"""A scripted session runner whose ``screenshot`` tool returns an image, for tests of
what browsers are shown.

The Flow is stored by value with the engine and unpickled in Ray workers, which
import this module by name.
"""

from __future__ import annotations

from pathlib import Path

from dex_agents_ray import DeferredToolExecution, DeferredToolOutcome, ToolExecutionResult
from dex_agents_ray.media import LocalDirectoryMediaStore
from tests.media.media_images import png
from tests.session.agents import ImageRunner

SCREENSHOT = png(3, 2, seed=11, padding=300)
"""What ``screenshot`` uploads."""


def media_store(state_dir: str | Path) -> LocalDirectoryMediaStore:
    """The store the test and the tool share: ``<state_dir>/media``."""
    return LocalDirectoryMediaStore(Path(state_dir) / "media")


class ScreenshotRunner(ImageRunner):
    """An ``ImageRunner`` (user messages may carry images) whose tools with behaviour
    ``screenshot`` upload ``SCREENSHOT`` to ``media_store(state_dir)`` and return it."""

    async def execute_deferred_tool_call(self, call: DeferredToolExecution) -> DeferredToolOutcome:
        record = call.tool_call
        if self.behaviours.get(record.tool_name) != "screenshot":
            return await super().execute_deferred_tool_call(call)
        reference = await media_store(self.state_dir).put_image(SCREENSHOT)
        return ToolExecutionResult(output="Took a screenshot.", images=[reference])
