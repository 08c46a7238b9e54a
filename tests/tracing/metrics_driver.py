"""The Ray metrics of a few session turns, read back from the node's Prometheus
endpoint (run as its own process: it needs its own Ray with the metrics agent
and a short report interval). Polls the endpoint until ``summary`` of the
samples reaches ``EXPECTED`` (or a deadline) and prints one ``REPORT`` JSON line
with the last summary.

Usage: python -m tests.tracing.metrics_driver <store path> <state dir>
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import time
import urllib.request

import ray

from dex_agents_ray import AgentSessionClient
from dex_agents_ray.engine import FlowEngine
from tests.tracing.agents import build_flow


def _key(name: str, labels: dict[str, str], *keep: str) -> str:
    return name + "{" + ",".join(f"{k}={labels.get(k, '')}" for k in keep) + "}"


def summary(samples: list[str]) -> dict[str, float]:
    """Each metric summed over Ray's own labels (worker, node), by our labels."""
    ours = {
        "ray_dex_agents_ray_steps_total": ("step_type", "outcome"),
        "ray_dex_agents_ray_tool_call_seconds_count": ("tool", "effect", "status"),
        "ray_dex_agents_ray_model_call_seconds_count": ("model", "step_type", "outcome"),
        "ray_dex_agents_ray_model_tokens_total": ("model", "kind"),
        "ray_dex_agents_ray_interrupts_raised_total": ("kind",),
        "ray_dex_agents_ray_interrupts_resolved_total": ("kind", "trigger"),
        "ray_dex_agents_ray_sessions_activated_total": (),
        "ray_dex_agents_ray_sessions_resident": (),
    }
    totals: dict[str, float] = {}
    for line in samples:
        head, _, value = line.rpartition(" ")
        name, _, rest = head.partition("{")
        if name not in ours:
            continue
        labels = dict(part.split("=", 1) for part in rest.rstrip("}").split(",") if "=" in part)
        labels = {k: v.strip('"') for k, v in labels.items()}
        key = _key(name.removeprefix("ray_dex_agents_ray_"), labels, *ours[name])
        totals[key] = totals.get(key, 0.0) + float(value)
    return totals


EXPECTED = {
    "steps_total{step_type=StartAgentSession,outcome=completed}": 1.0,
    "steps_total{step_type=RunModel,outcome=completed}": 4.0,
    "steps_total{step_type=CallTool,outcome=completed}": 2.0,
    "steps_total{step_type=CallSingleAttemptTool,outcome=completed}": 1.0,
    "steps_total{step_type=AwaitToolApproval,outcome=completed}": 1.0,
    "tool_call_seconds_count{tool=lookup_order,effect=read,status=succeeded}": 2.0,
    "tool_call_seconds_count{tool=refund_order,effect=non_idempotent_write,status=succeeded}": 1.0,
    "model_call_seconds_count{model=scripted,step_type=RunModel,outcome=ok}": 4.0,
    "interrupts_raised_total{kind=approval}": 1.0,
    "interrupts_resolved_total{kind=approval,trigger=interrupt_resolution}": 1.0,
    "sessions_activated_total{}": 1.0,
    "sessions_resident{}": 1.0,
}


def reached(totals: dict[str, float]) -> bool:
    tokens = [v for k, v in totals.items() if k.startswith("model_tokens_total{model=scripted")]
    return all(totals.get(k) == v for k, v in EXPECTED.items()) and len(tokens) == 2


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _samples(port: int) -> list[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return [
        line for line in text.splitlines() if "dex_agents_ray_" in line and not line.startswith("#")
    ]


async def _until(probe, what: str, timeout: float = 120):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        value = await probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout} s")
        await asyncio.sleep(0.2)


async def main(store: str, state_dir: str) -> None:
    from dex_agents_ray.engine._engine import task_worker_system_config

    port = _free_port()
    ray.init(
        address="local",  # a cluster of its own, never one already running
        num_cpus=2,
        include_dashboard=False,
        _metrics_export_port=port,
        _system_config={**task_worker_system_config(), "metrics_report_interval_ms": 500},
        namespace="metrics",
        log_to_driver=False,
    )
    flow = build_flow("metrics", state_dir, enabled=False)
    engine = await FlowEngine.start([flow], store=store, namespace="metrics")
    sessions = AgentSessionClient(engine.client, flow)
    try:
        await sessions.start_session("m1", "two lookups")

        async def turns(n: int):  # type: ignore[no-untyped-def]
            snapshot = await sessions.get_agent_snapshot("m1")
            state = snapshot.state
            return state is not None and state.turn_count >= n and state.active_turn_id is None

        await _until(lambda: turns(1), "turn 1")
        await sessions.send_user_message("m1", "refund")

        async def interrupt():  # type: ignore[no-untyped-def]
            return (await sessions.get_agent_snapshot("m1")).pending_interrupts

        (pending,) = await _until(interrupt, "the approval")
        await sessions.resolve_interrupt("m1", pending.interrupt_id, approved=True)
        await _until(lambda: turns(2), "turn 2")

        last: dict[str, float] = {}

        async def exported():  # type: ignore[no-untyped-def]
            nonlocal last
            last = summary(await asyncio.to_thread(_samples, port))
            return reached(last)

        try:
            await _until(exported, "the expected metrics on the endpoint", timeout=90)
        except AssertionError:
            pass  # the test reports what was there
        print("REPORT " + json.dumps({"totals": last}), flush=True)
    finally:
        await engine.shutdown(stop_hosts=True)
        ray.shutdown()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
