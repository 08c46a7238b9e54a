# tests/test_approvals.py: the test process builds the same Flow for its Client.
"""The spec's "Testing an adapter" example, with only the import root swapped,
then what it shows: the Worker's hosts ended with it, the replacement finished
the turn, and the approved write ran once."""

import os
import signal
from pathlib import Path

import pytest

from dex_agents_ray.testing import (
    EXECUTE_COMPLETED_EVENT,
    AgentTestStack,
    InvocationLog,
    wait_for_agent_snapshot,
    wait_until,
)
from tests.my_agent import build_flow

PACKAGE_DIR = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.usefixtures("ray_session")  # the suite's one local Ray


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_write_survives_a_worker_kill(tmp_path: Path) -> None:
    flow = build_flow()
    async with AgentTestStack(
        tmp_path,
        [flow],
        "tests.my_worker",
        worker_cwd=PACKAGE_DIR,
        worker_env={"MY_STATE_DIR": str(tmp_path)},
    ) as stack:
        sessions = stack.sessions(flow)
        worker = await stack.start_worker()
        await sessions.start_session("session-1", "refund order 7")
        interrupt = await wait_for_agent_snapshot(
            sessions,
            "session-1",
            lambda snapshot: next(iter(snapshot.pending_interrupts), None),
            description="a pending approval",
        )
        host_pid = int(await stack.engine.host("session-1").pid.remote())
        worker.kill()  # SIGKILL while the session waits
        await stack.start_worker()  # replacement Worker
        assert await sessions.resolve_interrupt("session-1", interrupt.interrupt_id, approved=True)
        history = await stack.read_step_history("session-1")
        executed = [
            entry.step_type for entry in history if entry.event_type == EXECUTE_COMPLETED_EVENT
        ]

        # Beyond the example: the kill took the Worker's host down with it ...
        await wait_until("the killed worker's host is gone", lambda: _gone(host_pid))
        assert worker.process.returncode == -signal.SIGKILL
        # ... and the replacement resumed the session and ran the write once.
        done = await wait_for_agent_snapshot(
            sessions,
            "session-1",
            lambda s: (
                s
                if s.state is not None and s.state.turn_count == 1 and not s.state.active_turn_id
                else None
            ),
            description="the turn's end",
            timeout=120,
        )
        assert done.messages[-1].text == "refunded order 7"
        assert InvocationLog(tmp_path / "refund.log").entries() == ["refund 7"]
        assert executed.count("StartAgentSession") == 1
        history = await stack.read_step_history("session-1")
        executed = [
            entry.step_type for entry in history if entry.event_type == EXECUTE_COMPLETED_EVENT
        ]
        assert executed.count("CallSingleAttemptTool") == 1
        assert int(await stack.engine.host("session-1").pid.remote()) != host_pid
