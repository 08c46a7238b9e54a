"""The adapter's copy of an agent graph: the same agents, tools deferred to tool Steps.

Every run the adapter makes uses a copy of the user's agent and of every agent
reachable through its handoffs (the user's objects stay unchanged). In the copy
each ``FunctionTool`` needs approval, so a model response that asks for tools
pauses the run before any tool body runs (``result.interruptions``), and its
``on_invoke_tool`` returns the call's recorded outcome instead of running the
body: a resumed run shows the model the tool Steps' results. Tool guardrails
run in the tool Step, around the real body.

Agents are looked up by name (the active agent survives a crash by name), so
names must be unique in the graph.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from agents import Agent, FunctionTool, Handoff

__all__ = ["AgentGraph", "RecordedOutputs", "walk_agents"]

RecordedOutputs = Callable[[str, str], str]
"""``(tool_name, tool_call_id)`` -> the call's model-visible recorded outcome."""


def _handoff_target(handoff: Handoff[Any, Any]) -> Agent[Any] | None:
    # The SDK keeps a handoff's target only as a weak reference (``_agent_ref``,
    # handoffs/__init__.py); RunState needs it to resolve agents reached through it.
    reference = getattr(handoff, "_agent_ref", None)
    target = reference() if reference is not None else None
    return target if isinstance(target, Agent) else None


def walk_agents(root: Agent[Any]) -> Iterator[Agent[Any]]:
    """``root`` and every agent reachable through handoffs, each once."""
    seen: set[int] = set()
    pending: list[Agent[Any]] = [root]
    while pending:
        agent = pending.pop()
        if id(agent) in seen:
            continue
        seen.add(id(agent))
        yield agent
        for entry in agent.handoffs:
            target = entry if isinstance(entry, Agent) else _handoff_target(entry)
            if target is not None:
                pending.append(target)


class AgentGraph:
    """A copy of the user's agent graph whose tools are deferred (see the module).

    Args:
        root: The user's starting agent.
        recorded: The outcome a resumed call shows the model.
    """

    def __init__(self, root: Agent[Any], recorded: RecordedOutputs | None = None) -> None:
        self._recorded = recorded
        self._copies: dict[int, Agent[Any]] = {}
        self.root = self._copy(root)
        self.by_name: Mapping[str, Agent[Any]] = {a.name: a for a in self._copies.values()}

    def agent(self, name: str | None) -> Agent[Any]:
        """The copy of the agent named ``name`` (the root for ``None``).

        Raises:
            LookupError: No agent of the graph has that name.
        """
        if name is None:
            return self.root
        found = self.by_name.get(name)
        if found is None:
            raise LookupError(f"the agent graph has no agent named {name!r}")
        return found

    def _tool(self, tool: Any) -> Any:
        if not isinstance(tool, FunctionTool):
            return tool
        recorded = self._recorded

        async def recorded_outcome(ctx: Any, arguments: str, _name: str = tool.name) -> str:
            if recorded is None:
                raise RuntimeError(f"tool {_name} ran outside its tool Step")
            return recorded(_name, ctx.tool_call_id)

        return dataclasses.replace(
            tool,
            on_invoke_tool=recorded_outcome,
            needs_approval=True,
            tool_input_guardrails=None,
            tool_output_guardrails=None,
        )

    def _copy(self, agent: Agent[Any]) -> Agent[Any]:
        known = self._copies.get(id(agent))
        if known is not None:
            return known
        copy = agent.clone(tools=[self._tool(tool) for tool in agent.tools], handoffs=[])
        self._copies[id(agent)] = copy
        handoffs: list[Any] = []
        for entry in agent.handoffs:
            if isinstance(entry, Agent):
                handoffs.append(self._copy(entry))
                continue
            target = _handoff_target(entry)
            target_copy = self._copy(target) if target is not None else None
            handoffs.append(self._handoff(entry, target_copy))
        copy.handoffs = handoffs
        return copy

    def _handoff(self, entry: Handoff[Any, Any], target_copy: Agent[Any] | None) -> Any:
        original = entry.on_invoke_handoff
        copies = self._copies

        async def invoke(ctx: Any, arguments: str) -> Any:
            chosen = await original(ctx, arguments)  # the user's on_handoff, input validation
            return copies.get(id(chosen), chosen)

        copied = dataclasses.replace(entry, on_invoke_handoff=invoke)
        if target_copy is not None:
            copied._agent_ref = weakref.ref(target_copy)  # see _handoff_target
        return copied
