"""Node failover time: kill the node that hosts a run; time until it answers elsewhere.

Runs ``tests/cluster/failover_driver.py`` (a three-node ``ray.cluster_utils.Cluster``
on loopback with fast health checks: 500 ms period, 2 failures) ``--rounds`` times,
each in a fresh process, and prints the medians of: the time until Ray declares
the killed node dead, and the time until the run answers a client call from a
surviving node (nothing lost: the driver checks the run's state and result).

    .venv/bin/python benchmarks/node_failover.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]


def one_round() -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(_ROOT), "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    with tempfile.TemporaryDirectory(prefix="dex-failover-") as directory:
        done = subprocess.run(
            [sys.executable, "-m", "tests.cluster.failover_driver", f"{directory}/f.db"],
            cwd=_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    reports = [line for line in done.stdout.splitlines() if line.startswith("REPORT ")]
    if done.returncode != 0 or not reports:
        raise RuntimeError(f"failover driver failed ({done.returncode}): {done.stderr[-2000:]}")
    report: dict[str, float] = json.loads(reports[-1].removeprefix("REPORT "))
    return report


def main(rounds: int) -> None:
    reports = [one_round() for _ in range(rounds)]
    dead = statistics.median(r["node_declared_dead_seconds"] for r in reports)
    answered = statistics.median(r["failover_seconds"] for r in reports)
    print(f"\nnode failover, {rounds} round(s), medians:")
    print(f"  killed node declared dead after {dead:.2f} s")
    print(f"  run answered from a surviving node {answered:.2f} s after the kill")
    print(f"  (all rounds: {[r['failover_seconds'] for r in reports]})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3)
    main(parser.parse_args().rounds)
