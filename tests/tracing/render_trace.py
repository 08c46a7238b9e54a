"""Print the trace tree of real session turns (the one in docs/tracing.md).

A built-in loop agent on a local Ray: a turn with two reads, then a refund that
waits for approval and is approved. Every host and executor exports its spans
to the test sink actor; the tree is rendered from what arrived.

Usage: python -m tests.tracing.render_trace <scratch dir>
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import ray

from dex_agents_ray import AgentSessionClient
from dex_agents_ray.engine import FlowEngine
from tests.tracing.agents import build_flow
from tests.tracing.support import render_tree, start_sink


async def _until(probe, timeout: float = 60):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not (value := await probe()):
        if time.monotonic() > deadline:
            raise AssertionError("not reached")
        await asyncio.sleep(0.1)
    return value


async def main(scratch: str) -> None:
    namespace = "render-trace"
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        namespace=namespace,
        log_to_driver=False,
    )
    sink = start_sink(namespace)
    flow = build_flow(namespace, scratch)
    engine = await FlowEngine.start(
        [flow], store=str(Path(scratch) / "engine.db"), namespace=namespace
    )
    sessions = AgentSessionClient(engine.client, flow)
    try:
        await sessions.start_session("session-42", "two lookups")

        async def turns(n: int) -> bool:
            state = (await sessions.get_agent_snapshot("session-42")).state
            return state is not None and state.turn_count >= n and state.active_turn_id is None

        await _until(lambda: turns(1))
        await sessions.send_user_message("session-42", "refund")

        async def interrupt():  # type: ignore[no-untyped-def]
            return (await sessions.get_agent_snapshot("session-42")).pending_interrupts

        (pending,) = await _until(interrupt)
        await sessions.resolve_interrupt("session-42", pending.interrupt_id, approved=True)
        await _until(lambda: turns(2))

        async def spans():  # type: ignore[no-untyped-def]
            got = await sink.spans.remote()
            return got if len(got) >= 10 else None

        got = await _until(spans)
        hosts = {s["pid"] for s in got if s["name"].startswith(("invoke_agent", "chat"))}
        names = {pid: "host" for pid in hosts}
        executors = sorted({s["pid"] for s in got} - hosts)
        names.update({pid: f"executor {n}" for n, pid in enumerate(executors, start=1)})
        print(render_tree(got, names))
    finally:
        await engine.shutdown(stop_hosts=True)
        ray.shutdown()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
