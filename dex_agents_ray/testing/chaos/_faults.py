"""Fault injection: each kind picks its target from the campaign's seeded RNG."""

from __future__ import annotations

import asyncio
import inspect
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from dex_agents_ray.engine import FlowEngine, PostgresStoreConfig
from dex_agents_ray.testing._actors import (
    EXECUTOR_PREFIX,
    SCHEDULER_NAME,
    kill_named_actor,
    named_actors,
)
from dex_agents_ray.testing._crash import kill_flow_actor
from dex_agents_ray.testing.chaos._record import FaultKind

__all__ = ["FaultInjector", "FaultOutcome"]


@dataclass(frozen=True)
class FaultOutcome:
    target: str
    injected: bool
    detail: str


class FaultInjector:
    """Injects one fault of a kind; every target choice comes from ``rng``."""

    def __init__(
        self,
        engine: FlowEngine,
        rng: random.Random,
        restart_postgres: Callable[[], Awaitable[None] | None] | None,
    ) -> None:
        self.engine = engine
        self.rng = rng
        self.restart_postgres = restart_postgres

    async def inject(self, kind: FaultKind, busy_sessions: Sequence[str]) -> FaultOutcome:
        if kind is FaultKind.SESSION_HOST:
            return await self._session_host(busy_sessions)
        if kind is FaultKind.TOOL_EXECUTOR:
            return await self._actor(named_actors(self.engine.namespace, EXECUTOR_PREFIX))
        if kind is FaultKind.SCHEDULER:
            return await self._actor(named_actors(self.engine.namespace, SCHEDULER_NAME))
        if kind is FaultKind.POSTGRES_RESTART:
            return await self._restart_postgres()
        return await self._drop_connections()

    async def _session_host(self, busy: Sequence[str]) -> FaultOutcome:
        if not busy:
            return FaultOutcome("-", False, "no session had a turn in flight")
        session_id = self.rng.choice(sorted(busy))
        name = self.engine.placement.host_name(session_id)
        try:
            pid = await asyncio.wait_for(
                asyncio.to_thread(kill_flow_actor, self.engine, session_id), 30
            )
        except Exception as error:  # a host restarting after an earlier kill
            first = str(error).split(":", 1)[0][:80]
            return FaultOutcome(name, False, f"{type(error).__name__}: {first}")
        return FaultOutcome(f"{name} (hosting {session_id})", True, f"pid {int(pid)}")

    async def _actor(self, names: list[str]) -> FaultOutcome:
        if not names:
            return FaultOutcome("-", False, "no such actor runs")
        name = self.rng.choice(names)
        pid = await kill_named_actor(self.engine.namespace, name)
        if pid is None:
            return FaultOutcome(name, False, "not answering (restarting)")
        return FaultOutcome(name, True, f"pid {pid}")

    async def _restart_postgres(self) -> FaultOutcome:
        if self.restart_postgres is None:
            return FaultOutcome("-", False, "no restart_postgres given")
        result = self.restart_postgres()
        if inspect.isawaitable(result):
            await result
        return FaultOutcome("postgresql", True, "crash-restarted")

    async def _drop_connections(self) -> FaultOutcome:
        config = self.engine.store_config
        if not isinstance(config, PostgresStoreConfig):
            return FaultOutcome("-", False, "the store is not PostgreSQL")
        dropped = await asyncio.to_thread(_terminate_backends, config)
        return FaultOutcome("postgresql", True, f"{dropped} connection(s) terminated")


def _terminate_backends(config: PostgresStoreConfig) -> int:
    import psycopg

    with psycopg.connect(config.dsn, autocommit=True, connect_timeout=10) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    return sum(1 for (ok,) in rows if ok)
