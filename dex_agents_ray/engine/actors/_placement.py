"""Where runs live: one host actor per run, or a fixed pool of shared hosts."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from enum import StrEnum

__all__ = ["Placement", "PlacementMode"]

DEDICATED_PREFIX = "dexrun:"
SHARED_PREFIX = "dexhost:"


class PlacementMode(StrEnum):
    DEDICATED = "dedicated"
    """One named actor per run (``dexrun:<flow id>``): the Ray dashboard shows
    one actor per session; each costs a process (~50 MiB, ~1 s to create)."""
    SHARED = "shared"
    """A fixed pool of long-lived hosts (``dexhost:<i>``), each hosting many runs
    as virtual actors; a run's host is a stable hash of its flow ID."""


@dataclass(frozen=True, kw_only=True)
class Placement:
    """How an engine's namespace places runs on host actors.

    Every driver of one namespace must use the same placement.
    """

    mode: PlacementMode = PlacementMode.SHARED
    shared_hosts: int = 4
    """Number of hosts in shared mode."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", PlacementMode(self.mode))
        if self.shared_hosts < 1:
            raise ValueError(f"Placement.shared_hosts must be >= 1, got {self.shared_hosts}")

    def slot(self, flow_id: str) -> int:
        """The shared host of ``flow_id`` (stable across processes)."""
        return zlib.crc32(flow_id.encode("utf-8")) % self.shared_hosts

    def host_name(self, flow_id: str) -> str:
        if self.mode is PlacementMode.DEDICATED:
            return f"{DEDICATED_PREFIX}{flow_id}"
        return f"{SHARED_PREFIX}{self.slot(flow_id)}"
