"""A second driver on the job's head: submit a job through the Jobs SDK, then
approve the session the first job left waiting. Prints one JSON report line."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from ray.job_submission import JobStatus, JobSubmissionClient

from actors.support import flow
from dex_agents_ray import AgentSessionClient
from dex_agents_ray.engine import FlowEngine

ROOT = Path(__file__).resolve().parents[2]
EXCLUDES = [
    ".venv",
    ".git",
    ".mypy_cache",
    ".ruff_cache",
    "*.egg-info",
    "tests",
    ".dex-agents-ray",
    "docs",
    "benchmarks",
]


def submit_with_sdk(dashboard_url: str, store: str, namespace: str) -> dict[str, Any]:
    client = JobSubmissionClient(dashboard_url)
    job_id = client.submit_job(
        entrypoint=f"{sys.executable} examples/session_job.py --sessions 1 "
        f"--message 'Where is order A2?' --prefix sdk-session --store {store} "
        f"--namespace {namespace}",
        runtime_env={"working_dir": str(ROOT), "excludes": EXCLUDES},
    )
    deadline = time.monotonic() + 240
    while True:
        status = client.get_job_status(job_id)
        if status.is_terminal() or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    return {
        "sdk_status": str(status.value),
        "sdk_logs": client.get_job_logs(job_id),
        "sdk_succeeded": status == JobStatus.SUCCEEDED,
    }


async def approve_waiting(gcs_address: str, store: str, namespace: str) -> dict[str, Any]:
    engine = await FlowEngine.start(
        [flow], store=store, namespace=namespace, ray_address=gcs_address
    )
    try:
        sessions = AgentSessionClient(engine.client, flow)
        found = await engine.client.search_flows('ActiveStepTypes = "AwaitToolApproval"', 50)
        waiting = sorted(run.flow_id for run in found.flows)
        snapshot = await sessions.get_agent_snapshot(waiting[0])
        (interrupt,) = snapshot.pending_interrupts
        approved = await sessions.resolve_interrupt(
            waiting[0], interrupt.interrupt_id, approved=True
        )
        deadline = time.monotonic() + 120
        while True:
            snapshot = await sessions.get_agent_snapshot(waiting[0])
            state = snapshot.state
            if state is not None and state.active_turn_id is None and not state.last_turn_error:
                break
            if time.monotonic() > deadline:
                raise TimeoutError("the approved turn did not finish")
            await asyncio.sleep(0.1)
        answers = [m.text for m in snapshot.messages if m.role.value == "assistant" and m.text]
        return {"waiting": waiting, "approved": approved, "answer": answers[-1]}
    finally:
        await engine.shutdown(stop_hosts=True)


def main() -> None:
    dashboard_url, gcs_address, store, namespace = sys.argv[1:5]
    report = submit_with_sdk(dashboard_url, store, namespace)
    report.update(asyncio.run(approve_waiting(gcs_address, store, namespace)))
    print("REPORT " + json.dumps(report))


if __name__ == "__main__":
    main()
