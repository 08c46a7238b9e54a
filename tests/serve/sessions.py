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
    """An engine with the example's three sessions settled (plus ``extra`` ones)."""
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    every = {**SESSIONS, **(extra or {})}
    for session_id, text in every.items():
        await sessions.start_session(session_id, text)
    await snapshot_when(sessions, "refund-7", has_interrupt, description="approval")
    await snapshot_when(sessions, "account-question", has_interrupt, description="question")
    for session_id in every.keys() - {"refund-7", "account-question"}:
        await snapshot_when(sessions, session_id, turn_done(1), description="answer")
    return engine, sessions
