"""Crash injection against a running engine."""

from __future__ import annotations

import os
import signal
from collections.abc import Generator
from typing import Any

from dex_agents_ray.engine import FlowEngine
from dex_agents_ray.engine._faults import GATE_BEFORE_ACK_ENV


class KilledPid(int):
    """The PID of a killed process; awaiting it also gives the PID, so
    ``kill_flow_actor`` reads the same in sync and async tests."""

    def __await__(self) -> Generator[Any, None, int]:
        return int(self)
        yield  # pragma: no cover - makes this a generator


def kill_flow_actor(engine: FlowEngine, flow_id: str) -> KilledPid:
    """SIGKILL the process hosting ``flow_id``'s run, now; returns its PID.

    Ray restarts the host, which resumes the run from the store. Call it plainly
    or with ``await`` (the kill happens at the call either way).
    """
    import ray

    host = engine.host(flow_id)
    pid = int(ray.get(host.pid.remote()))
    os.kill(pid, signal.SIGKILL)
    engine.forget_host(flow_id)
    return KilledPid(pid)


def kill_process(pid: int) -> None:
    """SIGKILL ``pid`` (a Ray task worker, for example)."""
    os.kill(pid, signal.SIGKILL)


def gate_before_ack_env(state_dir: str, name: str) -> dict[str, str]:
    """Environment for a remote Step's ``runtime_env`` that makes its task wait
    at ``FileGate(state_dir, name)`` before it acknowledges its start."""
    return {GATE_BEFORE_ACK_ENV: f"{state_dir}:{name}"}
