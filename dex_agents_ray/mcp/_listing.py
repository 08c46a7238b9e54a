"""The per-Worker listing cache: each server listed on its own, one listing at a time.

The first listing of a server is awaited. After ``ttl`` the server is listed
again in the background while its earlier tools are returned. A server that
cannot be listed is left out with a warning log and not tried again for
``backoff``, then again in the background, so one bad server never hides the
others' tools or slows every model call.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from dex_agents_ray.mcp._config import McpServerConfig
from dex_agents_ray.mcp._tools import McpTool

__all__ = ["ListingCache", "combine_listings"]

_LOG = logging.getLogger("dex_agents_ray.mcp")

Lister = Callable[[McpServerConfig], Awaitable[tuple[McpTool, ...]]]


@dataclass
class _ServerState:
    tools: tuple[McpTool, ...] | None = None
    listed_at: float | None = None
    failed_at: float | None = None
    running: asyncio.Task[None] | None = None


class ListingCache:
    """Listings of a source's servers, kept in this process.

    Safe to use from several event loops (a Ray actor's and a test's): a
    listing running on another loop is not joined but started again here.
    """

    def __init__(
        self,
        servers: Sequence[McpServerConfig],
        lister: Lister,
        *,
        ttl: float,
        backoff: float,
        clock: Callable[[], float],
    ) -> None:
        self._servers = tuple(servers)
        self._lister = lister
        self._ttl = ttl
        self._backoff = backoff
        self._clock = clock
        self._states = {server.name: _ServerState() for server in servers}
        self._background: set[asyncio.Task[None]] = set()

    async def listings(
        self, *, refresh: bool = False
    ) -> list[tuple[McpServerConfig, tuple[McpTool, ...]]]:
        """Each server that has a listing now, in server order, with its tools."""
        listings = await asyncio.gather(*(self._server(s, refresh) for s in self._servers))
        return [
            (s, tools)
            for s, tools in zip(self._servers, listings, strict=True)
            if tools is not None
        ]

    def cached(self) -> list[tuple[McpServerConfig, tuple[McpTool, ...]]]:
        """The last listings, without I/O."""
        listed = [(s, self._states[s.name].tools) for s in self._servers]
        return [(s, tools) for s, tools in listed if tools is not None]

    def tools_of(self, server_name: str) -> tuple[McpTool, ...] | None:
        """A server's last listing; ``None`` when it has none."""
        state = self._states.get(server_name)
        return None if state is None else state.tools

    async def _server(self, server: McpServerConfig, refresh: bool) -> tuple[McpTool, ...] | None:
        state = self._states[server.name]
        now = self._clock()
        if refresh:
            await self._join(server)
        elif state.tools is not None and state.listed_at is not None:
            if now - state.listed_at >= self._ttl:
                self._start(server)
        elif state.failed_at is not None:
            if now - state.failed_at >= self._backoff:
                self._start(server)
        else:
            await self._join(server)
        return state.tools

    def _running_here(self, state: _ServerState) -> asyncio.Task[None] | None:
        task = state.running
        if task is None or task.done() or task.get_loop() is not asyncio.get_running_loop():
            return None
        return task

    def _start(self, server: McpServerConfig) -> asyncio.Task[None]:
        state = self._states[server.name]
        task = self._running_here(state)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._list(server))
            state.running = task
            self._background.add(task)
            task.add_done_callback(self._background.discard)
        return task

    async def _join(self, server: McpServerConfig) -> None:
        # Shielded: a caller that stops waiting (a listing timeout) leaves the
        # listing running for the next caller.
        await asyncio.shield(self._start(server))

    async def _list(self, server: McpServerConfig) -> None:
        state = self._states[server.name]
        try:
            tools = await self._lister(server)
        except Exception as error:  # a down server is left out, not fatal
            state.tools = None
            state.failed_at = self._clock()
            _LOG.warning(
                "MCP server %s could not be listed; its tools are left out for now: %s",
                server.name,
                error,
            )
            return
        state.tools = tools
        state.listed_at = self._clock()
        state.failed_at = None


def combine_listings(
    listings: Sequence[tuple[McpServerConfig, Sequence[McpTool]]],
) -> list[McpTool]:
    """Every listed tool in server order; a name already taken is left out with a warning."""
    offered: list[McpTool] = []
    taken: dict[str, str] = {}
    for server, tools in listings:
        for tool in tools:
            first = taken.get(tool.name)
            if first is not None:
                _LOG.warning(
                    "MCP tool %r of server %s is left out: its name %s is taken by a tool of "
                    "server %s",
                    tool.mcp_name,
                    server.name,
                    tool.name,
                    first,
                )
                continue
            taken[tool.name] = server.name
            offered.append(tool)
    return offered
