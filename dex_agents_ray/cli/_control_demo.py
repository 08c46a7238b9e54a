"""The turn-control demo on the support desk (``actors.support``): a user steers a
running turn, then stops one.

1. Turn 1: "Find my desk orders." The model calls ``search_orders``, a slow
   ``read`` tool. While it runs, the user queues "Only order A7, please." and
   steers the turn with it. The search runs to its end (a started call is never
   interrupted); the turn then ends ``turn_steered`` and turn 2 starts with the
   steered message: the model looks up A7 and answers.
2. Turn 3: "Refund 5 EUR on A7." The refund needs approval and the session waits
   for it, holding no process. The user presses Stop (``cancel_turn``): the
   approval is withdrawn (approving it now returns ``False``), the call records
   ``rejected`` with ``cancellation_reason`` ``turn_cancelled``, and the turn
   ends ``turn_cancelled`` without another model call.

The model is scripted unless ``OPENAI_API_KEY`` is set (as in ``demo``).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import uuid
from typing import Any

from actors.support import scripted_support_model, support_flow
from dex_agents_ray import AgentSessionClient, AgentSessionFlow
from dex_agents_ray.builtin_loop import ModelClient, ToolCallContext
from dex_agents_ray.cli._session_demo import (
    _print_events,
    _print_transcript,
    _turn_done,
    _until,
    demo_model,
)
from dex_agents_ray.engine import FlowEngine
from dex_agents_ray.testing import FileGate


def build_control_flow(state_dir: str, model: ModelClient) -> AgentSessionFlow:
    """The support desk (``actors.support``); ``search_orders`` waits at a gate the
    demo opens."""

    async def before_tool(tool_name: str, context: ToolCallContext) -> None:
        if tool_name == "search_orders":
            await FileGate(state_dir, "search-running").wait_for_release()

    return support_flow(model, flow_type="SupportControlAgent", before_tool=before_tool)


async def _demo(store: str | None) -> int:
    state_dir = tempfile.mkdtemp(prefix="dex-control-demo-")
    flow = build_control_flow(state_dir, demo_model(scripted_support_model))
    print("starting the engine (local Ray, SQLite store) ...", flush=True)
    engine = await FlowEngine.start(
        [flow], store=store, namespace=f"dex-control-demo-{uuid.uuid4().hex[:8]}"
    )
    sessions = AgentSessionClient(engine.client, flow)
    session_id = f"control-{uuid.uuid4().hex[:8]}"
    try:
        await sessions.start_session(session_id, "Find my desk orders.")
        gate = FileGate(state_dir, "search-running")
        await gate.wait_until_reached(timeout=180)
        print("turn 1: search_orders is running ...", flush=True)
        await sessions.send_user_message(session_id, "Only order A7, please.")
        queued = (await sessions.get_agent_snapshot(session_id)).queued_messages[0]
        steered = await sessions.steer_user_message(session_id, message_id=queued.message_id)
        print(f"STEER: moved the queued message {queued.text!r} into the running turn: {steered}")
        gate.release()
        snapshot = await _until(_turn_done(sessions, session_id, 2), "the steered turn")
        print(f"turn 2 (the steered message): {snapshot.messages[-1].text}", flush=True)

        await sessions.send_user_message(session_id, "Refund 5 EUR on A7.")

        async def pending() -> Any:
            return (await sessions.get_agent_snapshot(session_id)).pending_interrupts

        interrupt = (await _until(pending, "the approval request"))[0]
        print(f"turn 3: waiting for approval of {interrupt.tool_name} {interrupt.arguments}")
        stopped = await sessions.cancel_turn(session_id, interrupt.turn_id)
        approved = await sessions.resolve_interrupt(
            session_id, interrupt.interrupt_id, approved=True
        )
        print(f"STOP: cancel_turn({interrupt.turn_id!r}) = {stopped}; approving now = {approved}")

        async def ended() -> Any:
            snapshot = await sessions.get_agent_snapshot(session_id)
            state = snapshot.state
            return snapshot if state is not None and state.active_turn_id is None else None

        snapshot = await _until(ended, "the cancelled turn")
        _print_transcript(snapshot)
        await _print_events(engine, flow, session_id)
        return 0 if steered and stopped and not approved else 1
    finally:
        await engine.shutdown(stop_hosts=True)


def run_control_demo(store: str | None = None) -> int:
    """Run the turn-control demo; returns the process exit status."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    return asyncio.run(_demo(store))
