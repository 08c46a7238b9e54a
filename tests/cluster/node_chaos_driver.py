"""A bounded chaos campaign with node kills, on PostgreSQL, on a loopback cluster
(run as its own process).

Starts a throwaway PostgreSQL server and ``ray.cluster_utils.Cluster`` (a head and
two worker nodes offering the ``sessions`` resource that every host actor and the
scheduler need, so they all run on worker nodes), then runs the campaign agent of
``tests.chaos.agents`` while seeded faults hit: worker nodes killed (raylet and
every process on it) and added back, session hosts, executors and the scheduler
killed, the server crash-restarted and its connections dropped. Prints one
``REPORT`` JSON line: the faults by kind, the violations, the node kills'
recovery times and the printed report.

Then ``run_eval`` over the same cluster, its session hosts on the worker nodes,
with a worker node killed mid-run: the report says how each case ended and how
often each model and tool call ran.

Usage: python -m tests.cluster.node_chaos_driver <state dir> <faults> <seed>
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import uuid
from datetime import timedelta
from pathlib import Path

import psycopg
import ray
from ray.cluster_utils import Cluster

from dex_agents_ray.engine import EngineOptions, FlowEngine, Placement
from dex_agents_ray.evals import (
    EvalCase,
    EvalProgress,
    approve_all,
    contains,
    run_eval,
    session_id_for,
)
from dex_agents_ray.testing import InvocationLog
from dex_agents_ray.testing._actors import named_actors
from dex_agents_ray.testing.chaos import (
    ChaosCampaign,
    FaultKind,
    LoopbackClusterNodes,
    wait_until_dead,
)
from tests.chaos.agents import TURNS, build_campaign_flow, invocations
from tests.cluster.failover_driver import FAST_HEALTH_CHECKS, _node_args
from tests.evals.agents import eval_flow
from tests.stores.postgres_server import find_bin_dir, running_server

EVAL_CASES = 40
KILL_AFTER_CASES = 6
EVAL_RUN = "through-a-node-kill"
EVAL_NAMESPACE = "node-eval"
EVAL_HOSTS = 4


async def _eval_through_a_node_kill(
    dsn: str, state_dir: Path, nodes: LoopbackClusterNodes
) -> dict[str, object]:
    """``run_eval`` with a worker node killed once a few cases are scored."""
    cases = [
        EvalCase(id=f"c{i}", turns=(f"c{i} refund please",), expected="refunded")
        if i % 4 == 2
        else EvalCase(id=f"c{i}", turns=(f"c{i} look",), expected=f"found c{i} look")
        for i in range(EVAL_CASES)
    ]
    scored = asyncio.Event()

    def progress(update: EvalProgress) -> None:
        if update.done >= KILL_AFTER_CASES:
            scored.set()

    async def kill_a_node() -> dict[str, object]:
        await scored.wait()
        # The worker node with the most of the run's hosts.
        where: dict[str, list[str]] = {}
        for name in named_actors(EVAL_NAMESPACE, "dexhost:"):
            node = await ray.get_actor(name, namespace=EVAL_NAMESPACE).node_id.remote()
            where.setdefault(str(node), []).append(name)
        target = max(nodes.killable(), key=lambda n: len(where.get(n, [])))
        hosts = set(where.get(target, []))
        placement = Placement(shared_hosts=EVAL_HOSTS)
        affected = sorted(
            case.id
            for case in cases
            if placement.host_name(session_id_for(EVAL_RUN, case.id)) in hosts
        )
        await nodes.kill(target)
        dead = await wait_until_dead(target)
        await nodes.add()
        return {"killed": target, "declared_dead_seconds": dead, "affected_cases": affected}

    killer = asyncio.create_task(kill_a_node())
    report = await run_eval(
        eval_flow(str(state_dir)),
        cases,
        run_id=EVAL_RUN,
        concurrency=8,
        scorers=[contains()],
        interrupts=approve_all(),
        out=state_dir / "out",
        progress=progress,
        engine_options=EngineOptions(
            store=dsn,
            namespace=EVAL_NAMESPACE,
            # At most three of the run's hosts and its scheduler on one node.
            host_resources={"sessions": 0.3},
            shared_hosts=EVAL_HOSTS,
        ),
    )
    kill = await asyncio.wait_for(killer, 120)
    runs = {
        name: InvocationLog(state_dir / f"{name}.log").entries()
        for name in ("model", "lookup", "refund")
    }
    rows = [json.loads(x) for x in (state_dir / "out" / "results.jsonl").read_text().splitlines()]
    return {
        **kill,
        "counts": report.summary()["counts"],
        "scored_case_ids": sorted(r["case_id"] for r in rows),
        "passed": sum(1 for r in rows if r.get("passed")),
        "not_passed": {r["case_id"]: r.get("answer") for r in rows if not r.get("passed")},
        "repeated": {
            name: sorted({e for e in entries if entries.count(e) > 1})
            for name, entries in runs.items()
        },
        "calls": {name: len(entries) for name, entries in runs.items()},
        "refunds": runs["refund"],
    }


WEIGHTS = {
    FaultKind.NODE: 2.0,
    FaultKind.SESSION_HOST: 2.0,
    FaultKind.TOOL_EXECUTOR: 2.0,
    FaultKind.SCHEDULER: 1.0,
    FaultKind.POSTGRES_RESTART: 1.0,
    FaultKind.STORE_CONNECTIONS: 1.0,
}


async def main(state_dir: Path, faults: int, seed: int) -> None:
    logging.getLogger("dex_agents_ray").setLevel(logging.CRITICAL)
    logging.getLogger("psycopg").setLevel(logging.CRITICAL)
    bin_dir = find_bin_dir()
    if bin_dir is None:
        raise SystemExit("PostgreSQL is not installed: run scripts/services")
    worker_args = _node_args({"sessions": 1})
    with running_server(bin_dir) as server:
        database = f"nodes_{uuid.uuid4().hex[:8]}"
        # The eval's engine gets a database of its own: the campaign's engine (another
        # namespace) stays up meanwhile, and a host of it restarted by the eval's node
        # kill resumes every run of its slot in its store, the eval's too if they shared
        # one, so two hosts would take turns with one session.
        eval_database = f"{database}_eval"
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {database}")
            conn.execute(f"CREATE DATABASE {eval_database}")
        cluster = Cluster(
            initialize_head=True,
            head_node_args={
                **_node_args({"head": 1}),
                "num_cpus": 2,
                "_system_config": FAST_HEALTH_CHECKS,
            },
        )
        for _ in range(2):
            cluster.add_node(**worker_args)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, namespace="node-chaos", log_to_driver=False)
        flow = build_campaign_flow(state_dir)
        engine = await FlowEngine.start(
            [flow],
            store=server.dsn(database),
            namespace="node-chaos",
            host_resources={"sessions": 0.01},
            passivate_after=timedelta(seconds=1),
        )

        async def restart() -> None:
            await asyncio.to_thread(server.restart, "immediate")

        nodes = LoopbackClusterNodes(cluster, resources={"sessions": 1})
        try:
            campaign = ChaosCampaign(
                engine=engine,
                flow=flow,
                turns=TURNS,
                sessions=4,
                faults=faults,
                seed=seed,
                fault_weights=WEIGHTS,
                interval=(timedelta(seconds=0.3), timedelta(seconds=1)),
                invocations=lambda: invocations(state_dir),
                restart_postgres=restart,
                nodes=nodes,
            )
            report = await campaign.run()
            node = report.node_recovery_seconds()
            eval_dir = state_dir / "eval"
            eval_dir.mkdir()  # noqa: ASYNC240 - once, before the run
            evaluation = await _eval_through_a_node_kill(server.dsn(eval_database), eval_dir, nodes)
            print(
                "REPORT "
                + json.dumps(
                    {
                        "faults_by_kind": report.faults_by_kind,
                        "injected": len(report.injected),
                        "violations": [str(v) for v in report.violations],
                        "turns": report.turns,
                        "sessions": report.sessions,
                        "node_kills": sum(1 for f in report.injected if f.kind is FaultKind.NODE),
                        "node_recovery_seconds": node,
                        "node_faults_unrecovered": sum(
                            1
                            for f in report.injected
                            if f.kind is FaultKind.NODE
                            and f.affected_sessions
                            and f.recovered_seconds is None
                        ),
                        "scheduler_node_killed": any(
                            "the scheduler" in f.detail
                            for f in report.injected
                            if f.kind is FaultKind.NODE
                        ),
                        "printed": str(report),
                        "eval": evaluation,
                    }
                ),
                flush=True,
            )
        finally:
            await engine.shutdown(stop_hosts=True)
            await nodes.close()
            ray.shutdown()
            cluster.shutdown()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])))
