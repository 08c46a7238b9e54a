"""Crash injection against a running engine."""

from __future__ import annotations

import os
import signal
from typing import Any

from dex_agents_ray.engine._remote import GATE_BEFORE_ACK_ENV


async def kill_flow_actor(engine: Any, flow_id: str) -> int:
    """SIGKILL the process hosting ``flow_id``'s run; returns its PID.

    Ray restarts the host, which resumes the run from the store.
    """
    host = engine.host(flow_id)
    pid = int(await host.pid.remote())
    os.kill(pid, signal.SIGKILL)
    engine.forget_host(flow_id)
    return pid


def kill_process(pid: int) -> None:
    """SIGKILL ``pid`` (a Ray task worker, for example)."""
    os.kill(pid, signal.SIGKILL)


def gate_before_ack_env(state_dir: str, name: str) -> dict[str, str]:
    """Environment for a remote Step's ``runtime_env`` that makes its task wait
    at ``FileGate(state_dir, name)`` before it acknowledges its start."""
    return {GATE_BEFORE_ACK_ENV: f"{state_dir}:{name}"}
