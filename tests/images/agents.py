"""Built-in loop agents that look at images, for whole sessions on the engine.

The Flow is stored by value with the engine and unpickled in Ray workers,
which import this module by name. The scripted model checks the bytes of
every image in its request against the reference (SHA-256 and size) and
answers with what it saw, so a test reads from the stored answer which
images reached the model.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta

from dex import RetryPolicy

from dex_agents_ray import AgentSessionFlow, ToolEffect
from dex_agents_ray.builtin_loop import (
    AgentDefinition,
    BuiltinLoopAgentRunner,
    FunctionToolResult,
    JsonValue,
    ModelRequest,
    ScriptedModelClient,
    ScriptedModelReply,
    ScriptedToolCall,
    SourceTool,
    ToolCallContext,
    builtin_agent_session_options,
    function_tool,
)
from dex_agents_ray.media import MediaStore, build_image_reference
from dex_agents_ray.session import (
    AgentTurnContext,
    DeferredToolCall,
    DeferredToolExecution,
    RunModelLimit,
    ToolCallStepOptions,
    ToolExecutionError,
    ToolExecutionResult,
    ToolTaskPoll,
    ToolTaskPollOutcome,
)
from dex_agents_ray.testing import InvocationLog
from tests.media.media_images import gif, png

SCREENSHOT = png(3, 2, seed=7, padding=1_000)
"""What ``take_screenshot`` uploads."""
CAPTURE = gif(seed=5)
"""What the ``screen`` tool source uploads."""
RUN_MODEL_LIMIT = RunModelLimit(maximum_attempts=2, retry_budget=timedelta(minutes=2))
"""A failing ``RunModel`` retries once, so a failed turn ends within seconds."""


def saw(images: Sequence[bytes]) -> str:
    """The model's answer for a request that held ``images``, in order."""
    if not images:
        return "saw nothing"
    return "saw " + ",".join(f"{hashlib.sha256(data).hexdigest()}:{len(data)}" for data in images)


def _checked_images(request: ModelRequest) -> list[bytes]:
    """The bytes of each image in the request; fails the call when one does not match."""
    images = []
    for reference in request.images():
        data = request.image_bytes.get(reference.sha256)
        if data is None:
            raise AssertionError(f"the request has no bytes for image {reference.sha256}")
        if hashlib.sha256(data).hexdigest() != reference.sha256:
            raise AssertionError(f"the bytes of image {reference.sha256} have another SHA-256")
        if len(data) != reference.size_bytes:
            raise AssertionError(f"image {reference.sha256} has {len(data)} bytes")
        images.append(data)
    return images


def reply(request: ModelRequest) -> ScriptedModelReply:
    """Call the tool the user names; otherwise answer with the images the request held."""
    seen = saw(_checked_images(request))
    results = ScriptedModelClient.tool_results(request)
    if results:
        last = results[-1]
        return ScriptedModelReply(text=f"{last.tool_name}: {last.output} | {seen}")
    command, _, argument = ScriptedModelClient.user_texts(request)[-1].partition(" ")
    if command in ("take_screenshot", "capture_screen"):
        return ScriptedModelReply(tool_calls=[ScriptedToolCall(tool_name=command)])
    if command == "stale_screenshot":
        arguments: dict[str, JsonValue] = {"log_path": argument}
        return ScriptedModelReply(
            tool_calls=[ScriptedToolCall(tool_name=command, arguments=arguments)]
        )
    if command == "screenshots":
        count, _, log_path = argument.partition(" ")
        arguments = {"count": int(count), "log_path": log_path}
        return ScriptedModelReply(
            tool_calls=[ScriptedToolCall(tool_name=command, arguments=arguments)]
        )
    return ScriptedModelReply(text=seen)


@function_tool(effect=ToolEffect.READ)
async def take_screenshot(context: ToolCallContext) -> str | FunctionToolResult:
    """Take a screenshot of the screen."""
    if context.media_store is None:
        return "Screenshots need a media store."
    reference = await context.media_store.put_image(SCREENSHOT)
    return FunctionToolResult(output="Took a screenshot.", images=[reference])


@function_tool(effect=ToolEffect.READ)
def stale_screenshot(log_path: str) -> FunctionToolResult:
    """Return a screenshot uploaded elsewhere, whatever the runner's store; logs each run."""
    InvocationLog(log_path).record("stale_screenshot")
    reference = build_image_reference(SCREENSHOT, "file:///elsewhere/media")
    return FunctionToolResult(output="Found an old screenshot.", images=[reference])


@function_tool(
    effect=ToolEffect.READ,
    # Two quick attempts, so a failing call records its failure within seconds.
    step_options=ToolCallStepOptions(
        retry_policy=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=2)
    ),
)
async def screenshots(count: int, log_path: str, context: ToolCallContext) -> FunctionToolResult:
    """Take ``count`` screenshots of an unchanging screen; logs each run."""
    InvocationLog(log_path).record("screenshots")
    if context.media_store is None:
        raise ToolExecutionError("screenshots need a media store")
    reference = await context.media_store.put_image(SCREENSHOT)
    return FunctionToolResult(output=f"Took {count} screenshots.", images=[reference] * count)


class ScreenSource:
    """A tool source whose one tool uploads a capture to its own store (as MCP's does)."""

    source_name = "screen"

    def __init__(self, store: MediaStore) -> None:
        self.store = store

    async def list_tools(self) -> list[SourceTool]:
        return [SourceTool(name="capture_screen", description="Capture the screen.")]

    def deferred_tool_call(
        self,
        turn: AgentTurnContext,
        *,
        tool_call_id: str,
        tool_name: str,
        arguments: str,
        listed_tool: object = None,
    ) -> DeferredToolCall:
        return DeferredToolCall(
            tool_call_id=tool_call_id,
            tool_name=tool_name,
            arguments=arguments,
            policy=turn.resolve_tool_policy(tool_name, ToolEffect.READ),
            tool_source_reference=json.dumps({"tool": tool_name}),
        )

    async def execute_deferred_tool_call(self, call: DeferredToolExecution) -> ToolExecutionResult:
        reference = await self.store.put_image(CAPTURE)
        return ToolExecutionResult(output="Captured the screen.", images=[reference])

    async def poll_tool_task(self, poll: ToolTaskPoll) -> ToolTaskPollOutcome:
        raise ToolExecutionError("the screen source starts no tasks")


def build_flow(
    media_store: MediaStore | None,
    *,
    source_store: MediaStore | None = None,
    flow_type: str = "ImageViewer",
) -> AgentSessionFlow:
    """A viewer agent whose runner reads ``media_store``; its tool source uploads to
    ``source_store`` (default: ``media_store``; no source when both are ``None``)."""
    source_store = source_store or media_store
    viewer = AgentDefinition(
        name="viewer",
        instructions="Describe the images you are shown.",
        model=ScriptedModelClient(reply),
        tools=[take_screenshot, stale_screenshot, screenshots],
        tool_sources=[ScreenSource(source_store)] if source_store is not None else [],
    )
    options = replace(builtin_agent_session_options(viewer), run_model_limit=RUN_MODEL_LIMIT)
    runner = BuiltinLoopAgentRunner(viewer, media_store=media_store)
    return AgentSessionFlow(runner, flow_type=flow_type, options=options)
