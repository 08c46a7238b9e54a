"""What every Step-mode framework adapter's runner does the same way.

:class:`FrameworkRunnerBase` routes tool source calls' task polls, cancellations
and Step options to their source (``FrameworkToolSourceRouter``), and gives the
spec's shared compaction rule (``estimate_stored_input_tokens``,
``select_turn_boundary_cutoff``); the adapter adds ``summarize_context`` and the
runner contract itself.
"""

from __future__ import annotations

import json

from dex_agents_ray.builtin_loop._framework_router import FrameworkToolSourceRouter
from dex_agents_ray.builtin_loop._travel import FrameworkTraveller
from dex_agents_ray.session import (
    AgentToolCall,
    AgentTurnContext,
    ToolCallStepOptions,
    ToolTaskCancellation,
    ToolTaskPoll,
    ToolTaskPollOutcome,
    estimate_stored_input_tokens,
    estimate_text_tokens,
    select_turn_boundary_cutoff,
)

__all__ = ["FrameworkRunnerBase"]


class FrameworkRunnerBase:
    """The tool source routing and turn-boundary compaction of an adapter's runner.

    A subclass sets ``self._router`` (its ``FrameworkToolSourceRouter``) and
    ``self._agent`` (its agent's ``FrameworkTraveller``) in ``__init__``.
    """

    _router: FrameworkToolSourceRouter
    _agent: FrameworkTraveller

    @property
    def agent_reference(self) -> str | None:
        """``"module:attr"`` when the agent travels by reference; ``None`` by value."""
        return self._agent.by_reference

    async def poll_tool_task(self, poll: ToolTaskPoll) -> ToolTaskPollOutcome:
        """Poll a tool source call's task through its source."""
        return await self._router.poll_tool_task(poll)

    async def cancel_tool_task(self, cancellation: ToolTaskCancellation) -> None:
        """Ask the call's tool source to stop its task."""
        if FrameworkToolSourceRouter.is_source_call(cancellation.tool_call):
            await self._router.cancel_tool_task(cancellation)

    def tool_call_step_options(self, tool_call: AgentToolCall) -> ToolCallStepOptions | None:
        """A tool source call's Step options from its source; ``None`` otherwise."""
        if not FrameworkToolSourceRouter.is_source_call(tool_call):
            return None
        try:
            return self._router.tool_call_step_options(tool_call)
        except LookupError:
            return None

    async def estimate_input_tokens(self, turn: AgentTurnContext) -> int:
        """``estimate_stored_input_tokens`` of the stored history plus the tool
        sources' definitions (each source's ``cached_tools()``, else its last
        listing: no I/O), which can be many; the policy's ``reserved_input_tokens``
        covers what the framework adds itself (instructions, its own tools)."""
        sources = sum(
            estimate_text_tokens(
                definition.name + definition.description + json.dumps(definition.parameters_schema)
            )
            for definition in self._router.cached_tool_definitions()
        )
        return estimate_stored_input_tokens(turn, fixed_input_tokens=sources)

    def select_compaction_cutoff(
        self, turn: AgentTurnContext, retained_token_budget: int
    ) -> int | None:
        """``select_turn_boundary_cutoff``: cut only between turns."""
        return select_turn_boundary_cutoff(turn, retained_token_budget)
