"""An eval driver process for crash tests: joins the test's Ray and store, runs
``run_eval`` over a JSONL file of cases, prints ``REPORT <json>``.

Usage: python -m tests.evals.driver <gcs address> <namespace> <store> <state dir>
       <cases.jsonl> <out> <run id> <concurrency>
"""

from __future__ import annotations

import asyncio
import json
import sys

from dex_agents_ray.evals import EvalCase, approve_all, contains, run_eval
from tests.evals.agents import eval_flow


async def main(
    address: str,
    namespace: str,
    store: str,
    state_dir: str,
    cases_path: str,
    out: str,
    run_id: str,
    concurrency: str,
) -> None:
    import ray

    ray.init(address=address, namespace=namespace, log_to_driver=False)
    report = await run_eval(
        eval_flow(state_dir),
        EvalCase.from_jsonl(cases_path),
        run_id=run_id,
        concurrency=int(concurrency),
        scorers=[contains()],
        interrupts=approve_all(),
        out=out,
        store=store,
        namespace=namespace,
    )
    print("REPORT " + json.dumps(report.summary()), flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:9]))
