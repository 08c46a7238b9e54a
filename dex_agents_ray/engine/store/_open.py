"""Opening the store a config names: the one module that knows both backends.

The backends import the configs and the Protocol from ``_store``; this module
imports the backends (lazily: a SQLite engine never loads the PostgreSQL code),
so nothing in the store imports back up.
"""

from __future__ import annotations

from dex_agents_ray.engine.store._store import (
    FlowStore,
    PostgresStoreConfig,
    SqliteStoreConfig,
    StoreConfig,
)

__all__ = ["open_store"]


def open_store(config: StoreConfig) -> FlowStore:
    """Build (not yet open) the store ``config`` describes."""
    if isinstance(config, PostgresStoreConfig):
        from dex_agents_ray.engine.store._postgres import PostgresFlowStore

        return PostgresFlowStore(config)
    if isinstance(config, SqliteStoreConfig):
        from dex_agents_ray.engine.store._sqlite import SqliteFlowStore

        return SqliteFlowStore(config)
    raise TypeError(f"not a store config: {type(config).__name__}")
