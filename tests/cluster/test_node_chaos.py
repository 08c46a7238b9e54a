"""Worker nodes killed under a chaos campaign on PostgreSQL, and under an evaluation.

The driver (``tests.cluster.node_chaos_driver``) runs on a loopback cluster of its
own (a head and two worker nodes; every session host and the scheduler need the
workers' ``sessions`` resource) against a throwaway PostgreSQL server: the
campaign's faults are node kills (a node added back after each), host, executor
and scheduler kills, server crash-restarts and dropped connections. Then
``run_eval`` runs 40 cases on the same cluster and a worker node is killed once
six are scored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dex_agents_ray import TOOL_CALL_NOT_RUN_ERROR_PREFIX
from dex_agents_ray.session import OUTCOME_UNKNOWN_TEXT
from dex_agents_ray.testing.chaos import ChaosCampaign, FaultKind
from tests.chaos.agents import TURNS
from tests.cluster.drivers import run_driver

pytestmark = pytest.mark.serial  # alone after the parallel run: see scripts/test

FAULTS = 14
SEED = 5


@pytest.mark.timeout(600)  # its driver has 540 s; a loaded machine can take more than 300
async def test_node_kills_and_postgres_faults_hold_every_invariant(tmp_path: Path) -> None:
    report = await run_driver(
        "tests.cluster.node_chaos_driver", str(tmp_path), str(FAULTS), str(SEED), timeout=540
    )
    print(report["printed"])

    assert report["violations"] == []
    assert report["injected"] >= FAULTS
    kinds = report["faults_by_kind"]
    assert kinds.get(FaultKind.NODE, 0) >= 1, kinds
    assert {FaultKind.POSTGRES_RESTART, FaultKind.STORE_CONNECTIONS} <= set(kinds), kinds
    assert report["node_faults_unrecovered"] == 0
    assert report["turns"] >= len(TURNS)

    evaluation: dict[str, Any] = report["eval"]
    print(evaluation)
    assert evaluation["declared_dead_seconds"] is not None
    assert evaluation["counts"] == {"scored": 40, "failed": 0, "needs_person": 0, "cancelled": 0}
    assert evaluation["scored_case_ids"] == sorted(f"c{i}" for i in range(40))
    # A case fails only where the kill caught its approved (single-attempt) write:
    # - stopped before it started (its executor was on the killed node, wherever its
    #   host was): the write is reported as not run (the model is told it may call
    #   again; this one answers with the error), and it never ran;
    # - started while its host was on the killed node: the host died before the
    #   result reached the store, so the write is ``outcome_unknown``: it ran at most
    #   once and is never sent again.
    # Every other case passes.
    refunds = evaluation["refunds"]
    affected = set(evaluation["affected_cases"])
    for case_id, answer in evaluation["not_passed"].items():
        assert int(case_id[1:]) % 4 == 2, (case_id, answer)  # a refund case
        ran = [entry for entry in refunds if entry.split()[0] == case_id]
        if OUTCOME_UNKNOWN_TEXT in (answer or ""):
            assert case_id in affected, (case_id, answer, affected)
            assert len(ran) <= 1, (case_id, refunds)
        else:
            assert TOOL_CALL_NOT_RUN_ERROR_PREFIX in (answer or ""), (case_id, answer)
            assert ran == [], (case_id, refunds)
    assert evaluation["passed"] + len(evaluation["not_passed"]) == 40
    # A call runs again only where it was running when its host's node died: each
    # repeated call is of a case whose session was on the killed node, one at most.
    assert affected, "the killed node hosted none of the run's sessions"
    repeated = [key.split()[0] for keys in evaluation["repeated"].values() for key in keys]
    assert set(repeated) <= affected, (repeated, affected)
    assert len(repeated) == len(set(repeated)), repeated
    assert evaluation["repeated"]["refund"] == []  # a write that asks approval never reruns


def test_a_node_fault_needs_the_clusters_nodes() -> None:
    with pytest.raises(ValueError, match="ChaosCampaign.nodes"):
        ChaosCampaign(
            engine=object(),  # type: ignore[arg-type]
            flow=object(),  # type: ignore[arg-type]
            turns=TURNS,
            fault_weights={FaultKind.NODE: 1.0},
        )
    with pytest.raises(TypeError, match="ClusterNodes"):
        ChaosCampaign(
            engine=object(),  # type: ignore[arg-type]
            flow=object(),  # type: ignore[arg-type]
            turns=TURNS,
            nodes=object(),  # type: ignore[arg-type]
        )
