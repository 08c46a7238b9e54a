"""``ConnectorToolSource``: reviewed Connector operations as a ``ToolSource``.

The tools are fixed when the source is built (no listing I/O), so every Worker
resolves a stored call by the tool name in its ``tool_source_reference``.

Lifecycle: the source is pickled with its Flow; the operations, references and
predicates it holds must pickle (cloudpickle) and their packages must import
where the tool Steps run. Its methods may run concurrently, on any Worker, and
again after a crash.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from dex_agents_ray.connectors._calls import run_connector_call
from dex_agents_ray.connectors._outcomes import DEFAULT_CONNECTOR_RESULT_MAX_BYTES
from dex_agents_ray.connectors._tool import ConnectorTool
from dex_agents_ray.session import (
    AgentToolCall,
    AgentTurnContext,
    DeferredToolCall,
    DeferredToolExecution,
    ToolCallStepOptions,
    ToolEffect,
    ToolExecutionError,
    ToolExecutionResult,
    ToolPolicy,
    ToolTaskPoll,
    ToolTaskPollOutcome,
)

__all__ = ["ConnectorToolSource"]


class ConnectorToolSource:
    """Connector operations as tools of the built-in loop, or of any runner.

    Each call runs one operation in its own tool Step: ``CallTool`` for a Query or
    a Mutation with ``agent.retry: safe``, ``CallSingleAttemptTool`` for any other
    Mutation. Every write is an ordered write (``DeferredToolCall.ordered``).

    Example::

        source = ConnectorToolSource([
            connector_tool(slack.post_thread_reply(), slack.reference),
            connector_tool(stripe.operations.create_refund(), stripe.reference,
                           requires_approval=lambda arguments: arguments["amount"] > 5000),
        ])
        agent = AgentDefinition(name="support", instructions="...", model=model,
                                tool_sources=[source])

    Args:
        tools: The tools, in offer order; names must be unique.
        source_name: The source's stable name; stored calls find it by this name.
        max_result_bytes: The result limit of tools that set none, in UTF-8 bytes.

    Raises:
        TypeError: A tool is not a ``ConnectorTool`` (build it with ``connector_tool``).
        ValueError: Two tools share a name, or an option is out of range.
    """

    def __init__(
        self,
        tools: Sequence[ConnectorTool],
        *,
        source_name: str = "connectors",
        max_result_bytes: int = DEFAULT_CONNECTOR_RESULT_MAX_BYTES,
    ) -> None:
        if not isinstance(source_name, str) or not source_name:
            raise ValueError("source_name must be a non-empty string")
        if isinstance(max_result_bytes, bool) or not isinstance(max_result_bytes, int):
            raise TypeError("max_result_bytes must be an int")
        if max_result_bytes < 1:
            raise ValueError(f"max_result_bytes must be positive, got {max_result_bytes}")
        by_name: dict[str, ConnectorTool] = {}
        for tool in tools:
            if not isinstance(tool, ConnectorTool):
                raise TypeError(f"tools must be built with connector_tool, got {tool!r}")
            if tool.name in by_name:
                raise ValueError(f"two connector tools are named {tool.name}")
            by_name[tool.name] = tool
        self._tools = by_name
        self._source_name = source_name
        self._max_result_bytes = max_result_bytes

    def __repr__(self) -> str:
        return f"ConnectorToolSource({list(self._tools)!r}, source_name={self._source_name!r})"

    @property
    def source_name(self) -> str:
        """The source's stable name (``"connectors"`` by default)."""
        return self._source_name

    @property
    def tools(self) -> tuple[ConnectorTool, ...]:
        """The tools, in offer order."""
        return tuple(self._tools.values())

    async def list_tools(self) -> list[ConnectorTool]:
        """Every tool (fixed; no I/O)."""
        return list(self._tools.values())

    def cached_tools(self) -> list[ConnectorTool]:
        """Every tool, for token estimates."""
        return list(self._tools.values())

    def declared_tool_names(self) -> list[str]:
        """Every tool name: the source always lists them all."""
        return list(self._tools)

    # -- calls -----------------------------------------------------------------------

    def _policy(self, turn: AgentTurnContext, tool: ConnectorTool, arguments: str) -> ToolPolicy:
        """The manifest's effect, always; a session policy changes only the approval."""
        approval = tool.approval_required(arguments)
        session = turn.tool_policies.get(tool.name)
        # Arguments that break the schema never run, so they never wait.
        if session is not None and session.requires_approval is not None:
            approval = session.requires_approval and tool.arguments_valid(arguments)
        return ToolPolicy(tool.effect, requires_approval=approval)

    def deferred_tool_call(
        self,
        turn: AgentTurnContext,
        *,
        tool_call_id: str,
        tool_name: str,
        arguments: str,
        listed_tool: Any = None,
    ) -> DeferredToolCall:
        """The deferred call: the manifest's effect, its approval, a reference naming
        the tool, and ``ordered`` for every write."""
        tool = self._tools.get(tool_name)
        if tool is None:
            # Not one of ours (a stale listing): it fails as an unknown tool, unasked.
            return DeferredToolCall(
                tool_call_id=tool_call_id,
                tool_name=tool_name,
                arguments=arguments,
                policy=ToolPolicy(ToolEffect.UNCLASSIFIED, requires_approval=False),
            )
        policy = self._policy(turn, tool, arguments)
        return DeferredToolCall(
            tool_call_id=tool_call_id,
            tool_name=tool_name,
            arguments=arguments,
            policy=policy,
            tool_source_reference=json.dumps({"tool": tool.name}, separators=(",", ":")),
            ordered=policy.effect is not ToolEffect.READ,
        )

    def _tool_of(self, record: AgentToolCall) -> ConnectorTool:
        try:
            value = json.loads(record.tool_source_reference or "")
        except ValueError:
            value = None
        name = value.get("tool") if isinstance(value, dict) else None
        tool = self._tools.get(name) if isinstance(name, str) else None
        if tool is None:
            raise ToolExecutionError(f"unknown tool {record.tool_name}")
        return tool

    async def execute_deferred_tool_call(self, call: DeferredToolExecution) -> ToolExecutionResult:
        """Run one call's operation once, in its tool Step.

        Raises:
            ToolExecutionError: ``failed``: an unknown tool, arguments that break the
                schema or do not decode, a branch that records ``failed``, or
                ``CONNECTOR_NOT_SENT_RETRY_LATER``.
            ToolOutcomeUnknownError: A branch that records ``outcome_unknown``.
            Exception: A Step failure (the connector's ``RetryError`` among them).
        """
        tool = self._tool_of(call.tool_call)
        limit = tool.max_result_bytes or self._max_result_bytes
        return await run_connector_call(tool, call, max_result_bytes=limit)

    async def poll_tool_task(self, poll: ToolTaskPoll) -> ToolTaskPollOutcome:
        """Connector calls start no tasks.

        Raises:
            LookupError: Always.
        """
        raise LookupError(f"tool call {poll.tool_call.tool_call_id} has no connector task")

    def tool_call_step_options(self, tool_call: AgentToolCall) -> ToolCallStepOptions | None:
        """The operation's ``execute_method_timeout`` and retry policy (at most three
        attempts) for the call's tool Step; ``None`` keeps the session's."""
        try:
            return self._tool_of(tool_call).step_options
        except ToolExecutionError:
            return None
