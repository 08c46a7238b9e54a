"""The long chaos campaign: >= 500 faults on SQLite and on PostgreSQL.

Runs ``dex_agents_ray.testing.chaos.ChaosCampaign`` over the campaign agent of
``tests/chaos/agents.py`` (every tool effect, an approval, a tool question and
``ask_user``, a durable wait with passivation, a tool task) on each store in
turn: ``--sessions`` sessions at a time, ``--faults`` faults each, one every
``--every`` seconds (drawn from the seed). On SQLite the faults are SIGKILLs of
session hosts, tool executors and the scheduler; on a throwaway PostgreSQL 15
server (``scripts/services`` installs it) also crash-restarts of the server
(``pg_ctl restart -m immediate``) and every store connection terminated.

With ``--nodes N`` the campaigns run on a loopback cluster (a head and N worker
nodes, ``ray.cluster_utils.Cluster``) whose worker nodes offer the ``sessions``
resource every session host and the scheduler need, and node kills join the
faults (``FaultKind.NODE``: a worker node killed with every process on it, then a
node added back; weight ``--node-weight``). The cluster's health checks are the
failover test's (a check every 500 ms, dead after 2 failures) unless
``--ray-health-checks`` keeps Ray's defaults.

Printed per store: faults by kind, sessions, turns, violations (the goal is
0), the time from each fault to the next completed turn, for node kills the
time to the affected sessions' next completed turns, and the fault log's
length; ``--log`` writes every fault of both campaigns to a file.

    .venv/bin/python benchmarks/chaos.py [--faults 500] [--sessions 4] [--seed 500]
        [--stores sqlite postgres] [--every 0.2 0.8] [--log faults.txt]
        [--nodes 2 [--node-weight 1] [--ray-health-checks]]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.peers.ray_env import use_repository  # noqa: E402

use_repository()


async def _campaign(
    store: Any, args: argparse.Namespace, restart: Any, name: str, nodes: Any = None
) -> Any:
    from dex_agents_ray.engine import FlowEngine
    from dex_agents_ray.testing.chaos import DEFAULT_FAULT_WEIGHTS, ChaosCampaign, FaultKind
    from tests.chaos.agents import TURNS, build_campaign_flow, invocations

    state_dir = Path(tempfile.mkdtemp(prefix=f"dex-chaos-{name}-"))
    flow = build_campaign_flow(state_dir, flow_type=f"Chaos{name.title()}")
    namespace = f"chaos-{name}-{uuid.uuid4().hex[:6]}"
    engine = await FlowEngine.start(
        [flow],
        store=store,
        namespace=namespace,
        passivate_after=timedelta(seconds=1),
        host_resources={"sessions": 0.01} if nodes is not None else None,
    )
    weights = dict(DEFAULT_FAULT_WEIGHTS)
    if restart is not None:
        weights[FaultKind.POSTGRES_RESTART] = 1.0
        weights[FaultKind.STORE_CONNECTIONS] = 1.0
    if nodes is not None:
        weights[FaultKind.NODE] = args.node_weight
    low, high = args.every
    campaign = ChaosCampaign(
        engine=engine,
        flow=flow,
        turns=TURNS,
        sessions=args.sessions,
        faults=args.faults,
        seed=args.seed,
        fault_weights=weights,
        interval=(timedelta(seconds=low), timedelta(seconds=high)),
        invocations=lambda: invocations(state_dir),
        restart_postgres=restart,
        session_prefix=name,
        max_sessions=100_000,
        nodes=nodes,
    )
    try:
        return await campaign.run()
    finally:
        await engine.shutdown(stop_hosts=True)


def _summary(name: str, report: Any) -> str:
    from dex_agents_ray.testing.chaos import FaultKind

    node = report.node_recovery_seconds()
    kills = [f for f in report.injected if f.kind is FaultKind.NODE]
    hit = [f for f in kills if f.affected_sessions]
    node_line = (
        f"  node kills: {len(kills)} ({sum('the scheduler' in f.detail for f in kills)} took "
        f"the scheduler), {len(hit)} with a turn in flight on the node; those sessions' next "
        f"completed turns after a median {node[len(node) // 2]:.2f} s, max {node[-1]:.2f} s "
        f"({len(hit) - len(node)} never recovered)\n"
        if node
        else (f"  node kills: {len(kills)}\n" if kills else "")
    )
    back = sorted(f.answered_seconds for f in hit if f.answered_seconds is not None)
    if back:
        node_line += (
            "    of which their first call after the kill answered (hosts back, runs loaded) "
            f"after a median {back[len(back) // 2]:.2f} s, max {back[-1]:.2f} s\n"
        )
    recover = report.recovery_seconds()
    median = recover[len(recover) // 2] if recover else float("nan")
    p95 = recover[int(len(recover) * 0.95)] if recover else float("nan")
    return (
        f"\n{name}: seed {report.seed}, {report.seconds:.0f} s\n"
        f"  faults injected: {len(report.injected)} "
        f"(+{len(report.faults) - len(report.injected)} with no target), "
        f"by kind {report.faults_by_kind}\n"
        f"  sessions: {report.sessions}, turns: {report.turns}\n"
        f"  time to the next completed turn after a fault: median {median:.2f} s, "
        f"p95 {p95:.2f} s, max {max(recover, default=float('nan')):.2f} s\n"
        + node_line
        + f"  drain after the last fault: {report.drain_seconds:.1f} s\n"
        f"  violations: {len(report.violations)}\n"
        + "".join(f"    {v}\n" for v in report.violations)
    )


async def main(args: argparse.Namespace) -> int:
    import psycopg
    import ray

    from tests.stores.postgres_server import find_bin_dir, running_server

    logging.getLogger("psycopg").setLevel(logging.CRITICAL)
    logging.getLogger("dex_agents_ray").setLevel(logging.CRITICAL)
    from dex_agents_ray.engine._engine import task_worker_system_config

    cluster = nodes = None
    if args.nodes:
        from ray.cluster_utils import Cluster

        from dex_agents_ray.testing.chaos import LoopbackClusterNodes
        from tests.cluster.failover_driver import FAST_HEALTH_CHECKS, _node_args

        system = {**task_worker_system_config()}
        if not args.ray_health_checks:
            system.update(FAST_HEALTH_CHECKS)
        cluster = Cluster(
            initialize_head=True,
            head_node_args={**_node_args({"head": 1}), "num_cpus": 2, "_system_config": system},
        )
        for _ in range(args.nodes):
            cluster.add_node(**_node_args({"sessions": 1}))
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        nodes = LoopbackClusterNodes(cluster, resources={"sessions": 1})
    else:
        ray.init(
            address="local",
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            _system_config=task_worker_system_config(),
        )
    reports = []
    try:
        if "sqlite" in args.stores:
            store = Path(tempfile.mkdtemp(prefix="dex-chaos-store-")) / "engine.db"
            reports.append(("sqlite", await _campaign(store, args, None, "sqlite", nodes)))
            print(_summary(*reports[-1]), flush=True)
        if "postgres" in args.stores:
            bin_dir = find_bin_dir()
            if bin_dir is None:
                raise SystemExit("PostgreSQL is not installed: run scripts/services")
            with running_server(bin_dir) as server:
                database = f"chaos_{uuid.uuid4().hex[:8]}"
                with psycopg.connect(server.dsn(), autocommit=True) as conn:
                    conn.execute(f"CREATE DATABASE {database}")

                async def restart() -> None:
                    await asyncio.to_thread(server.restart, "immediate")

                report = await _campaign(server.dsn(database), args, restart, "postgres", nodes)
                reports.append(("postgres", report))
                print(_summary(*reports[-1]), flush=True)
    finally:
        if nodes is not None:
            await nodes.close()
        ray.shutdown()
        if cluster is not None:
            cluster.shutdown()
    if args.log:
        Path(args.log).write_text(  # noqa: ASYNC240 - once, after the campaigns
            "".join(f"== {name}\n{report}\n" for name, report in reports), encoding="utf-8"
        )
    return 1 if any(r.violations for _, r in reports) else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--faults", type=int, default=500)
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--seed", type=int, default=500)
    parser.add_argument("--stores", nargs="+", default=["sqlite", "postgres"])
    parser.add_argument("--every", type=float, nargs=2, default=(0.2, 0.8), metavar=("MIN", "MAX"))
    parser.add_argument("--log", default=None)
    parser.add_argument("--nodes", type=int, default=0, help="worker nodes (0: one-node Ray)")
    parser.add_argument("--node-weight", type=float, default=1.0)
    parser.add_argument("--ray-health-checks", action="store_true")
    sys.exit(asyncio.run(main(parser.parse_args())))
