"""The support desk (``actors.support``) for the session inspector (``dex-agents-ray serve``).

    python -m examples.inspector_agent          # start three sessions in the default store
    dex-agents-ray serve --agent examples.inspector_agent:flow

The first command starts ``order-status`` (answered: where order A2 is),
``refund-a1`` (waits for approval of a refund, a ``non_idempotent_write``) and
``which-order`` (names no order: waits for an answer to an ``ask_user`` question
whose choices are the open orders), then exits: the sessions wait in the store,
holding no process. The second serves them to a browser. It is the desk the CLI
demos run; its model is scripted (``ScriptedModelClient``), so no key is needed.
"""

from __future__ import annotations

import asyncio
import sys

from dex.runtime_errors import FlowNotFoundError

from actors.support import scripted_support_model, support_flow
from dex_agents_ray import AgentSessionClient
from dex_agents_ray.builtin_loop import ScriptedModelClient
from dex_agents_ray.engine import FlowEngine

FLOW_TYPE = "InspectorSupportAgent"

flow = support_flow(ScriptedModelClient(scripted_support_model), flow_type=FLOW_TYPE)

SESSIONS = {
    "order-status": "Where is order A2?",
    "refund-a1": "Please refund 500 cents on order A1.",
    "which-order": "My parcel has not arrived yet.",
}


async def _until_waiting(sessions: AgentSessionClient, session_id: str) -> None:
    for _ in range(600):
        snapshot = await sessions.get_agent_snapshot(session_id)
        state = snapshot.state
        if snapshot.pending_interrupts or (
            state is not None and state.turn_count >= 1 and state.active_turn_id is None
        ):
            return
        await asyncio.sleep(0.1)
    raise TimeoutError(f"session {session_id} did not settle")


async def main(store: str | None = None) -> int:
    """Start the example sessions (idempotent: existing ones are left alone)."""
    engine = await FlowEngine.start([flow], store=store)
    try:
        sessions = AgentSessionClient(engine.client, flow)
        for session_id, text in SESSIONS.items():
            try:
                await engine.client.describe_flow(session_id)
                print(f"{session_id}: already there")
                continue
            except FlowNotFoundError:
                pass
            await sessions.start_session(session_id, text)
            await _until_waiting(sessions, session_id)
            print(f"{session_id}: started ({text!r})")
    finally:
        await engine.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(*sys.argv[1:2])))
