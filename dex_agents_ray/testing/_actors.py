"""SIGKILL of the engine's named actors: tool executors and the scheduler."""

from __future__ import annotations

import asyncio
import os
import signal

from dex_agents_ray.engine.actors._executor import EXECUTOR_PREFIX
from dex_agents_ray.engine.actors._handles import SCHEDULER_NAME

__all__ = ["EXECUTOR_PREFIX", "SCHEDULER_NAME", "kill_named_actor", "named_actors"]

_PID_TIMEOUT_SECONDS = 20.0


def named_actors(namespace: str, prefix: str = "") -> list[str]:
    """The live named actors of ``namespace`` whose names start with ``prefix``, sorted."""
    import ray

    return sorted(
        entry["name"]
        for entry in ray.util.list_named_actors(all_namespaces=True)
        if entry["namespace"] == namespace and str(entry["name"]).startswith(prefix)
    )


async def kill_named_actor(namespace: str, name: str) -> int | None:
    """SIGKILL the process of actor ``name``; ``None`` when it is absent or not
    answering (restarting after an earlier kill)."""
    import ray

    try:
        handle = ray.get_actor(name, namespace=namespace)
        pid = int(await asyncio.wait_for(handle.pid.remote(), _PID_TIMEOUT_SECONDS))
    except (ValueError, TimeoutError, ray.exceptions.RayError):
        return None
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return None
    return pid


async def kill_tool_executors(namespace: str) -> list[int]:
    """SIGKILL every executor actor of ``namespace``; returns the killed PIDs."""
    pids = [await kill_named_actor(namespace, n) for n in named_actors(namespace, EXECUTOR_PREFIX)]
    return [pid for pid in pids if pid is not None]


async def kill_scheduler(namespace: str) -> int | None:
    """SIGKILL the scheduler actor of ``namespace``; ``None`` when none runs."""
    return await kill_named_actor(namespace, SCHEDULER_NAME)
