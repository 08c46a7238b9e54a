"""Tracing and metrics hooks on the session Steps (no OpenTelemetry import here).

Each traced Step's ``execute`` carries one decorator: ``activation_step``
(``StartAgentSession``, ``AwaitUserMessage``, ``ApplyTurnControl``),
``approval_step`` (``AwaitToolApproval``), ``model_step`` (``RunModel``,
``CompactContext``) or ``tool_step`` (``CallTool``, ``CallSingleAttemptTool``,
``PollToolTask``). The decorator looks the Step's hooks up once per process and
Flow definition; with tracing disabled and Ray metrics off it only forgets a
stored trace context (an activation root must, see the spec) and calls the
Step. OpenTelemetry is imported (by ``_tracing_otel``) only when tracing is
enabled and the API is installed.

``note_model_result`` is the one call inside a Step body: ``RunModel`` and
``CompactContext`` hand it what the runner returned, so the ``chat`` span gets
the call's metadata and usage.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, TypeVar

from dex import AsyncContext, Context, StepDecision

from dex_agents_ray.session._schema import AGENT_TRACE_CONTEXT, SessionConfig

if TYPE_CHECKING:
    from dex_agents_ray.session._tracing_hooks import StepHooks

logger = logging.getLogger("dex_agents_ray.tracing")

__all__ = [
    "METRICS_ENV",
    "ModelResultNote",
    "activation_step",
    "approval_step",
    "forget_trace_context",
    "model_step",
    "note_model_result",
    "tool_step",
]

METRICS_ENV = "DEX_AGENTS_RAY_METRICS"
"""Set to ``0`` in a process's environment to turn the session's Ray metrics off."""

_S = TypeVar("_S")
_I = TypeVar("_I")
Execute = Callable[[_S, AsyncContext, _I], Awaitable[StepDecision]]


class ModelResultNote:
    """Where ``note_model_result`` leaves the runner's result for the ``chat`` span."""

    __slots__ = (
        "approvals_raised",
        "created_tool_calls",
        "records",
        "result",
        "summarized_through",
    )

    def __init__(self) -> None:
        self.result: object = None
        self.records: list[Any] = []
        """The tool call records the call saw (only when content is captured)."""
        self.summarized_through = 0
        """The summary's last sequence before the call (only when content is captured)."""
        self.created_tool_calls: list[str] = []
        """The IDs of the tool call records the call's result created."""
        self.approvals_raised = 0
        """How many of those wait for an approval."""


MODEL_RESULT: ContextVar[ModelResultNote | None] = ContextVar(
    "dex_agents_ray_model_result", default=None
)


def note_model_result(result: object) -> None:
    """Hand the runner's result of this attempt's model call to its ``chat`` span."""
    note = MODEL_RESULT.get()
    if note is not None:
        note.result = result


def note_tool_calls_created(tool_call_ids: Sequence[str], approvals: int) -> None:
    """Tell this attempt's ``chat`` span and metrics which tool call records its
    result created, and how many of them wait for an approval."""
    note = MODEL_RESULT.get()
    if note is not None:
        note.created_tool_calls.extend(tool_call_ids)
        note.approvals_raised += approvals


_NO_HOOKS: Any = object()
_hooks_by_config: dict[int, tuple[SessionConfig, Any]] = {}


def _hooks(config: SessionConfig) -> StepHooks | None:
    """This process's hooks of ``config`` (``None``: nothing to trace or count)."""
    cached = _hooks_by_config.get(id(config))
    if cached is not None and cached[0] is config:
        hooks = cached[1]
    else:
        hooks = _build_hooks(config)
        _hooks_by_config[id(config)] = (config, hooks)
    return None if hooks is _NO_HOOKS else hooks


def _build_hooks(config: SessionConfig) -> Any:
    tracing = config.options.tracing
    metrics = os.environ.get(METRICS_ENV, "1").strip() != "0"
    if not tracing.is_enabled and not metrics:
        return _NO_HOOKS
    try:
        from dex_agents_ray.session._tracing_hooks import StepHooks

        return StepHooks(config, tracing=tracing.is_enabled, metrics=metrics)
    except Exception:
        logger.warning("tracing and metrics are off in this process", exc_info=True)
        return _NO_HOOKS


def forget_trace_context(context: Context) -> None:
    """An activation root without a valid span context deletes the stored one, so
    the activation's later spans do not join the previous activation's trace."""
    if AGENT_TRACE_CONTEXT.get(context) is not None:
        AGENT_TRACE_CONTEXT.delete(context)


def activation_step(fn: Execute[_S, _I]) -> Execute[_S, _I]:
    """``execute`` of a Step that may start an activation with a user message."""

    @functools.wraps(fn)
    async def execute(self: Any, context: AsyncContext, input: Any) -> StepDecision:
        hooks = _hooks(self.config)
        if hooks is None or not hooks.tracing:
            forget_trace_context(context)
            return await fn(self, context, input)
        return await hooks.activation(fn, self, context, input)

    return execute


def approval_step(fn: Execute[_S, _I]) -> Execute[_S, _I]:
    """``execute`` of ``AwaitToolApproval``: an answer or a deadline starts an activation."""

    @functools.wraps(fn)
    async def execute(self: Any, context: AsyncContext, input: Any) -> StepDecision:
        hooks = _hooks(self.config)
        if hooks is None:
            from dex_agents_ray.session._tracing_hooks import untraced_approval

            return await untraced_approval(fn, self, context, input)
        return await hooks.approval(fn, self, context, input)

    return execute


def model_step(fn: Execute[_S, _I]) -> Execute[_S, _I]:
    """``execute`` of ``RunModel`` and ``CompactContext``: the ``chat`` span."""

    @functools.wraps(fn)
    async def execute(self: Any, context: AsyncContext, input: Any) -> StepDecision:
        hooks = _hooks(self.config)
        if hooks is None:
            return await fn(self, context, input)
        return await hooks.model(fn, self, context, input)

    return execute


def tool_step(fn: Execute[_S, _I]) -> Execute[_S, _I]:
    """``execute`` of the tool Steps: the ``execute_tool`` span."""

    @functools.wraps(fn)
    async def execute(self: Any, context: AsyncContext, input: Any) -> StepDecision:
        hooks = _hooks(self.config)
        if hooks is None:
            return await fn(self, context, input)
        return await hooks.tool(fn, self, context, input)

    return execute
