"""Node faults: a worker node of a multi-node Ray cluster killed, and one added back.

A campaign is given the cluster's killable nodes as a :class:`ClusterNodes`;
:class:`LoopbackClusterNodes` is the one for ``ray.cluster_utils.Cluster`` (worker
nodes as raylets of their own on this machine). The head node holds the GCS and
is never offered: a cluster without its GCS is out of scope.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

__all__ = ["ClusterNodes", "LoopbackClusterNodes", "wait_until_dead"]

_DEAD_WAIT_SECONDS = 60.0
"""How long to wait for the cluster to declare a killed node dead."""
_JOIN_WAIT_SECONDS = 60.0
"""How long a node added back may take to join the cluster."""
_ADD_TRIES = 3


@runtime_checkable
class ClusterNodes(Protocol):
    """The nodes a campaign may kill, and how to bring one back."""

    def killable(self) -> list[str]:
        """The IDs (hex) of the live worker nodes a fault may kill; never the head's."""
        ...

    async def kill(self, node_id: str) -> None:
        """Kill node ``node_id`` at once: its raylet and every process on it."""
        ...

    async def add(self) -> str:
        """Start a node like the killed ones; its ID once it has joined the cluster."""
        ...


class LoopbackClusterNodes:
    """:class:`ClusterNodes` over a ``ray.cluster_utils.Cluster`` on this machine.

    A node dies as a machine does: its raylet and every process under it (the
    workers, so the actors on it) are SIGKILLed together, then the cluster's
    ``remove_node(allow_graceful=False)`` takes the node's other processes.
    ``remove_node`` alone kills the raylet but leaves its workers to notice it
    (Ray checks once a second): meanwhile a host there would go on running its
    sessions beside the hosts that replace it, which is a network partition, not
    a node's death. A node added back is ``ray start --block`` in a session of
    its own, started from the event loop (``Cluster.add_node`` must run on the
    main thread and would hold the loop while the node starts), and killed with
    its whole process tree."""

    def __init__(
        self,
        cluster: Any,
        *,
        num_cpus: int = 1,
        resources: Mapping[str, float] | None = None,
        object_store_memory: int = 100 * 1024 * 1024,
    ) -> None:
        self.cluster = cluster
        self.num_cpus = num_cpus
        self.resources = dict(resources or {})
        self.object_store_memory = object_store_memory
        self._added: dict[str, asyncio.subprocess.Process] = {}

    def killable(self) -> list[str]:
        own = [str(node.node_id) for node in self.cluster.worker_nodes]
        added = [n for n, process in self._added.items() if process.returncode is None]
        return sorted(own + added)

    async def kill(self, node_id: str) -> None:
        process = self._added.pop(node_id, None)
        if process is not None:
            _kill_tree(process.pid)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
            return
        for node in list(self.cluster.worker_nodes):
            if str(node.node_id) == node_id:
                for raylet in node.all_processes.get("raylet", []):
                    _kill_tree(raylet.process.pid)
                await asyncio.to_thread(self.cluster.remove_node, node, False)
                return
        raise ValueError(f"no live worker node {node_id!r} in this cluster")

    async def add(self) -> str:
        """Start a node with ``ray start --block``; tried up to three times (on a
        loaded machine ``ray start`` may give up waiting for its raylet)."""
        failures: list[str] = []
        for _ in range(_ADD_TRIES):
            try:
                return await self._add_once()
            except (RuntimeError, TimeoutError) as error:
                failures.append(str(error))
        raise RuntimeError("no node could be added: " + " | ".join(failures))

    async def _add_once(self) -> str:
        import ray

        before = {n["NodeID"] for n in await asyncio.to_thread(ray.nodes)}
        log = tempfile.TemporaryFile()  # noqa: SIM115 - closed below, or by the process's end
        process = await asyncio.create_subprocess_exec(
            _ray_cli(),
            "start",
            f"--address={self.cluster.address}",
            f"--num-cpus={self.num_cpus}",
            f"--resources={json.dumps(self.resources)}",
            f"--object-store-memory={self.object_store_memory}",
            f"--dashboard-agent-listen-port={_free_port()}",
            "--disable-usage-stats",
            "--block",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        deadline = time.monotonic() + _JOIN_WAIT_SECONDS
        try:
            while time.monotonic() < deadline:
                if process.returncode is not None:
                    log.seek(0)
                    tail = log.read().decode(errors="replace").strip().splitlines()[-3:]
                    raise RuntimeError(
                        f"ray start exited with {process.returncode}: {' / '.join(tail)}"
                    )
                nodes = await asyncio.to_thread(ray.nodes)
                new = [n["NodeID"] for n in nodes if n["Alive"] and n["NodeID"] not in before]
                if new:
                    self._added[new[0]] = process
                    return str(new[0])
                await asyncio.sleep(0.1)
            _kill_tree(process.pid)
            raise TimeoutError(
                f"the node started by ray start did not join in {_JOIN_WAIT_SECONDS} s"
            )
        finally:
            log.close()

    async def close(self) -> None:
        """Kill the nodes this object added (the cluster's own go with ``Cluster.shutdown``)."""
        for node_id in list(self._added):
            await self.kill(node_id)


def _kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and every process under it, all at once (children first
    listed, so none is left to be reparented and go on)."""
    import psutil  # type: ignore[import-untyped]

    try:
        root = psutil.Process(pid)
        victims = [*root.children(recursive=True), root]
    except psutil.NoSuchProcess:
        return
    for victim in victims:
        with contextlib.suppress(psutil.NoSuchProcess):
            victim.kill()


def _ray_cli() -> str:
    """The ``ray`` command of this interpreter's environment."""
    beside = Path(sys.executable).with_name("ray")
    return str(beside) if beside.exists() else "ray"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def wait_until_dead(node_id: str, timeout: float = _DEAD_WAIT_SECONDS) -> float | None:
    """Seconds until the cluster lists ``node_id`` as dead; ``None`` when it has
    not within ``timeout`` (Ray's health checks decide how soon: by default a
    node is declared dead after 5 failed checks a few seconds apart)."""
    import ray

    start = time.monotonic()
    while time.monotonic() - start < timeout:
        nodes = await asyncio.to_thread(ray.nodes)
        if not any(n["NodeID"] == node_id and n["Alive"] for n in nodes):
            return time.monotonic() - start
        await asyncio.sleep(0.1)
    return None
