"""A real Ray head on loopback, started with ``ray start`` and token auth on."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RAY = str(Path(sys.executable).with_name("ray"))
_PORT_FLAGS = (
    "--port",
    "--dashboard-port",
    "--dashboard-agent-listen-port",
    "--dashboard-agent-grpc-port",
    "--metrics-export-port",
    "--runtime-env-agent-port",
    "--ray-client-server-port",
    "--node-manager-port",
    "--object-manager-port",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class RayHead:
    gcs_address: str
    dashboard_url: str
    env: dict[str, str]
    """The environment a client of this head needs (token auth, the repository on the path)."""


@contextmanager
def ray_head(num_cpus: int = 2) -> Iterator[RayHead]:
    """Start a head (own temp dir, free ports, a fresh token); stop it after."""
    temp_dir = tempfile.mkdtemp(prefix="rayh", dir="/tmp")
    ports = {flag: free_port() for flag in _PORT_FLAGS}
    env = {
        **os.environ,
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": secrets.token_hex(16),
        "PYTHONPATH": str(ROOT),
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    env.pop("RAY_ADDRESS", None)
    command = [
        RAY,
        "start",
        "--head",
        "--node-ip-address",
        "127.0.0.1",
        "--dashboard-host",
        "127.0.0.1",
        "--include-dashboard",
        "true",
        "--num-cpus",
        str(num_cpus),
        "--temp-dir",
        temp_dir,
        "--disable-usage-stats",
    ]
    for flag, port in ports.items():
        command += [flag, str(port)]
    subprocess.run(command, env=env, check=True, capture_output=True, timeout=120)
    head = RayHead(
        gcs_address=f"127.0.0.1:{ports['--port']}",
        dashboard_url=f"http://127.0.0.1:{ports['--dashboard-port']}",
        env=env,
    )
    try:
        yield head
    finally:
        # Not ``ray stop``: it stops every Ray on the machine, the test session's too.
        _kill_processes_of(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)


def _processes_of(temp_dir: str) -> list[int]:
    """PIDs of this head: those whose command line names ``temp_dir`` (GCS, raylet,
    the log monitor), and every process below them (the agents and workers, whose
    titles Ray rewrites)."""
    parents: dict[int, int] = {}
    matched: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        pid = int(entry)
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if temp_dir.encode() in f.read():
                    matched.add(pid)
            with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
                parents[pid] = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    found = set(matched)
    grew = True
    while grew:
        below = {pid for pid, parent in parents.items() if parent in found} - found
        found |= below
        grew = bool(below)
    return sorted(found)


def _kill_processes_of(temp_dir: str) -> None:
    """SIGKILL, as ``ray stop --force`` does: the head and its directory go anyway, and
    on SIGTERM the GCS, the raylet and the runtime-env agent of an idle head were
    still running 10 s later (measured), a wait of that much per head. The second
    round kills what the first missed (a worker that started meanwhile)."""
    for _ in range(2):
        pids = _processes_of(temp_dir)
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while pids and time.monotonic() < deadline:
            pids = [pid for pid in pids if _alive(pid)]
            time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
    except OSError:
        return False
