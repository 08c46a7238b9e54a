"""Tool calls of a Pydantic AI agent as tool Steps.

In ``RunModel`` every tool the agent offers is deferred before its function
runs (:class:`DeferToolSteps`, a capability added to the adapter's runs only:
the user's agent is unchanged), so the run ends with ``DeferredToolRequests``.
In the tool Step the call runs through the agent's own tool machinery
(argument validation, ``RunContext`` with ``deps``, sync functions in a
thread, ``ModelRetry``, the capabilities' tool hooks): for an agent whose
tools are all function tools and whose capabilities have no run-level hooks,
by the framework's ``ToolManager`` alone (the run's own tool dispatch, at a
tenth of a run's cost); otherwise by a run that ends before it would call the
model (:func:`run_tool_call`).
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic_ai import (
    Agent,
    CallDeferred,
    DeferredToolRequests,
    DeferredToolResults,
    RunContext,
    Tool,
    ToolApproved,
)
from pydantic_ai import messages as pai
from pydantic_ai._tool_execution import build_tool_return_part, tool_bound_retry_part
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import ApprovalRequired, ToolFailedError, ToolRetryError
from pydantic_ai.models import Model
from pydantic_ai.tool_manager import ToolManager
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import CombinedToolset, FunctionToolset
from pydantic_ai.usage import RunUsage

from dex_agents_ray.errors import DexAgentsError
from dex_agents_ray.media import MediaStore, validate_image_references
from dex_agents_ray.session import (
    DeferredToolExecution,
    ToolEffect,
    ToolExecutionError,
    ToolExecutionResult,
)

__all__ = [
    "DeferToolSteps",
    "ToolStepsRequested",
    "deferred_tool_idempotency_key",
    "framework_effect",
    "run_tool_call",
    "schema_only_toolset",
]

_EXECUTIONS: dict[str, DeferredToolExecution] = {}
_EXECUTIONS_LOCK = threading.Lock()


def deferred_tool_idempotency_key(ctx: RunContext[Any]) -> str:
    """The idempotency key of the tool Step that runs this tool call.

    Call it inside a tool function with the tool's ``RunContext``. The key is
    ``"<flow_id>/<turn_id>/<tool_call_id>"``, equal to the Step's
    ``DeferredToolExecution.idempotency_key`` and the same on every retry of the
    Step, so a remote system can drop a repeated write.

    Raises:
        RuntimeError: Outside a tool Step of a Pydantic AI session (for
            example when the agent is run plainly).
    """
    execution = _EXECUTIONS.get(ctx.run_id or "") if isinstance(ctx, RunContext) else None
    if execution is None:
        raise RuntimeError(
            "deferred_tool_idempotency_key() was called outside a tool Step of a durable "
            "Pydantic AI session: it only has a key inside a tool the session runs"
        )
    return execution.idempotency_key


def _key_of_run(ctx: RunContext[Any]) -> str | None:
    execution = _EXECUTIONS.get(ctx.run_id or "")
    return execution.idempotency_key if execution is not None else None


def framework_effect(tool_def: ToolDefinition | None) -> ToolEffect | None:
    """The effect MCP annotations declare for a tool (``readOnlyHint``: ``read``;
    ``idempotentHint``: ``idempotent_write``); ``None`` without annotations."""
    metadata = tool_def.metadata if tool_def is not None else None
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    if not isinstance(annotations, Mapping):
        return None
    if annotations.get("readOnlyHint") is True:
        return ToolEffect.READ
    if annotations.get("idempotentHint") is True:
        return ToolEffect.IDEMPOTENT_WRITE
    if annotations.get("destructiveHint") is not None or annotations.get("idempotentHint") is False:
        return ToolEffect.NON_IDEMPOTENT_WRITE
    return None


class ToolStepsRequested(DexAgentsError):  # noqa: N818 - a control-flow signal, not an error
    """Ends a ``RunModel`` run once its tool calls are deferred (raised from the
    capability's ``handle_deferred_tool_calls``): the run needs no
    ``DeferredToolRequests`` output type, which an agent with output validators
    cannot be given."""

    def __init__(self, requests: DeferredToolRequests) -> None:
        super().__init__("tool calls deferred to tool Steps")
        self.requests = requests


@dataclass
class DeferToolSteps(AbstractCapability[Any]):
    """Defers every tool call of a ``RunModel`` run into a tool Step.

    Replay-only source tools are answered in the run with their recorded outcome
    (``replay``). Records each offered tool's definition for its effect.
    """

    replay: Callable[[str, str], str | None] = field(default=lambda _name, _id: None)
    """``(tool_name, tool_call_id)`` -> the answer of a replay-only tool, else ``None``."""
    tool_defs: dict[str, ToolDefinition] = field(default_factory=dict)
    """The definitions offered to the model in this run, by name."""

    async def prepare_tools(
        self, ctx: RunContext[Any], tool_defs: list[ToolDefinition]
    ) -> list[ToolDefinition]:
        self.tool_defs.update({tool_def.name: tool_def for tool_def in tool_defs})
        return tool_defs

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: pai.ToolCallPart,
        tool_def: ToolDefinition,
        args: Any,
        handler: Callable[[Any], Awaitable[Any]],
    ) -> Any:
        answer = self.replay(call.tool_name, call.tool_call_id)
        if answer is not None:
            return answer
        raise CallDeferred()

    async def handle_deferred_tool_calls(
        self, ctx: RunContext[Any], *, requests: DeferredToolRequests
    ) -> DeferredToolResults | None:
        raise ToolStepsRequested(requests)


def _never_runs(**_: Any) -> str:
    raise RuntimeError("a schema-only tool runs in its tool Step, never in the model call")


def schema_only_toolset(
    definitions: Sequence[tuple[str, str | None, Mapping[str, Any]]],
) -> FunctionToolset[Any]:
    """A toolset of tools known by name, description and JSON Schema only (tool
    source and built-in tools): offered to the model, run by the session."""
    tools = [
        Tool.from_schema(_never_runs, name=name, description=description, json_schema=dict(schema))
        for name, description, schema in definitions
    ]
    return FunctionToolset(tools)


async def run_tool_call(
    agent: Agent[Any, Any],
    execution: DeferredToolExecution,
    *,
    tool_call_id: str,
    approval: bool,
    deps: Any,
    media_store: MediaStore | None = None,
) -> ToolExecutionResult:
    """Run one tool call through the agent's tool machinery, once, and stop before
    the model would be called with its result.

    Raises:
        ToolExecutionError: The tool raised ``ModelRetry`` (its message after
            ``MODEL_RETRY_ERROR_PREFIX``) or ``ToolFailed``, the agent does not
            have the tool, or it returned images without a media store.
    """
    from dex_agents_ray.pydantic_ai._mcp import send_idempotency_keys
    from dex_agents_ray.pydantic_ai._messages import MODEL_RETRY_ERROR_PREFIX

    send_idempotency_keys(agent, _key_of_run)
    record = execution.tool_call
    call = pai.ToolCallPart(record.tool_name, record.arguments or "{}", tool_call_id=tool_call_id)
    history: list[pai.ModelMessage] = [pai.ModelResponse(parts=[call])]
    results = DeferredToolResults(approvals={tool_call_id: ToolApproved()}) if approval else None
    run_id = f"dex-tool:{execution.idempotency_key}:{execution.attempt}:{id(execution)}"
    with _EXECUTIONS_LOCK:
        _EXECUTIONS[run_id] = execution
    try:
        if _dispatches_directly(agent):
            parts = await _dispatch(agent, call, history, approval, deps, run_id)
        else:
            parts = await _drive_to_result(agent, history, results, deps, run_id, tool_call_id)
    finally:
        with _EXECUTIONS_LOCK:
            _EXECUTIONS.pop(run_id, None)
    part = parts[0]
    if isinstance(part, pai.RetryPromptPart):  # arguments the tool refused, an unknown tool
        message = part.content if isinstance(part.content, str) else part.model_response()
        raise ToolExecutionError(MODEL_RETRY_ERROR_PREFIX + message)
    content = part.content if isinstance(part.content, str) else part.model_response_str()
    if part.outcome == "retried":  # the tool raised ModelRetry
        raise ToolExecutionError(MODEL_RETRY_ERROR_PREFIX + content)
    if part.outcome != "success":  # ToolFailed: its own message, wrapped once, in RunModel
        raise ToolExecutionError(content)
    return await _with_images(record.tool_name, part, parts[1:], media_store)


def _binary_images(content: Any) -> list[pai.BinaryContent]:
    items = content if isinstance(content, list | tuple) else [content]
    return [item for item in items if isinstance(item, pai.BinaryContent) and item.is_image]


async def _with_images(
    tool_name: str,
    part: pai.ToolReturnPart,
    extra: Sequence[pai.ModelRequestPart],
    media_store: MediaStore | None,
) -> ToolExecutionResult:
    """The tool's result with the images it returned (in its return value, or as a
    ``ToolReturn``'s content) uploaded to the media store."""
    images = _binary_images(part.content)
    for other in extra:
        if isinstance(other, pai.UserPromptPart):
            images.extend(_binary_images(other.content))
    if not images:
        return ToolExecutionResult(output=part.model_response_str())
    if media_store is None:
        raise ToolExecutionError(
            f"tool {tool_name} returned images, but the runner has no media store to show them"
        )
    rest = part.content if isinstance(part.content, list | tuple) else [part.content]
    kept = [item for item in rest if not isinstance(item, pai.BinaryContent)]
    output = replace(part, content=kept[0] if len(kept) == 1 else kept).model_response_str()
    references = [await media_store.put_image(image.data) for image in images]
    validate_image_references(references)
    return ToolExecutionResult(output=output if kept else "", images=tuple(references))


_RUN_LEVEL_HOOKS = (
    "for_agent",
    "for_run",
    "before_run",
    "after_run",
    "wrap_run",
    "on_run_error",
    "before_node_run",
    "after_node_run",
    "wrap_node_run",
    "get_toolset",
    "get_wrapper_toolset",
    "get_workspace",
)
"""Capability hooks a run calls that the ``ToolManager`` alone would not."""

_DIRECT: dict[int, tuple[Agent[Any, Any], bool]] = {}
"""Per agent (by identity, the agent kept alive with its answer): whether
:func:`_dispatches_directly`."""


def _dispatches_directly(agent: Agent[Any, Any]) -> bool:
    """Whether a tool call of ``agent`` can go to the framework's ``ToolManager``
    without a run and behave as in one: every toolset a ``FunctionToolset``
    (entering them does nothing), a ``Model`` instance, no instrumentation, and
    no capability with a run-level hook (``ToolSearch``'s wrapper toolset only
    narrows what the model is offered, and passes calls through)."""
    known = _DIRECT.get(id(agent))
    if known is not None and known[0] is agent:
        return known[1]
    from pydantic_ai.capabilities import ToolSearch

    def plain(capability: AbstractCapability[Any]) -> bool:
        kind = type(capability)
        overridden = {
            hook
            for hook in _RUN_LEVEL_HOOKS
            if getattr(kind, hook) is not getattr(AbstractCapability, hook)
        }
        if kind is ToolSearch:
            overridden.discard("get_wrapper_toolset")
        return not overridden

    direct = (
        isinstance(agent.model, Model)
        and not agent.instrument
        and all(isinstance(toolset, FunctionToolset) for toolset in agent.toolsets)
        and all(plain(capability) for capability in agent.root_capability.capabilities)
    )
    _DIRECT[id(agent)] = (agent, direct)
    return direct


async def _dispatch(
    agent: Agent[Any, Any],
    call: pai.ToolCallPart,
    history: list[pai.ModelMessage],
    approval: bool,
    deps: Any,
    run_id: str,
) -> list[Any]:
    """The parts a run's tool dispatch would build for ``call``, from the
    framework's ``ToolManager`` with the agent's capabilities (its tool hooks)."""
    model = agent.model
    assert isinstance(model, Model)
    retries = agent._resolve_tool_retries()  # the run's tool-retry budget, as a run resolves it
    ctx: RunContext[Any] = RunContext(
        deps=deps,
        model=model,
        usage=RunUsage(),
        prompt=None,
        messages=history,
        run_id=run_id,
        agent=agent,
        root_capability=agent.root_capability,
        max_retries=retries,
    )
    toolset: CombinedToolset[Any] = CombinedToolset(agent.toolsets)
    async with toolset:
        manager = await ToolManager[Any](
            toolset, root_capability=agent.root_capability, default_max_retries=retries
        ).for_run_step(ctx)
        try:
            result = await manager.handle_call(call, approved=approval)
        except ToolRetryError as retry:
            return [tool_bound_retry_part(retry)]
        except ToolFailedError as failed:
            return [failed.tool_failed]
        except (CallDeferred, ApprovalRequired):
            raise ToolExecutionError(_SELF_DEFERRED) from None
    tool_def = manager.get_tool_def(call.tool_name)
    part, user_content, _ = build_tool_return_part(
        result, call=call, tool_kind=tool_def.tool_kind if tool_def else None
    )
    return [part] if user_content is None else [part, pai.UserPromptPart(user_content)]


_SELF_DEFERRED = (
    "the tool deferred its own call (CallDeferred or ApprovalRequired), which a tool "
    "Step cannot do: the session already ran it as a deferred call"
)


async def _drive_to_result(
    agent: Agent[Any, Any],
    history: list[pai.ModelMessage],
    results: DeferredToolResults | None,
    deps: Any,
    run_id: str,
    tool_call_id: str,
) -> list[Any]:
    """The call's result part first, then the other parts of the request Pydantic AI
    would send with it (a ``ToolReturn``'s content)."""
    async with agent.iter(
        None,
        message_history=history,
        deferred_tool_results=results,
        deps=deps,
        run_id=run_id,
        capabilities=[_RefuseDeferral()],
    ) as run:
        node: Any = run.next_node
        try:
            while not Agent.is_end_node(node):
                if Agent.is_model_request_node(node):
                    parts = list(node.request.parts)
                    for part in parts:
                        if (
                            isinstance(part, pai.ToolReturnPart | pai.RetryPromptPart)
                            and part.tool_call_id == tool_call_id
                        ):
                            return [part, *(p for p in parts if p is not part)]
                    break
                node = await run.next(node)
        except ToolStepsRequested:
            pass
    raise ToolExecutionError(_SELF_DEFERRED)


@dataclass
class _RefuseDeferral(AbstractCapability[Any]):
    """Ends a tool Step's run when the tool defers itself (see ``run_tool_call``)."""

    async def handle_deferred_tool_calls(
        self, ctx: RunContext[Any], *, requests: DeferredToolRequests
    ) -> DeferredToolResults | None:
        raise ToolStepsRequested(requests)
