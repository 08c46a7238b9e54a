"""``AgentTracingOptions`` and ``GenAISemanticConventionsVersion`` (no OpenTelemetry import).

A pickled ``AgentTracingOptions`` carries a ``SpanRelayAddress`` in place of its
live provider: pickling in the process that built the options (the driver, when
``FlowEngine.start`` stores the Flow) opens a span relay there
(``_relay``), so the Steps that run in hosts, executors and Ray tasks
send their finished spans back to that process's provider.
"""

from __future__ import annotations

import logging
import os
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

# A run-time import: stored Flows may name ``SpanRelayAddress`` by this module's old path.
from dex_agents_ray.session.tracing._relay_address import SpanRelayAddress

__all__ = ["AgentTracingOptions", "GenAISemanticConventionsVersion"]

logger = logging.getLogger("dex_agents_ray.tracing")

_process_token = uuid.uuid4().hex
"""Marks the options built in this process (a pickled copy elsewhere lacks it)."""


def _new_process_token() -> None:
    global _process_token
    _process_token = uuid.uuid4().hex


if hasattr(os, "register_at_fork"):  # a forked child is another process
    os.register_at_fork(after_in_child=_new_process_token)


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
    process that runs a Step (hosts, executors, Ray task workers). A live
    provider (locks, threads, sockets) cannot travel, so those processes relay
    their finished spans to the process that built the options, where they end
    in ``tracer_provider`` or, without one, in that process's global provider:
    the spec's set-up works as written. The relay lives as long as that process
    (its Ray connection); after it has gone (a ``ray job`` driver that exited
    while its sessions run on), the other processes drop their spans and log a
    warning on ``dex_agents_ray.tracing``. ``tracer_provider_factory``, or a
    global provider that Ray's ``worker_process_setup_hook`` sets in every
    process, exports from each process directly instead (see docs/tracing.md).

    Example::

        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        options = AgentSessionOptions(
            tracing=AgentTracingOptions(tracer_provider=provider, agent_name="Triage")
        )
    """

    is_enabled: bool = True
    """``False`` emits nothing and never imports OpenTelemetry."""
    tracer_provider: Any = None
    """The provider to emit with; spans of Steps in other processes are relayed to it
    while the process that built the options lives. ``None``: the global provider
    (of that process, or of the process running the Step when it has one)."""
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
    cleanly. It takes precedence over ``tracer_provider`` outside the process
    that built the options (no relay). ``None``: ``tracer_provider`` or the
    global provider."""

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
        object.__setattr__(self, "_built_in", _process_token)

    def __copy__(self) -> AgentTracingOptions:
        return self  # immutable, and a provider is never copied

    def __deepcopy__(self, memo: dict[int, Any]) -> AgentTracingOptions:
        return self

    def __getstate__(self) -> dict[str, Any]:
        # A live provider holds locks and threads: it stays in its own process,
        # and the copy carries the address of a relay to it instead.
        state = dict(self.__dict__)
        state.pop("_built_in", None)
        state["tracer_provider"] = None
        if state.get("_span_relay") is None and self.__dict__.get("_built_in") == _process_token:
            state["_span_relay"] = self._open_relay()
        return state

    def _open_relay(self) -> SpanRelayAddress | None:
        """The relay for this process's provider, when a copy's Steps can use one.

        Only with tracing on, no factory, Ray connected here (the Flow is pickled
        to travel to Ray workers) and OpenTelemetry already imported (the session
        never imports it for an application that does not use it)."""
        if not self.is_enabled or self.tracer_provider_factory is not None:
            return None
        if "opentelemetry.trace" not in sys.modules or "ray" not in sys.modules:
            return None
        if "opentelemetry.sdk.trace" not in sys.modules:  # no SDK provider here to relay to
            if self.tracer_provider is not None:
                logger.warning(
                    "tracing: tracer_provider is a %s, not an opentelemetry-sdk "
                    "TracerProvider, so Steps in other processes cannot relay their spans "
                    "to it; they use their own global provider (see tracer_provider_factory)",
                    type(self.tracer_provider).__name__,
                )
            return None
        try:
            from dex_agents_ray.session.tracing._relay import open_relay

            return open_relay(self.tracer_provider)
        except Exception:
            logger.warning(
                "tracing: no span relay could be opened; Steps in other processes use "
                "their own global tracer provider",
                exc_info=True,
            )
            return None

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            object.__setattr__(self, name, value)
