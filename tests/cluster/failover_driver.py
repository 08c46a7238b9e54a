"""Node failover on a three-node Ray cluster on loopback (run as its own process).

Starts ``ray.cluster_utils.Cluster`` (a head and two worker nodes that offer
the ``sessions`` resource), runs a session-like flow whose host lands on a
worker node, SIGKILLs that node, and checks the run answers from the other one
with nothing lost. Prints one JSON line with the measured failover time.

Usage: python -m tests.cluster.failover_driver <store path>
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import time

import ray
from ray.cluster_utils import Cluster

from dex_agents_ray.engine import FlowEngine
from tests.engine.flows_crash import TimerFlow, TimerJob

FAST_HEALTH_CHECKS = {
    "health_check_period_ms": 500,
    "health_check_failure_threshold": 2,
    "health_check_timeout_ms": 500,
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _node_args(resources: dict[str, float]) -> dict[str, object]:
    return {
        "num_cpus": 1,
        "resources": resources,
        "include_dashboard": False,
        "dashboard_agent_listen_port": _free_port(),
        "object_store_memory": 100 * 1024 * 1024,
    }


async def main(store: str) -> None:
    cluster = Cluster(
        initialize_head=True,
        head_node_args={**_node_args({"head": 1}), "_system_config": FAST_HEALTH_CHECKS},
    )
    workers = [cluster.add_node(**_node_args({"sessions": 1})) for _ in range(2)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, namespace="failover", log_to_driver=False)
    flow = TimerFlow()
    engine = await FlowEngine.start(
        [flow], store=store, namespace="failover", host_resources={"sessions": 0.01}
    )
    try:
        await engine.client.start_flow(flow, "moving-run", TimerJob(seconds=3600))
        host = engine.host("moving-run")
        first_node = await host.node_id.remote()
        victim = next(w for w in workers if w.node_id == first_node)
        killed_at = time.monotonic()
        cluster.remove_node(victim, allow_graceful=False)
        while any(n["NodeID"] == first_node and n["Alive"] for n in ray.nodes()):  # noqa: ASYNC110
            await asyncio.sleep(0.05)  # until the cluster has declared the node dead
        declared_dead = time.monotonic() - killed_at
        woke = await engine.client.invoke_rpc(flow.wake, "moving-run", "after-failover")
        answered = time.monotonic() - killed_at
        result = await engine.client.wait_for_flow("moving-run", timeout=120)
        second_node = await engine.host("moving-run").node_id.remote()
        print(
            "REPORT "
            + json.dumps(
                {
                    "woke": woke,
                    "first_node": first_node,
                    "second_node": second_node,
                    "output": result.completions[0].decode(dict[str, object]),
                    "node_declared_dead_seconds": round(declared_dead, 2),
                    "failover_seconds": round(answered, 2),
                }
            ),
            flush=True,
        )
    finally:
        await engine.shutdown(stop_hosts=True)
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
