"""The driver's memory when a Ray Dataset of cases streams through ``run_eval``.

For each ``--cases`` count (10,000 and 100,000 by default) a fresh driver process
(its own local Ray) builds a Ray Dataset of that many cases on Ray's workers
(``ray.data.range(n).map(...)``: the rows never exist in the driver as a list),
hands ``EvalCase.iter_dataset(dataset)`` to ``run_eval(out=...)`` and prints its
peak RSS (``VmHWM`` from ``/proc/self/status``) and its RSS before and after the
run. Then the two peaks and their difference; the target is 100,000 within
50 MiB of 10,000.

By default each case takes the light path: everything ``run_eval`` does with a
case (reading it from the stream, the duplicate check, ``cases.jsonl``, the
slot, scoring with a real scorer, ``results.jsonl``, the progress and summary,
the report read back from the file, ``results.parquet``) except the session,
whose driver (``drive_session``) answers at once. ``--sessions`` drives a real
session per case instead (a scripted model, one call each: about 50x slower).
``--list`` reads the dataset into a list first (``EvalCase.from_dataset``, every
row in the driver, and the rows kept in memory for the report): the way before
streams, for comparison.

    .venv/bin/python benchmarks/eval_dataset_rss.py [--cases 10000 100000]
        [--concurrency 64] [--sessions] [--list]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.peers.ray_env import use_repository  # noqa: E402

use_repository()

from dex_agents_ray import AgentSessionFlow  # noqa: E402
from dex_agents_ray.builtin_loop import (  # noqa: E402
    AgentDefinition,
    ModelRequest,
    ScriptedModelClient,
    ScriptedModelReply,
    builtin_agent_session_flow,
)
from dex_agents_ray.evals import EvalCase, run_eval  # noqa: E402

MIB = 1024 * 1024
TARGET_MIB = 50


def answer(request: ModelRequest) -> ScriptedModelReply:
    return ScriptedModelReply(text=f"answered {ScriptedModelClient.user_texts(request)[-1]}")


def bench_flow() -> AgentSessionFlow:
    agent = AgentDefinition(name="rss", instructions="Answer.", model=ScriptedModelClient(answer))
    return builtin_agent_session_flow(agent, flow_type="EvalDatasetRss")


def case_row(row: dict[str, Any]) -> dict[str, Any]:
    """A dataset row (on a Ray worker): one case."""
    index = int(row["id"])
    return {"id": f"case-{index:06d}", "input": f"question {index}", "expected": "answered"}


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _light_path() -> None:
    """Make the session's driver answer at once (the rest of run_eval is unchanged)."""
    from dex_agents_ray.evals import _runner
    from dex_agents_ray.evals._driver import SessionOutcome

    async def answered(*args: Any, **kwargs: Any) -> SessionOutcome:
        return SessionOutcome(status="done", snapshot=None)

    _runner.drive_session = answered  # type: ignore[assignment]


def passes(sample: Any) -> bool:
    """A scorer (a real one runs per case; its answer is empty on the light path)."""
    return sample.case.expected == "answered"


async def child(args: argparse.Namespace) -> dict[str, Any]:
    import psutil
    import ray

    count = args.child
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    context.print_on_execution_start = False
    if not args.sessions:
        _light_path()
    workdir = Path(tempfile.mkdtemp(prefix="eval-rss-"))
    dataset = ray.data.range(count).map(case_row)
    process = psutil.Process()
    before = process.memory_info().rss
    start = time.perf_counter()
    cases = EvalCase.from_dataset(dataset) if args.list else EvalCase.iter_dataset(dataset)
    report = await run_eval(
        bench_flow(),
        cases,
        run_id=f"rss-{count}",
        concurrency=args.concurrency,
        scorers=[passes],
        out=workdir / "out",
        store=workdir / "engine.db",
        namespace=f"rss-{uuid.uuid4().hex[:8]}",
    )
    wall = time.perf_counter() - start
    passed = sum(1 for row in report.results if row.passed)
    result = {
        "cases": count,
        "rows": len(report.results),
        "passed": passed,
        "wall_s": wall,
        "rss_before": before,
        "rss_after": process.memory_info().rss,
        "peak_rss": _status_kib("VmHWM") * 1024,
        # What the RSS at the end is made of: the process's own memory, and the
        # pages of Ray's shared object store (the dataset's blocks) it mapped.
        "rss_anon": _status_kib("RssAnon") * 1024,
        "rss_shmem": _status_kib("RssShmem") * 1024,
    }
    ray.shutdown()
    return result


def run_child(args: argparse.Namespace, count: int) -> dict[str, Any]:
    command = [
        sys.executable,
        __file__,
        "--child",
        str(count),
        "--concurrency",
        str(args.concurrency),
    ]
    if args.sessions:
        command.append("--sessions")
    if args.list:
        command.append("--list")
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"the {count}-case driver failed:\n{done.stdout}\n{done.stderr}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, nargs=2, default=[10_000, 100_000])
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--sessions", action="store_true", help="a real session per case")
    parser.add_argument("--list", action="store_true", help="EvalCase.from_dataset, not a stream")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(asyncio.run(child(args))), flush=True)
        return
    path = "real sessions" if args.sessions else "the light path (no session)"
    source = "a list (EvalCase.from_dataset)" if args.list else "EvalCase.iter_dataset"
    print(f"run_eval over {source}, concurrency {args.concurrency}, {path}")
    results = []
    for count in args.cases:
        result = run_child(args, count)
        results.append(result)
        print(
            f"{count:>7,} cases: peak RSS {result['peak_rss'] / MIB:.1f} MiB "
            f"(RSS {result['rss_before'] / MIB:.1f} MiB before the run, "
            f"{result['rss_after'] / MIB:.1f} MiB after: {result['rss_anon'] / MIB:.1f} MiB "
            f"its own, {result['rss_shmem'] / MIB:.1f} MiB object store pages); "
            f"{result['rows']:,} rows, "
            f"{result['passed']:,} passed, {result['wall_s']:.1f} s "
            f"({count / result['wall_s']:.0f} cases/s)",
            flush=True,
        )
    small, large = results
    difference = (large["peak_rss"] - small["peak_rss"]) / MIB
    growth = (large["rss_after"] - large["rss_before"]) - (small["rss_after"] - small["rss_before"])
    print(
        f"peak RSS difference {large['cases']:,} - {small['cases']:,}: {difference:.1f} MiB "
        f"(target <= {TARGET_MIB} MiB: {'met' if difference <= TARGET_MIB else 'NOT met'}); "
        f"growth over the run differs by {growth / MIB:.1f} MiB",
        flush=True,
    )


if __name__ == "__main__":
    main()
