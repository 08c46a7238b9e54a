"""Tool sources: tools listed at run time, such as an MCP server's, and their router.

A call of a listed tool becomes the source's own ``DeferredToolCall``, so the
source's policy, effect and ``tool_source_reference`` apply. The router
stores that reference wrapped as
``{"stepwise_tool_source": <source_name>, "reference": <the source's reference>}``,
so the tool Step and ``PollToolTask`` reach the source that built the call,
with its own reference, on any worker, without a listing, and whatever the
order of ``tool_sources``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol, runtime_checkable

from dex_agents_ray.builtin_loop._model import ModelToolDefinition
from dex_agents_ray.session import (
    AgentToolCall,
    AgentTurnContext,
    DeferredToolCall,
    DeferredToolExecution,
    DeferredToolOutcome,
    ToolCallStepOptions,
    ToolTaskCancellation,
    ToolTaskPoll,
    ToolTaskPollOutcome,
)

__all__ = [
    "DEFAULT_TOOL_SOURCE_LISTING_TIMEOUT",
    "ListedTool",
    "SourceTool",
    "SourceToolListing",
    "ToolSource",
    "ToolSourceRouter",
]

_LOG = logging.getLogger("dex_agents_ray.builtin_loop")

DEFAULT_TOOL_SOURCE_LISTING_TIMEOUT = timedelta(seconds=10)
"""How long ``RunModel`` waits for one source's ``list_tools`` (``tool_source_listing_timeout``)."""

_REFERENCE_KEY = "stepwise_tool_source"


@runtime_checkable
class ListedTool(Protocol):
    """One tool a source lists: what the model is offered."""

    @property
    def name(self) -> str:
        """The tool name the model calls."""
        ...

    @property
    def description(self) -> str:
        """What the tool does, for the model."""
        ...

    @property
    def input_schema(self) -> Mapping[str, Any]:
        """The JSON Schema of the arguments object."""
        ...


@dataclass(frozen=True, kw_only=True)
class SourceTool:
    """A plain :class:`ListedTool`, for sources that need no type of their own."""

    name: str
    """The tool name the model calls."""
    description: str = ""
    """What the tool does, for the model."""
    input_schema: Mapping[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )
    """The JSON Schema of the arguments object."""


@runtime_checkable
class ToolSource(Protocol):
    """Tools that are listed at run time, such as an MCP server's tools.

    The runner awaits ``list_tools`` in every ``RunModel`` of a chat or
    executing turn, turns a call of a listed tool into the source's
    ``deferred_tool_call``, and hands the call's tool Step to
    ``execute_deferred_tool_call`` and its task polls to ``poll_tool_task``.
    Those two may run on another worker than the listing, concurrently with
    themselves, and again after a crash; resolve the tool from the call's
    ``tool_source_reference`` rather than from a listing.

    ``source_name`` must be unique within an agent and stable across deploys:
    stored calls find their source by it.

    Optional methods: ``declared_tool_names()`` (names the source always
    lists, checked when ``AgentDefinition`` is built), ``cached_tools()`` (its
    last listing without I/O, for token estimates), ``tool_call_step_options``
    and ``cancel_tool_task`` (as the runner contract's protocols).

    Example::

        class ClockSource:
            source_name = "clock"

            async def list_tools(self) -> Sequence[ListedTool]:
                return [SourceTool(name="now", description="The current UTC time.")]

            def deferred_tool_call(self, turn, *, tool_call_id, tool_name, arguments,
                                   listed_tool=None) -> DeferredToolCall:
                policy = turn.resolve_tool_policy(tool_name, ToolEffect.READ)
                return DeferredToolCall(tool_call_id=tool_call_id, tool_name=tool_name,
                                        arguments=arguments, policy=policy,
                                        tool_source_reference=tool_name)

            async def execute_deferred_tool_call(self, call):
                return ToolExecutionResult(output=datetime.now(UTC).isoformat())

            async def poll_tool_task(self, poll):
                raise ToolExecutionError("the clock starts no tasks")
    """

    @property
    def source_name(self) -> str:
        """The source's unique, stable name."""
        ...

    async def list_tools(self) -> Sequence[ListedTool]:
        """The tools to offer now."""
        ...

    def deferred_tool_call(
        self,
        turn: AgentTurnContext,
        *,
        tool_call_id: str,
        tool_name: str,
        arguments: str,
        listed_tool: ListedTool | None = None,
    ) -> DeferredToolCall:
        """The deferred call for a call of one of this source's tools.

        ``listed_tool`` is the definition the runner offered in this model
        call, so a listing refreshed meanwhile cannot change it.
        """
        ...

    async def execute_deferred_tool_call(self, call: DeferredToolExecution) -> DeferredToolOutcome:
        """Run one call once, in its tool Step."""
        ...

    async def poll_tool_task(self, poll: ToolTaskPoll) -> ToolTaskPollOutcome:
        """Poll a task that one of this source's calls started."""
        ...


