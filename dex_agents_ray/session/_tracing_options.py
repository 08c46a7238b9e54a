"""``AgentTracingOptions`` and ``GenAISemanticConventionsVersion`` (no OpenTelemetry import)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = ["AgentTracingOptions", "GenAISemanticConventionsVersion"]


class GenAISemanticConventionsVersion(StrEnum):
    """The GenAI semantic conventions the session's spans follow."""

    V1_42_0_DEV = "1.42.0-dev"
    """``open-telemetry/semantic-conventions-genai`` at commit
    ``dc3571562603552dc555c667dfa327a638d94ab2`` (2026-11-01); the default."""
    V1_36_0 = "1.36.0"
    """OpenTelemetry semantic conventions 1.36.0: ``gen_ai.system`` instead of
    ``gen_ai.provider.name``, no cache or reasoning token counts, no content."""

    @property
    def schema_url(self) -> str:
        """The schema URL set on the tracer."""
        if self is GenAISemanticConventionsVersion.V1_36_0:
            return "https://opentelemetry.io/schemas/1.36.0"
        return "https://opentelemetry.io/schemas/gen-ai-dev/1.42.0-dev"


@dataclass(frozen=True, kw_only=True)
class AgentTracingOptions:
    """How a session Flow type emits OpenTelemetry spans (``AgentSessionOptions.tracing``).

    The Flow, options included, is pickled by value and unpickled in every
    process that runs a Step (hosts, executors, Ray task workers), so a live
    ``tracer_provider`` cannot travel: it is dropped when the options are
    pickled, and those processes use ``tracer_provider_factory`` (called once
    per process) or, without one, their global tracer provider, which Ray's
    ``worker_process_setup_hook`` can configure (see docs/tracing.md).

    Example::

        def make_provider() -> TracerProvider:  # importable, module level
            provider = TracerProvider()
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
            return provider

        options = AgentSessionOptions(
            tracing=AgentTracingOptions(tracer_provider_factory=make_provider, agent_name="Triage")
        )
    """

    is_enabled: bool = True
    """``False`` emits nothing and never imports OpenTelemetry."""
    tracer_provider: Any = None
    """The provider to emit with in the process that built the options; ``None``
    uses ``tracer_provider_factory`` or the process's global provider. Not pickled."""
    agent_name: str | None = None
    """``gen_ai.agent.name`` and the ``invoke_agent`` span name; ``None``: the Flow type."""
    should_capture_message_content: bool = False
    """Put message text, tool arguments and tool results on spans (never with ``V1_36_0``)."""
    semantic_conventions_version: GenAISemanticConventionsVersion = (
        GenAISemanticConventionsVersion.V1_42_0_DEV
    )
    """The GenAI semantic conventions the spans follow."""
    tracer_provider_factory: Callable[[], Any] | None = None
    """A picklable callable (a module-level function, or a picklable object)
    returning the ``TracerProvider`` of a process that runs Steps; called once
    per process and factory, and the provider is flushed when the process exits
    cleanly. ``None``: ``tracer_provider`` or the global provider."""

    def __post_init__(self) -> None:
        object.__setattr__(
            self,
            "semantic_conventions_version",
            GenAISemanticConventionsVersion(self.semantic_conventions_version),
        )
        if not isinstance(self.is_enabled, bool):
            raise TypeError("AgentTracingOptions.is_enabled must be a bool")
        if not isinstance(self.should_capture_message_content, bool):
            raise TypeError("AgentTracingOptions.should_capture_message_content must be a bool")
        if self.agent_name is not None and (
            not isinstance(self.agent_name, str) or not self.agent_name.strip()
        ):
            raise ValueError("AgentTracingOptions.agent_name must be None or a non-blank str")
        if self.tracer_provider_factory is not None and not callable(self.tracer_provider_factory):
            raise TypeError("AgentTracingOptions.tracer_provider_factory must be callable")
        if self.tracer_provider is not None and not callable(
            getattr(self.tracer_provider, "get_tracer", None)
        ):
            raise TypeError("AgentTracingOptions.tracer_provider must be a TracerProvider")

    def __getstate__(self) -> dict[str, Any]:
        # A live provider holds locks and threads: it stays in its own process.
        state = dict(self.__dict__)
        state["tracer_provider"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            object.__setattr__(self, name, value)
