"""The example sessions the inspector tests show (``examples.inspector_agent``)."""

from __future__ import annotations

from typing import Any

from dex_agents_ray import AgentSessionClient
from examples.inspector_agent import SESSIONS, flow
from tests.session.polling import has_interrupt, snapshot_when, turn_done

TOKEN = "test-token-0123456789abcdef"
SCRIPT_TEXT = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'


async def start_example_sessions(
    engine_factory: Any, *, extra: dict[str, str] | None = None
) -> tuple[Any, AgentSessionClient]:
    """An engine with the example's three sessions settled (plus ``extra`` ones, each
    settled when it waits for a person or has answered)."""
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    every = {**SESSIONS, **(extra or {})}
    for session_id, text in every.items():
        await sessions.start_session(session_id, text)
    await snapshot_when(sessions, "refund-a1", has_interrupt, description="approval")
    await snapshot_when(sessions, "which-order", has_interrupt, description="question")
    await snapshot_when(sessions, "order-status", turn_done(1), description="answer")
    for session_id in every.keys() - SESSIONS.keys():
        await snapshot_when(
            sessions,
            session_id,
            lambda s: has_interrupt(s) or turn_done(1)(s),
            description="settled",
        )
    return engine, sessions
