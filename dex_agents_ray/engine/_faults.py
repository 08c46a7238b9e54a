"""Crash-injection points the engine itself honours (tests and users set them).

The engine imports nothing above it, so the gate here speaks the file protocol
of ``dex_agents_ray.testing.FileGate`` (``<name>.reached`` gets this process's
PID, ``<name>.released`` opens it) without importing that package.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

GATE_BEFORE_ACK_ENV = "DEX_AGENTS_RAY_GATE_BEFORE_ACK"
"""``<state_dir>:<gate name>`` makes a remote Step attempt wait at that gate
before it acknowledges its start (tests kill the process that runs it there, to
check that an attempt that never started is ``NOT_STARTED``)."""

GATE_BEFORE_STREAM_APPEND_ENV = "DEX_AGENTS_RAY_GATE_BEFORE_STREAM_APPEND"
"""``<state_dir>:<gate name>`` makes a host's Stream writes that are appended
alone (no commit took them) wait at that gate before they reach the store: a
slow append, as a store's retry or a busy connection pool makes one. Tests kill
the host there, to check that a committed Step's writes never wait behind its
commit. Read at every such append, so a process may set it for itself."""

_POLL_SECONDS = 0.01


def _gate_spec(variable: str) -> tuple[str, str] | None:
    """``(state_dir, gate name)`` from ``variable`` (``<state_dir>:<name>``), if set."""
    spec = os.environ.get(variable)
    if not spec:
        return None
    state_dir, name = spec.rsplit(":", 1)
    return state_dir, name


def gate_before_ack_spec() -> tuple[str, str] | None:
    """The gate this process's remote attempts wait at, if one is set."""
    return _gate_spec(GATE_BEFORE_ACK_ENV)


def wait_at_gate_before_ack() -> None:
    """Block at the configured gate until it is released (no-op when unset)."""
    spec = gate_before_ack_spec()
    if spec is not None:
        wait_at_gate(spec)


def gate_before_stream_append_spec() -> tuple[str, str] | None:
    """The gate this process's Stream appends alone wait at, if one is set."""
    return _gate_spec(GATE_BEFORE_STREAM_APPEND_ENV)


def wait_at_gate(spec: tuple[str, str]) -> None:
    """Log this process as having reached the gate ``spec`` (``(state_dir,
    name)``) and block until it is released."""
    state_dir, name = Path(spec[0]), spec[1]
    state_dir.mkdir(parents=True, exist_ok=True)
    with open(state_dir / f"{name}.reached", "a", encoding="utf-8") as file:
        file.write(f"{os.getpid()}\n")
        file.flush()
        os.fsync(file.fileno())
    while not (state_dir / f"{name}.released").exists():
        time.sleep(_POLL_SECONDS)