@dataclass(frozen=True)
class SourceToolListing:
    """What the sources offered in one model call."""

    tools: tuple[tuple[ToolSource, ListedTool], ...] = ()
    """Each offered tool with its source, in offer order."""
    replay_only_tools: tuple[tuple[ToolSource, ListedTool], ...] = ()
    """Source tools the turn already called that the live listing lacks (from
    ``FrameworkToolSourceRouter``): a framework may replay their recorded calls, and
    answers a new call with ``SOURCE_TOOL_NOT_OFFERED_RESULT``; empty for none."""

    def find(self, name: str) -> tuple[ToolSource, ListedTool] | None:
        """The source and definition of the offered tool ``name``, or ``None``."""
        for source, tool in self.tools:
            if tool.name == name:
                return source, tool
        return None

    def is_replay_only(self, name: str) -> bool:
        """Whether ``name`` is a replay-only tool of this listing."""
        return any(tool.name == name for _, tool in self.replay_only_tools)

    def definitions(self) -> list[ModelToolDefinition]:
        """The offered tools as model tool definitions."""
        return [_definition(tool) for _, tool in self.tools]


def _definition(tool: ListedTool) -> ModelToolDefinition:
    return ModelToolDefinition(
        name=tool.name, description=tool.description or "", parameters_schema=tool.input_schema
    )


def _check_source(source: object) -> str:
    name = getattr(source, "source_name", None)
    if not isinstance(name, str) or not name:
        raise TypeError(f"tool source {source!r} needs a non-empty str source_name")
    for method in (
        "list_tools",
        "deferred_tool_call",
        "execute_deferred_tool_call",
        "poll_tool_task",
    ):
        if not callable(getattr(source, method, None)):
            raise TypeError(f"tool source {name} has no {method} method")
    return name


