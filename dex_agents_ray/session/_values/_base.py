"""The stored format's version and the session's clock, shared by every value module."""

from __future__ import annotations

from datetime import datetime

from dex_agents_ray.engine import utc_now as engine_utc_now

__all__ = ["STATE_SCHEMA_VERSION", "check_schema_version", "utc_now"]


STATE_SCHEMA_VERSION = 1
"""The version of the stored session format this release writes and reads."""


def check_schema_version(owner: str, version: int) -> None:
    """Refuse a stored value written by a newer release (older ones are read as they are)."""
    if isinstance(version, int) and version > STATE_SCHEMA_VERSION:
        raise ValueError(
            f"{owner} was stored with schema version {version}; this release reads "
            f"versions up to {STATE_SCHEMA_VERSION}. Upgrade dex-agents-ray."
        )


def utc_now() -> datetime:
    """The current time, timezone-aware, in UTC."""
    return engine_utc_now()
