"""Per-tool resources on a two-node Ray cluster on loopback (run as its own process).

The head offers no custom resource; a worker node offers ``special``. One run
fans out a call that needs ``special`` (it waits at a gate) and three that need
nothing. The light calls must finish while the special one still waits (shapes
never block each other), and the special call must run on the worker node.
Prints one ``REPORT`` JSON line.

Usage: python -m tests.cluster.resources_driver <store path> <state dir>
"""

from __future__ import annotations

import asyncio
import json
import sys

import ray
from ray.cluster_utils import Cluster

from dex_agents_ray.engine import FlowEngine
from dex_agents_ray.testing import FileGate
from tests.cluster.failover_driver import _node_args
from tests.engine.flows_pool import Fan, FanFlow


async def main(store: str, state_dir: str) -> None:
    cluster = Cluster(initialize_head=True, head_node_args=_node_args({"head": 1}))
    special = cluster.add_node(**_node_args({"special": 1}))
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, namespace="resources", log_to_driver=False)
    flow = FanFlow()
    engine = await FlowEngine.start([flow], store=store, namespace="resources")
    try:
        await engine.client.start_flow(
            flow, "special", Fan(state_dir, 1, gate="special", resources={"special": 1.0})
        )
        await FileGate(state_dir, "special-0").wait_until_reached(timeout=120)
        await engine.client.start_flow(flow, "light", Fan(state_dir, 3))
        light = await engine.client.wait_for_flow("light", timeout=120)
        still_waiting = not (await engine.client.describe_flow("special")).status.name.startswith(
            "COMPLETED"
        )
        FileGate(state_dir, "special-0").release()
        heavy = await engine.client.wait_for_flow("special", timeout=120)
        report = {
            "light": light.completions[0].decode(list[str]),
            "special": heavy.completions[0].decode(list[str]),
            "special_still_waiting": still_waiting,
            "special_node": special.node_id,
        }
        print("REPORT " + json.dumps(report), flush=True)
    finally:
        await engine.shutdown(stop_hosts=True)
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
