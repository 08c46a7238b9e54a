"""``FrameworkToolSourceRouter``: tool sources for a Step-mode framework adapter.

An adapter (OpenAI Agents, Pydantic AI, LangGraph, Google ADK style) lists the
sources in each ``RunModel``, offers the listed tools to its framework as native
tools whose bodies never run, builds each call through the source that listed
it, and routes the tool Step, its options and task polls back to that source.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

from dex_agents_ray.builtin_loop._definition import built_in_name_collision
from dex_agents_ray.builtin_loop._tool_source import (
    DEFAULT_TOOL_SOURCE_LISTING_TIMEOUT,
    ListedTool,
    SourceTool,
    SourceToolListing,
    ToolSource,
    ToolSourceRouter,
    _parse_reference,
)
from dex_agents_ray.session import AgentTurnContext, DeferredToolCall, describe_tool_call_outcome

__all__ = ["SOURCE_TOOL_NOT_OFFERED_RESULT", "FrameworkToolSourceRouter"]

SOURCE_TOOL_NOT_OFFERED_RESULT = (
    "This tool is not offered now: its tool source no longer lists it, so the call did "
    "not run. Do not call it again in this turn."
)
"""The result a framework gives a new call of a replay-only tool, without a tool Step."""


class FrameworkToolSourceRouter(ToolSourceRouter):
    """The tool sources of a framework adapter, shared by the Step-mode adapters.

    Example (inside an adapter's ``run_model_step``)::

        listing = await router.list_for_turn(turn, framework_tool_names=native_names)
        for call in model_calls:
            deferred = router.build_call(turn, listing, tool_call_id=call.id,
                                         tool_name=call.name, arguments=call.arguments)
            if deferred is not None:
                calls.append(deferred)            # runs in its own tool Step
            elif listing.is_replay_only(call.name):
                answer(call, router.replay_result(turn, call.id))  # inside the framework

    Args:
        sources: The adapter's tool sources; names must be unique.
        listing_timeout: How long one source's ``list_tools`` may take.

    Raises:
        TypeError: A source lacks a ``source_name`` or a required method.
        ValueError: Two sources share a ``source_name``.
    """

    def __init__(
        self,
        sources: Iterable[ToolSource],
        *,
        listing_timeout: timedelta = DEFAULT_TOOL_SOURCE_LISTING_TIMEOUT,
    ) -> None:
        super().__init__(sources)
        if not isinstance(listing_timeout, timedelta) or listing_timeout <= timedelta(0):
            raise ValueError(
                f"listing_timeout must be a positive timedelta, got {listing_timeout!r}"
            )
        self.listing_timeout = listing_timeout

    async def list_for_turn(
        self, turn: AgentTurnContext, *, framework_tool_names: Iterable[str] = ()
    ) -> SourceToolListing:
        """List every source for one model call, with the turn's replay-only tools.

        Raises:
            ValueError: A source tool repeats a framework tool, an enabled built-in
                tool, or another source's tool.
        """
        listing = await self.list_tools(self.listing_timeout)
        framework = set(framework_tool_names)
        for _, tool in listing.tools:
            if tool.name in turn.enabled_built_in_tools:
                raise ValueError(built_in_name_collision(tool.name))
            if tool.name in framework:
                raise ValueError(
                    f"tool {tool.name} of a tool source uses the name of a framework tool"
                )
        return SourceToolListing(listing.tools, replay_only_tools=self._replay_only(turn, listing))

    def _replay_only(
        self, turn: AgentTurnContext, listing: SourceToolListing
    ) -> tuple[tuple[ToolSource, ListedTool], ...]:
        offered = {tool.name for _, tool in listing.tools}
        replay: dict[str, tuple[ToolSource, ListedTool]] = {}
        for record in turn.tool_calls.values():
            name = record.tool_name
            parsed = _parse_reference(record.tool_source_reference)
            if parsed is None or name in offered or name in replay:
                continue
            source = self._sources.get(parsed[0])
            if source is not None:
                replay[name] = (source, self._last_definition(parsed[0], source, name))
        return tuple(replay.values())

    def _last_definition(self, source_name: str, source: ToolSource, name: str) -> ListedTool:
        method = getattr(source, "cached_tools", None)
        known = method() if callable(method) else self._last_listings.get(source_name, ())
        for tool in known or ():
            if tool.name == name:
                return tool
        return SourceTool(name=name)

    def build_call(
        self,
        turn: AgentTurnContext,
        listing: SourceToolListing,
        *,
        tool_call_id: str,
        tool_name: str,
        arguments: str,
    ) -> DeferredToolCall | None:
        """The source's deferred call for a call of a live listed tool; ``None`` for
        any other name (a framework tool, or a replay-only one)."""
        offered = listing.find(tool_name)
        if offered is None:
            return None
        source, tool = offered
        return self.deferred_tool_call(
            turn, source, tool, tool_call_id=tool_call_id, arguments=arguments
        )

    @staticmethod
    def replay_result(turn: AgentTurnContext, tool_call_id: str) -> str:
        """What a framework answers a replay-only tool's call with: the recorded call's
        outcome when the turn has it, else ``SOURCE_TOOL_NOT_OFFERED_RESULT``."""
        record = turn.recorded_tool_call(tool_call_id)
        if record is None or not record.is_final:
            return SOURCE_TOOL_NOT_OFFERED_RESULT
        return describe_tool_call_outcome(record)
