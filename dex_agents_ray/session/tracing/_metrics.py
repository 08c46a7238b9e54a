"""The session's Ray-native metrics (``ray.util.metrics``): tool calls, model calls,
tokens and interrupts. Names and labels: docs/tracing.md. Recording never raises."""

from __future__ import annotations

import logging
from typing import Any

from dex_agents_ray.engine._metrics import add_count
from dex_agents_ray.session._values import AgentToolCall, AgentUsage

logger = logging.getLogger("dex_agents_ray.tracing")

__all__ = ["SessionMetrics"]

_SECONDS = [0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0]
_metrics: dict[str, Any] = {}
_failed = False


def _failure(what: str) -> None:
    global _failed
    level = logging.DEBUG if _failed else logging.WARNING
    _failed = True
    logger.log(level, "metrics: %s failed", what, exc_info=True)


def _make(name: str) -> Any:
    from ray.util import metrics

    if name == "tool_seconds":
        return metrics.Histogram(
            "dex_agents_ray_tool_call_seconds",
            description="Tool Step attempts that finished a call, by tool, effect and status.",
            boundaries=_SECONDS,
            tag_keys=("tool", "effect", "status"),
        )
    if name == "model_seconds":
        return metrics.Histogram(
            "dex_agents_ray_model_call_seconds",
            description="Model Step attempts (RunModel, CompactContext), by model and outcome.",
            boundaries=_SECONDS,
            tag_keys=("model", "step_type", "outcome"),
        )
    if name == "tokens":
        return metrics.Counter(
            "dex_agents_ray_model_tokens",
            description="Tokens the runner reported, by model and kind.",
            tag_keys=("model", "kind"),
        )
    if name == "raised":
        return metrics.Counter(
            "dex_agents_ray_interrupts_raised",
            description="Interrupts raised for a person to answer, by kind.",
            tag_keys=("kind",),
        )
    return metrics.Counter(
        "dex_agents_ray_interrupts_resolved",
        description="Interrupts answered or expired, by kind and trigger.",
        tag_keys=("kind", "trigger"),
    )


def _metric(name: str) -> Any:
    metric = _metrics.get(name)
    if metric is None:
        metric = _metrics[name] = _make(name)
    return metric


class SessionMetrics:
    """Records the session's metrics in this process."""

    def tool_call(self, record: AgentToolCall, seconds: float) -> None:
        try:
            tags = {
                "tool": record.tool_name,
                "effect": record.effect.value,
                "status": record.status.value,
            }
            _metric("tool_seconds").observe(seconds, tags)
        except Exception:
            _failure("recording a tool call")

    def model_call(
        self, result: object, step_type: str, seconds: float, error: BaseException | None
    ) -> None:
        try:
            metadata = getattr(result, "model_call_metadata", None)
            model = (metadata.request_model if metadata is not None else None) or "unknown"
            outcome = "error" if error is not None else "ok"
            _metric("model_seconds").observe(
                seconds, {"model": model, "step_type": step_type, "outcome": outcome}
            )
            usage = getattr(result, "usage", None)
            if isinstance(usage, AgentUsage):
                for kind, count in (
                    ("input", usage.input_tokens),
                    ("output", usage.output_tokens),
                    ("cached_input", usage.cached_input_tokens),
                    ("reasoning", usage.reasoning_tokens),
                ):
                    if count:
                        add_count(_metric("tokens"), count, (("kind", kind), ("model", model)))
        except Exception:
            _failure("recording a model call")

    def interrupt_raised(self, kind: str) -> None:
        try:
            _metric("raised").inc(1, {"kind": kind})
        except Exception:
            _failure("recording an interrupt")

    def interrupt_resolved(self, kind: str, trigger: str) -> None:
        try:
            _metric("resolved").inc(1, {"kind": kind, "trigger": trigger})
        except Exception:
            _failure("recording an interrupt")