class ToolSourceRouter:
    """Lists an agent's tool sources and routes calls back to the source that built them.

    Keeps the last listing of each source (for token estimates when the
    source has no ``cached_tools``); otherwise stateless.

    Raises:
        TypeError: A source lacks a ``source_name`` or a required method.
        ValueError: Two sources share a ``source_name``.
    """

    def __init__(self, sources: Iterable[ToolSource]) -> None:
        self._sources: dict[str, ToolSource] = {}
        for source in sources:
            name = _check_source(source)
            if name in self._sources:
                raise ValueError(f"two tool sources are named {name}")
            self._sources[name] = source
        self._last_listings: dict[str, tuple[ListedTool, ...]] = {}

    @property
    def sources(self) -> tuple[ToolSource, ...]:
        """The sources, in the order given."""
        return tuple(self._sources.values())

    def declared_tool_names(self) -> list[tuple[str, str]]:
        """``(source_name, tool_name)`` for every name a source always lists.

        Raises:
            ValueError: Two sources declare the same tool name.
        """
        seen: dict[str, str] = {}
        declared: list[tuple[str, str]] = []
        for source_name, source in self._sources.items():
            method = getattr(source, "declared_tool_names", None)
            if not callable(method):
                continue
            for tool_name in method():
                if tool_name in seen:
                    raise ValueError(f"two tool sources list a tool named {tool_name}")
                seen[tool_name] = source_name
                declared.append((source_name, tool_name))
        return declared

    async def list_tools(self, timeout: timedelta) -> SourceToolListing:
        """List every source at once, each for at most ``timeout``.

        A source whose listing raises or takes longer offers nothing, with a
        warning log, so a down server never fails a turn.

        Raises:
            ValueError: Two sources list the same tool name.
        """
        sources = list(self._sources.items())
        listings = await asyncio.gather(
            *(self._list_one(name, source, timeout) for name, source in sources)
        )
        offered: list[tuple[ToolSource, ListedTool]] = []
        names: set[str] = set()
        for (_, source), tools in zip(sources, listings, strict=True):
            for tool in tools:
                if tool.name in names:
                    raise ValueError(f"two tool sources list a tool named {tool.name}")
                names.add(tool.name)
                offered.append((source, tool))
        return SourceToolListing(tuple(offered))

    async def _list_one(
        self, name: str, source: ToolSource, timeout: timedelta
    ) -> tuple[ListedTool, ...]:
        try:
            async with asyncio.timeout(timeout.total_seconds()):
                tools = tuple(await source.list_tools())
        except TimeoutError:
            _LOG.warning(
                "tool source %s did not list its tools within %s; it offers none now",
                name,
                timeout,
            )
            return ()
        except Exception as error:
            _LOG.warning(
                "tool source %s failed to list its tools; it offers none now: %r", name, error
            )
            return ()
        for tool in tools:
            if not isinstance(getattr(tool, "name", None), str):
                _LOG.warning("tool source %s listed a tool without a name; it offers none", name)
                return ()
        self._last_listings[name] = tools
        return tools

    def cached_tools(self) -> list[ListedTool]:
        """Every source's last listing without I/O: ``cached_tools()`` or the router's own."""
        cached: list[ListedTool] = []
        for name, source in self._sources.items():
            method = getattr(source, "cached_tools", None)
            if callable(method):
                cached.extend(method() or ())
            else:
                cached.extend(self._last_listings.get(name, ()))
        return cached

    def cached_tool_definitions(self) -> list[ModelToolDefinition]:
        """``cached_tools()`` as model tool definitions: what the synchronous token
        estimate counts for the sources, so many listed tools compact in time."""
        return [_definition(tool) for tool in self.cached_tools()]

    def deferred_tool_call(
        self,
        turn: AgentTurnContext,
        source: ToolSource,
        tool: ListedTool,
        *,
        tool_call_id: str,
        arguments: str,
    ) -> DeferredToolCall:
        """The source's deferred call, with its reference wrapped for routing."""
        call = source.deferred_tool_call(
            turn,
            tool_call_id=tool_call_id,
            tool_name=tool.name,
            arguments=arguments,
            listed_tool=tool,
        )
        if not isinstance(call, DeferredToolCall):
            raise TypeError(
                f"tool source {source.source_name} deferred_tool_call returned "
                f"{type(call).__name__}, not DeferredToolCall"
            )
        reference = json.dumps(
            {_REFERENCE_KEY: source.source_name, "reference": call.tool_source_reference},
            separators=(",", ":"),
            ensure_ascii=False,
        )
        return dataclasses.replace(call, tool_source_reference=reference)

    @staticmethod
    def is_source_call(tool_call: AgentToolCall) -> bool:
        """Whether a stored call was built by a tool source (through a router)."""
        return _parse_reference(tool_call.tool_source_reference) is not None

    def _route(self, tool_call: AgentToolCall) -> tuple[ToolSource, AgentToolCall]:
        parsed = _parse_reference(tool_call.tool_source_reference)
        if parsed is None:
            raise LookupError(f"tool call {tool_call.tool_call_id} was not built by a tool source")
        name, reference = parsed
        source = self._sources.get(name)
        if source is None:
            raise LookupError(
                f"tool call {tool_call.tool_call_id} belongs to tool source {name}, "
                "which this worker's agent does not have"
            )
        return source, dataclasses.replace(tool_call, tool_source_reference=reference)

    async def execute_deferred_tool_call(self, call: DeferredToolExecution) -> DeferredToolOutcome:
        """Run a source call through the source that built it, with its own reference.

        Raises:
            LookupError: The call's source is not one of this router's.
        """
        source, tool_call = self._route(call.tool_call)
        return await source.execute_deferred_tool_call(
            dataclasses.replace(call, tool_call=tool_call)
        )

    async def poll_tool_task(self, poll: ToolTaskPoll) -> ToolTaskPollOutcome:
        """Poll a source call's task through the source that built it.

        Raises:
            LookupError: The call's source is not one of this router's.
        """
        source, tool_call = self._route(poll.tool_call)
        return await source.poll_tool_task(dataclasses.replace(poll, tool_call=tool_call))

    async def cancel_tool_task(self, cancellation: ToolTaskCancellation) -> None:
        """Ask the call's source to stop its task, when the source can."""
        source, tool_call = self._route(cancellation.tool_call)
        method = getattr(source, "cancel_tool_task", None)
        if callable(method):
            await method(dataclasses.replace(cancellation, tool_call=tool_call))

    def tool_call_step_options(self, tool_call: AgentToolCall) -> ToolCallStepOptions | None:
        """The call's source's tool Step options, when it gives any."""
        source, inner = self._route(tool_call)
        method = getattr(source, "tool_call_step_options", None)
        if not callable(method):
            return None
        options = method(inner)
        return options if isinstance(options, ToolCallStepOptions) else None


def _parse_reference(text: str | None) -> tuple[str, str | None] | None:
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get(_REFERENCE_KEY), str):
        return None
    reference = value.get("reference")
    return value[_REFERENCE_KEY], reference if isinstance(reference, str) else None
