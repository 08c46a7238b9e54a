"""Tracing and metrics hooks on the session Steps (no OpenTelemetry import here).

Each traced Step's ``execute`` carries one decorator: ``activation_step``
(``StartAgentSession``, ``AwaitUserMessage``, ``ApplyTurnControl``),
``approval_step`` (``AwaitToolApproval``), ``model_step`` (``RunModel``,
``CompactContext``) or ``tool_step`` (``CallTool``, ``CallSingleAttemptTool``,
``PollToolTask``). The decorator looks the Step's hooks up once per process and
Flow definition; with tracing disabled and Ray metrics off it only forgets a
stored trace context (an activation root must, see the spec) and calls the
Step. OpenTelemetry is imported (by ``_otel``) only when tracing is enabled
and the API is installed. What a Step's body tells its spans goes through
``_notes``.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from dex import AsyncContext, StepDecision

from dex_agents_ray.session._config import SessionConfig
from dex_agents_ray.session.tracing._notes import forget_trace_context
from dex_agents_ray.session.tracing._step_hooks import StepHooks, untraced_approval

logger = logging.getLogger("dex_agents_ray.tracing")

__all__ = ["METRICS_ENV", "activation_step", "approval_step", "model_step", "tool_step"]

METRICS_ENV = "DEX_AGENTS_RAY_METRICS"
"""Set to ``0`` in a process's environment to turn the session's Ray metrics off."""

_S = TypeVar("_S")
_I = TypeVar("_I")
Execute = Callable[[_S, AsyncContext, _I], Awaitable[StepDecision]]

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
        return StepHooks(config, tracing=tracing.is_enabled, metrics=metrics)
    except Exception:
        logger.warning("tracing and metrics are off in this process", exc_info=True)
        return _NO_HOOKS


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
