"""The loopback cluster of ``benchmarks/fleet.py`` and what it asks of the engine's actors.

A head and worker nodes offering the ``sessions`` resource (the set-up of
``tests/cluster/node_chaos_driver.py``), the store's location, where each of the
engine's named actors runs, the shared hosts started round-robin over the worker
nodes, and which sessions a host holds in memory.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from benchmarks.many_sessions import store_factories
from dex_agents_ray.engine import FlowEngine
from dex_agents_ray.testing._actors import EXECUTOR_PREFIX, SCHEDULER_NAME, named_actors
from dex_agents_ray.testing.chaos import LoopbackClusterNodes

HOST_PREFIX = "dexhost:"
HOST_SHARE = 0.01
"""The ``sessions`` share each host and the scheduler ask (the failover test's)."""
NODE_SESSIONS = 1.0
"""The ``sessions`` resource each worker node offers."""
ACTOR_CALL_TIMEOUT_S = 30.0


@asynccontextmanager
async def store_location(kind: str) -> AsyncIterator[str]:
    """A fresh SQLite file or a database on a throwaway PostgreSQL server."""
    async with store_factories([kind]) as factories:
        if kind not in factories:
            raise SystemExit("PostgreSQL is not installed: run scripts/services")
        location = factories[kind]()
        try:
            yield location
        finally:
            if kind == "sqlite":  # the file (and its WAL) in a directory of its own
                shutil.rmtree(Path(location).parent, ignore_errors=True)


@asynccontextmanager
async def loopback_cluster(args: argparse.Namespace) -> AsyncIterator[Any]:
    """A head and ``args.nodes`` worker nodes offering ``sessions``; Ray joined."""
    import ray
    from ray.cluster_utils import Cluster

    from dex_agents_ray.engine._engine import task_worker_system_config
    from tests.cluster.failover_driver import FAST_HEALTH_CHECKS, _node_args

    system: dict[str, Any] = {**task_worker_system_config()}
    if not args.ray_health_checks:
        system.update(FAST_HEALTH_CHECKS)
    cluster = Cluster(
        initialize_head=True,
        head_node_args={**_node_args({"head": 1}), "num_cpus": 2, "_system_config": system},
    )
    nodes = LoopbackClusterNodes(cluster, resources={"sessions": NODE_SESSIONS})
    try:
        for _ in range(args.nodes):
            cluster.add_node(**_node_args({"sessions": NODE_SESSIONS}))
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        yield cluster, nodes
    finally:
        await nodes.close()
        ray.shutdown()
        cluster.shutdown()


async def node_of(namespace: str, name: str) -> str | None:
    """The node of actor ``name``; ``None`` when it is gone or not answering."""
    import ray

    try:
        handle = ray.get_actor(name, namespace=namespace)
        return str(await asyncio.wait_for(handle.node_id.remote(), ACTOR_CALL_TIMEOUT_S))
    except (ValueError, TimeoutError, ray.exceptions.RayError):
        return None


async def inventory(namespace: str) -> dict[str, str | None]:
    """The engine's named actors (hosts, executors, the scheduler) -> their node."""
    names = [
        name
        for name in await asyncio.to_thread(named_actors, namespace)
        if name.startswith((HOST_PREFIX, EXECUTOR_PREFIX)) or name == SCHEDULER_NAME
    ]
    where = await asyncio.gather(*(node_of(namespace, name) for name in names))
    return dict(zip(names, where, strict=True))


async def hold_others(target: str, workers: list[str], where: dict[str, str | None]) -> list[Any]:
    """A placeholder actor on every worker node but ``target`` that takes all of the
    node's ``sessions`` but less than a host's share, so a host can only start on
    ``target``."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    @ray.remote(num_cpus=0)
    class Placeholder:
        def ready(self) -> bool:
            return True

    held = []
    for node in workers:
        if node == target:
            continue
        ours = sum(  # the actors that hold a share of ``sessions``: hosts, the scheduler
            1
            for name, n in where.items()
            if n == node and (name.startswith(HOST_PREFIX) or name == SCHEDULER_NAME)
        )
        amount = NODE_SESSIONS - HOST_SHARE * ours - HOST_SHARE / 2
        strategy = NodeAffinitySchedulingStrategy(node_id=node, soft=False)
        held.append(
            Placeholder.options(  # type: ignore[attr-defined]
                resources={"sessions": amount}, scheduling_strategy=strategy
            ).remote()
        )
    await asyncio.gather(*(h.ready.remote() for h in held))
    return held


async def spread_hosts(engine: FlowEngine, workers: list[str]) -> None:
    """Start the shared hosts round-robin over the worker nodes."""
    import ray

    first: dict[int, str] = {}
    for i in range(100_000):
        first.setdefault(engine.placement.slot(f"place-{i}"), f"place-{i}")
        if len(first) == engine.placement.shared_hosts:
            break
    for index, target in enumerate(workers):
        mine = [fid for slot, fid in sorted(first.items()) if slot % len(workers) == index]
        if not mine:
            continue
        held = await hold_others(target, workers, await inventory(engine.namespace))
        try:
            await asyncio.gather(*(engine.host(fid).ready.remote() for fid in mine))
        finally:
            for handle in held:
                ray.kill(handle)


async def resident_sessions(
    namespace: str, session_ids: list[str], host_name: Callable[[str], str], where: dict[str, Any]
) -> dict[str, str]:
    """The sessions a host holds in memory (its ``epoch_of``) -> the host's node."""
    import ray

    handles: dict[str, Any] = {}
    for name in {host_name(s) for s in session_ids}:
        try:
            handles[name] = ray.get_actor(name, namespace=namespace)
        except ValueError:
            continue

    async def held(session_id: str) -> bool:
        handle = handles.get(host_name(session_id))
        if handle is None:
            return False
        try:
            call = handle.epoch_of.remote(session_id)
            return await asyncio.wait_for(call, ACTOR_CALL_TIMEOUT_S) is not None
        except (TimeoutError, ray.exceptions.RayError):
            return False

    found = await asyncio.gather(*(held(s) for s in session_ids))
    return {
        s: str(where[host_name(s)])
        for s, yes in zip(session_ids, found, strict=True)
        if yes and where.get(host_name(s))
    }
