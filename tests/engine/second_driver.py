"""A second driver process: connects to the test's Ray and store, acts, exits.

Usage: python -m tests.engine.second_driver <gcs address> <namespace> <store> <action> <flow id>
"""

from __future__ import annotations

import asyncio
import sys

from dex_agents_ray.engine import FlowEngine
from tests.engine.flows_crash import TimerFlow, TimerJob


async def main(address: str, namespace: str, store: str, action: str, flow_id: str) -> None:
    flow = TimerFlow()
    engine = await FlowEngine.start([flow], store=store, namespace=namespace, ray_address=address)
    if action == "start":
        await engine.client.start_flow(flow, flow_id, TimerJob(seconds=2))
    elif action == "wake":
        assert await engine.client.invoke_rpc(flow.wake, flow_id, "from-second-driver") is True
        await engine.client.wait_for_flow(flow_id, timeout=60)
    else:
        raise SystemExit(f"unknown action {action!r}")
    info = await engine.client.describe_flow(flow_id)
    print(f"{action}:{info.status.value}", flush=True)
    await engine.shutdown(stop_hosts=False)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
