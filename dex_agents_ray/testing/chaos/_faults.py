"""Fault injection: each kind picks its target from the campaign's seeded RNG."""

from __future__ import annotations

import asyncio
import inspect
import random
import time
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
from dex_agents_ray.testing.chaos._nodes import ClusterNodes, wait_until_dead
from dex_agents_ray.testing.chaos._record import FaultKind

__all__ = ["FaultInjector", "FaultOutcome"]


@dataclass(frozen=True)
class FaultOutcome:
    target: str
    injected: bool
    detail: str
    affected: tuple[str, ...] = ()
    """The busy sessions whose host the fault took (a node fault's)."""
    at: float | None = None
    """``time.monotonic()`` of the fault itself, when the injector went on after it
    (a node fault waits for the node to be declared dead and adds one back)."""


class FaultInjector:
    """Injects one fault of a kind; every target choice comes from ``rng``."""

    def __init__(
        self,
        engine: FlowEngine,
        rng: random.Random,
        restart_postgres: Callable[[], Awaitable[None] | None] | None,
        nodes: ClusterNodes | None = None,
    ) -> None:
        self.engine = engine
        self.rng = rng
        self.restart_postgres = restart_postgres
        self.nodes = nodes
        self.node_kills = 0
        self.scheduler_node_killed = False

    async def inject(self, kind: FaultKind, busy_sessions: Sequence[str]) -> FaultOutcome:
        if kind is FaultKind.SESSION_HOST:
            return await self._session_host(busy_sessions)
        if kind is FaultKind.TOOL_EXECUTOR:
            return await self._actor(named_actors(self.engine.namespace, EXECUTOR_PREFIX))
        if kind is FaultKind.SCHEDULER:
            return await self._actor(named_actors(self.engine.namespace, SCHEDULER_NAME))
        if kind is FaultKind.POSTGRES_RESTART:
            return await self._restart_postgres()
        if kind is FaultKind.NODE:
            return await self._node(busy_sessions)
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

    async def _node(self, busy: Sequence[str]) -> FaultOutcome:
        """Kill a worker node, wait until the cluster declares it dead, add one back.

        The target is drawn from the live worker nodes, except that every third
        node fault takes the scheduler's node while it is on a worker node and no
        node fault has taken it yet, so a long campaign kills it at least once."""
        nodes = self.nodes
        if nodes is None:
            return FaultOutcome("-", False, "no ClusterNodes given (ChaosCampaign.nodes)")
        killable = await asyncio.to_thread(nodes.killable)
        if not killable:
            return FaultOutcome("-", False, "no live worker node")
        scheduler = await _node_of(self.engine.namespace, SCHEDULER_NAME)
        if scheduler in killable and not self.scheduler_node_killed and self.node_kills % 3 == 2:
            target = scheduler
        else:
            target = self.rng.choice(killable)
        hosts = await self._hosts_on(target, busy)
        executors = [
            name
            for name in named_actors(self.engine.namespace, EXECUTOR_PREFIX)
            if await _node_of(self.engine.namespace, name) == target
        ]
        killed_at = time.monotonic()
        await nodes.kill(target)
        self.node_kills += 1
        self.scheduler_node_killed |= scheduler == target
        dead = await wait_until_dead(target)
        try:
            back = f"node {(await nodes.add())[:8]} added"
        except Exception as error:  # the fault stands; the cluster is a node short
            back = f"no node added ({type(error).__name__}: {str(error)[:300]})"
        detail = (
            f"{len(hosts)} busy session(s) hosted, {len(executors)} executor(s)"
            f"{', the scheduler' if scheduler == target else ''}; declared dead after "
            + (f"{dead:.1f} s" if dead is not None else "more than a minute")
            + f"; {back}"
        )
        return FaultOutcome(f"node {target[:8]}", True, detail, affected=tuple(hosts), at=killed_at)

    async def _hosts_on(self, node_id: str, busy: Sequence[str]) -> list[str]:
        """The busy sessions whose host actor runs on ``node_id``."""
        namespace = self.engine.namespace
        where: dict[str, str | None] = {}
        on_node = []
        for session_id in sorted(busy):
            name = self.engine.placement.host_name(session_id)
            if name not in where:
                where[name] = await _node_of(namespace, name)
            if where[name] == node_id:
                on_node.append(session_id)
        return on_node

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


async def _node_of(namespace: str, name: str) -> str | None:
    """The node of actor ``name``; ``None`` when it is absent or not answering."""
    import ray

    try:
        handle = ray.get_actor(name, namespace=namespace)
        return str(await asyncio.wait_for(handle.node_id.remote(), 10))
    except (ValueError, TimeoutError, ray.exceptions.RayError):
        return None


def _terminate_backends(config: PostgresStoreConfig) -> int:
    import psycopg

    with psycopg.connect(config.dsn, autocommit=True, connect_timeout=10) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    return sum(1 for (ok,) in rows if ok)
