"""The session demo: the support desk (``actors.support``) reads, asks approval, and
survives a crash.

1. Turn 1: "Where is order A1?" — the model calls ``lookup_order`` (a ``read``
   tool, its own ``CallTool`` Step on a Ray task) and answers.
2. Turn 2: "Refund 5 EUR on order A1." — the model calls ``refund_order``
   (a ``non_idempotent_write``), which needs approval: the session waits in
   ``AwaitToolApproval`` holding no process; the demo approves it.
3. While the refund runs, the demo SIGKILLs the session's host actor. The
   refund task dies with it. Ray restarts the host, the session resumes from
   the store, and because the single attempt had started, the call is recorded
   ``outcome_unknown`` — never run a second time. The model is told so.

The model is scripted unless ``OPENAI_API_KEY`` is set (then
``LiteLLMModelClient("openai/gpt-5-mini")``, or ``DEX_DEMO_MODEL``).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from actors.support import scripted_support_model, support_flow
from dex_agents_ray import AgentSessionClient, AgentSessionFlow, AgentSnapshot
from dex_agents_ray.builtin_loop import (
    ModelClient,
    ModelRequest,
    ScriptedModelClient,
    ScriptedModelReply,
    ToolCallContext,
)
from dex_agents_ray.engine import FlowEngine
from dex_agents_ray.testing import FileGate, InvocationLog, kill_flow_actor


def demo_model(script: Callable[[ModelRequest], ScriptedModelReply]) -> ModelClient:
    """LiteLLM when ``OPENAI_API_KEY`` is set (``DEX_DEMO_MODEL`` names the model),
    else ``script`` as a ``ScriptedModelClient``."""
    if os.environ.get("OPENAI_API_KEY"):
        from dex_agents_ray.litellm import LiteLLMModelClient

        return LiteLLMModelClient(os.environ.get("DEX_DEMO_MODEL", "openai/gpt-5-mini"))
    return ScriptedModelClient(script)


def build_support_flow(state_dir: str, model: ModelClient) -> AgentSessionFlow:
    """The support desk (``actors.support``); each real ``refund_order`` invocation is
    recorded under ``state_dir`` and then held at a gate while the demo crashes the host."""

    async def before_tool(tool_name: str, context: ToolCallContext) -> None:
        if tool_name == "refund_order":
            InvocationLog(os.path.join(state_dir, "refunds.log")).record(context.idempotency_key)
            # The payment call is "in flight" here; the demo crashes the host now.
            await FileGate(state_dir, "refund-in-flight").wait_for_release()

    return support_flow(model, flow_type="SupportAgent", before_tool=before_tool)


async def _until(check: Callable[[], Awaitable[Any]], what: str, timeout: float = 180.0) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = await check()
        if value:
            return value
        if loop.time() > deadline:
            raise TimeoutError(f"demo: {what} did not happen within {timeout:g} s")
        await asyncio.sleep(0.1)


def _turn_done(sessions: AgentSessionClient, session_id: str, turns: int) -> Any:
    async def check() -> AgentSnapshot | None:
        snapshot = await sessions.get_agent_snapshot(session_id)
        state = snapshot.state
        if state is not None and state.turn_count >= turns and state.active_turn_id is None:
            return snapshot
        return None

    return check


def _print_transcript(snapshot: AgentSnapshot) -> None:
    print("\ntranscript:")
    for message in snapshot.messages:
        if message.tool_name and message.role.value == "assistant":
            text = f"(calls {message.tool_name})"
        else:
            text = message.text or message.tool_output or ""
        print(f"  {message.sequence:>3} {message.role.value:<9} {text}")


async def _print_events(engine: FlowEngine, flow: AgentSessionFlow, session_id: str) -> None:
    page = await engine.client.list_stream_messages(session_id, flow.agent_events, 500)
    print("\nevents (AgentEvents stream):")
    for message in reversed(page.messages):
        event = message.value
        keys = f"{event.turn_id or '-'} {event.step_execution_id} #{event.attempt}"
        if event.type.value in ("text_delta", "reasoning_delta"):
            continue
        print(f"  {keys:<34} {event.type.value:<20} {event.payload}")


async def _demo(store: str | None) -> int:
    state_dir = tempfile.mkdtemp(prefix="dex-demo-")
    flow = build_support_flow(state_dir, demo_model(scripted_support_model))
    print("starting the engine (local Ray, SQLite store) ...", flush=True)
    engine = await FlowEngine.start(
        [flow], store=store, namespace=f"dex-demo-{uuid.uuid4().hex[:8]}"
    )
    sessions = AgentSessionClient(engine.client, flow)
    session_id = f"support-{uuid.uuid4().hex[:8]}"
    try:
        await sessions.start_session(session_id, "Where is order A1?")
        print(f"session {session_id} started; waiting for turn 1 ...", flush=True)
        await _until(_turn_done(sessions, session_id, 1), "turn 1")

        await sessions.send_user_message(session_id, "Please refund 5 EUR on order A1.")

        async def pending() -> Any:
            return (await sessions.get_agent_snapshot(session_id)).pending_interrupts

        interrupt = (await _until(pending, "the approval request"))[0]
        waiting = await engine.client.search_flows('ActiveStepTypes = "AwaitToolApproval"', 50)
        print(
            f"approval requested: {interrupt.tool_name} {interrupt.arguments} "
            f"(sessions waiting for a person: {[f.flow_id for f in waiting.flows]})"
        )
        await sessions.resolve_interrupt(session_id, interrupt.interrupt_id, approved=True)
        print("approved; the refund runs as its own single-attempt Step ...", flush=True)

        gate = FileGate(state_dir, "refund-in-flight")
        worker = await gate.wait_until_reached(timeout=180)
        host = await kill_flow_actor(engine, session_id)
        print(
            f"CRASH: killed the session's host actor (pid {host}) while the refund ran "
            f"in worker pid {worker} (Ray's raylet reports the killed worker next)",
            flush=True,
        )

        snapshot = await _until(_turn_done(sessions, session_id, 2), "turn 2")
        _print_transcript(snapshot)
        await _print_events(engine, flow, session_id)
        refunds = InvocationLog(os.path.join(state_dir, "refunds.log")).entries()
        history = await engine.client.read_step_history(session_id)
        statuses = sorted({h.step_execution_id for h in history if h.step_execution_id})
        print(f"\nStep executions: {', '.join(statuses)}")
        print(f"refund_order ran {len(refunds)} time(s) (idempotency key {refunds})")
        return 0 if len(refunds) == 1 else 1
    finally:
        await engine.shutdown(stop_hosts=True)


def run_session_demo(store: str | None = None) -> int:
    """Run the session demo; returns the process exit status."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    return asyncio.run(_demo(store))
