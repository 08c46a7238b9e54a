"""A ``ray job submit`` job on the engine: start runs, let them finish, print results.

Run it on a cluster (or a local head from ``cluster/local-head.sh``)::

    cluster/local-head.sh
    RAY_AUTH_MODE=token .venv/bin/ray job submit --address http://127.0.0.1:8265 \\
        --working-dir . --runtime-env-json '{"excludes": [".venv", ".git", "tests"]}' \\
        -- "$PWD/.venv/bin/python" examples/engine_job.py --store /tmp/dex-jobs.db

(the entrypoint names the interpreter that has the package installed; on a
cluster whose image installs ``dex-agents-ray``, plain ``python`` does), or
directly with ``.venv/bin/python examples/engine_job.py`` (starts a local Ray).
The store path must be reachable from every node (a shared disk for SQLite).
"""

from __future__ import annotations

import argparse
import asyncio

from dex_agents_ray.cli._demo import Order, OrderPipeline
from dex_agents_ray.engine import FlowEngine


async def main(store: str | None, count: int) -> None:
    flow = OrderPipeline()
    engine = await FlowEngine.start([flow], store=store, namespace="examples")
    try:
        ids = [f"job-order-{i}" for i in range(count)]
        for i, flow_id in enumerate(ids):
            await engine.client.start_flow(flow, flow_id, Order(f"item-{i}", 1000 + i))
        for flow_id in ids:
            result = await engine.client.wait_for_flow(flow_id, timeout=300)
            print(flow_id, result.status.value, result.completions[0].decode(str))
    finally:
        await engine.shutdown(stop_hosts=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Run a few order pipelines on the engine.")
    parser.add_argument("--store", default=None)
    parser.add_argument("--count", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.store, args.count))
