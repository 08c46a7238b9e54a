"""Where the Steps of other processes send their spans (no OpenTelemetry import).

A pickled ``AgentTracingOptions`` carries a ``SpanRelayAddress`` in place of its
live provider (see ``_options``); ``_relay`` opens the relay and sends to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dex_agents_ray.session.tracing._options import AgentTracingOptions

__all__ = ["SpanRelayAddress", "span_relay_address"]


@dataclass(frozen=True, kw_only=True)
class SpanRelayAddress:
    """Where the Steps of other processes send spans for the provider of the
    process that built the options: a Ray actor that process owns and drains."""

    actor_name: str
    """The relay actor's name; it dies with the process that owns it."""
    namespace: str
    """The Ray namespace of the relay actor."""
    origin: str
    """The owning process, for log messages (``pid 123 on host-a``)."""
    explicit: bool
    """``True``: ``tracer_provider`` was given; ``False``: the origin's global provider,
    which a process's own global provider (``worker_process_setup_hook``) overrides."""
    sampler: bytes | None
    """The origin provider's sampler, pickled; ``None``: ``ParentBased(ALWAYS_ON)``."""


def span_relay_address(options: AgentTracingOptions) -> SpanRelayAddress | None:
    """The relay a pickled copy of ``options`` carries; ``None`` on the original."""
    address = options.__dict__.get("_span_relay")
    return address if isinstance(address, SpanRelayAddress) else None
