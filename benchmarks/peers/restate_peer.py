"""Restate: restate-server and the workload as a Restate service under hypercorn.

restate-server is the binary of the npm package ``@restatedev/restate-server``
(``scripts/install-restate`` puts it in ``.venv/restate/``; ``RESTATE_SERVER_BIN``
names another). It runs a single node with its default storage (the local log and
partition state on RocksDB, WAL fsync, group commit), so every journal entry is as
durable as a Restate deployment makes it. The service (``restate_service.py``) runs
in a second process under hypercorn; the server invokes it over HTTP and journals
each ``ctx.run`` (one step) before the handler continues. A session is one
invocation: the benchmark process is only the ingress's HTTP client, one POST per
session answered when the invocation ends.

Most of the work happens in the server and the service, so both are
``helper_processes``: their CPU counts in ``cpu_ms_per_step`` and their peak RSS in
``peak_rss_mb``. hypercorn runs with ``--workers 0`` so that the service is that one
process (with workers it spawns a child that does the work, and the parent's CPU
would say nothing). It is stopped with SIGINT: the Restate app takes SIGTERM over
for its own invocations, and hypercorn then never exits on it.

Every port (ingress, admin API, the node's own port and the service's) is a free
loopback port chosen at start; the server's base directory is in the job's
workdir, and both processes are stopped (signalled, killed after a timeout) when
the job ends, or killed by Linux if the job's process dies first. restate-server 1.7
asks GitHub for its latest release once at start (nothing in its configuration
turns that off); offline the lookup fails and the server goes on. No variants.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import aiohttp

# The service runs under hypercorn in its own process: import both here so that a job
# without them reports them missing (skipped) before anything starts.
import hypercorn  # noqa: F401
import restate  # noqa: F401

from .workload import TOOLS, TURNS, PeerUnavailable

# Distributions whose versions a job reports (restate-server's comes from the binary).
PACKAGES: tuple[str, ...] = ("restate-sdk", "hypercorn")

SERVER_ENV = "RESTATE_SERVER_BIN"
"""Names a restate-server binary to use instead of the one scripts/install-restate put in."""

_REPO_ROOT = Path(__file__).resolve().parents[2]
_INSTALL_DIR = _REPO_ROOT / ".venv" / "restate"
_INSTALL_HINT = f"run scripts/install-restate, or set {SERVER_ENV}"
_SERVICE_APP = "benchmarks.peers.restate_service:app"
_MESSAGES_PER_SESSION = TURNS * (3 + TOOLS)
"""A session's transcript: each turn's user message, model ask, tool results and answer."""
_START_TIMEOUT_S = 60.0
_STOP_TIMEOUT_S = 20.0
_SESSION_TIMEOUT_S = 600.0


def find_server() -> Path:
    """The restate-server binary to run.

    Raises:
        PeerUnavailable: No binary is installed (the job is reported skipped).
    """
    configured = os.environ.get(SERVER_ENV)
    if configured:
        path = Path(configured)
        if not os.access(path, os.X_OK):
            raise PeerUnavailable(f"{SERVER_ENV}={configured} is not an executable file")
        return path
    # npm installs only the platform package that matches this machine.
    pattern = "node_modules/@restatedev/restate-server-*/bin/restate-server"
    for candidate in sorted(_INSTALL_DIR.glob(pattern)):
        if os.access(candidate, os.X_OK):
            return candidate
    raise PeerUnavailable(f"restate-server is not installed ({_INSTALL_HINT})")


def _server_version(binary: Path) -> str:
    done = subprocess.run(
        [str(binary), "--version"], capture_output=True, text=True, timeout=30, check=False
    )
    # "restate-server 1.7.12"
    return done.stdout.strip().rpartition(" ")[2] or "unknown"


def _free_ports(count: int) -> list[int]:
    """``count`` distinct free loopback ports (held together while chosen, so distinct)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            ports.append(sock.getsockname()[1])
    return ports


@dataclass(frozen=True, kw_only=True)
class _Layout:
    """Where one job's server listens and keeps its files (all in the job's workdir)."""

    base_dir: Path
    config: Path
    server_log: Path
    service_log: Path
    ingress_port: int
    admin_port: int
    node_port: int

    @property
    def ingress(self) -> str:
        return f"http://127.0.0.1:{self.ingress_port}"

    @property
    def admin(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"


def _prepare(workdir: Path) -> _Layout:
    """Choose the server's ports and write its configuration file.

    Only these keys differ from restate-server's defaults: the three listeners on
    loopback ports of their own (no unix sockets), no telemetry, and warnings-only
    logs; storage, durability and batching stay as they come.
    """
    ingress, admin, node = _free_ports(3)
    layout = _Layout(
        base_dir=workdir / "restate-data",
        config=workdir / "restate.toml",
        server_log=workdir / "restate-server.log",
        service_log=workdir / "restate-service.log",
        ingress_port=ingress,
        admin_port=admin,
        node_port=node,
    )
    layout.config.write_text(
        f"""\
node-name = "dex-bench"
listen-mode = "tcp"
bind-address = "127.0.0.1:{node}"
advertised-address = "http://127.0.0.1:{node}/"
disable-telemetry = true
log-filter = "warn"

[admin]
bind-address = "127.0.0.1:{admin}"

[ingress]
bind-address = "127.0.0.1:{ingress}"
"""
    )
    return layout


def _stop_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that has Linux kill the child when the job process dies.

    ``run_job`` kills a job's process at its timeout, which runs no ``finally``: this
    keeps a server or service from outliving it. None off Linux.
    """
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_pdeathsig = 1

    def preexec() -> None:
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)

    return preexec


_NOWHERE = "http://127.0.0.1:9"
"""A loopback proxy address nothing listens on (the discard port)."""


def _server_env() -> dict[str, str]:
    """This environment less the RESTATE_* variables, which would override the
    configuration file (restate-server reads them over it), and with every
    outbound HTTP(S) request sent to a dead loopback proxy: the server looks for
    a newer release of itself at start (no setting turns that off), and the
    benchmark must reach nothing but this machine. Loopback is not proxied."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RESTATE_")}
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        env[name] = _NOWHERE
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost,::1"
    return env


def _tail(path: Path, limit: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-limit:]
    except OSError:
        return ""


async def _stop(processes: list[tuple[asyncio.subprocess.Process, signal.Signals]]) -> None:
    """Ask each process to stop with its signal, then kill those still running after
    the timeout."""
    for process, signum in processes:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signum)
    for process, _ in processes:
        try:
            await asyncio.wait_for(process.wait(), _STOP_TIMEOUT_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()


class RestatePeer:
    """One step is a journal entry of the session's invocation."""

    def __init__(
        self,
        http: aiohttp.ClientSession,
        layout: _Layout,
        server: asyncio.subprocess.Process,
        service: asyncio.subprocess.Process,
        service_url: str,
        server_version: str,
    ) -> None:
        self._http = http
        self._layout = layout
        self._server = server
        self._service = service
        self._service_url = service_url
        self.versions = {"restate-server": server_version}
        """Versions that no Python distribution reports (added to the job's)."""

    async def session(self, session_id: str) -> None:
        url = f"{self._layout.ingress}/agent/session"
        async with self._http.post(url, json=session_id) as response:
            if response.status != 200:
                body = await response.text()
                raise RuntimeError(f"session {session_id}: HTTP {response.status}: {body}")
            messages = await response.json()
        if messages != _MESSAGES_PER_SESSION:
            raise RuntimeError(f"session {session_id} ended with {messages} messages")

    def helper_processes(self) -> list[int]:
        """The server's and the service's PIDs (they do the work)."""
        return [self._server.pid, self._service.pid]

    async def wait_ready(self) -> None:
        """Wait until the server answers and knows the service."""
        deadline = time.monotonic() + _START_TIMEOUT_S
        await self._wait_ok(f"{self._layout.admin}/health", deadline)
        await self._wait_ok(f"{self._layout.ingress}/restate/health", deadline)
        service = self._service_url
        while True:
            # Refused until hypercorn listens; "force" makes a retry after a partial
            # registration replace it.
            self._check_running()
            async with self._http.post(
                f"{self._layout.admin}/deployments", json={"uri": service, "force": True}
            ) as response:
                if response.status < 300:
                    break
                detail = await response.text()
            if time.monotonic() > deadline:
                raise RuntimeError(f"registering {service} failed: {detail}")
            await asyncio.sleep(0.2)

    async def _wait_ok(self, url: str, deadline: float) -> None:
        while True:
            self._check_running()
            with contextlib.suppress(aiohttp.ClientError):
                async with self._http.get(url) as response:
                    if response.status == 200:
                        return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} not ready after {_START_TIMEOUT_S:.0f} s")
            await asyncio.sleep(0.1)

    def _check_running(self) -> None:
        for name, process, log in (
            ("restate-server", self._server, self._layout.server_log),
            ("hypercorn", self._service, self._layout.service_log),
        ):
            if process.returncode is not None:
                raise RuntimeError(f"{name} exited with {process.returncode}: {_tail(log)}")


def _open_logs(layout: _Layout) -> tuple[IO[bytes], IO[bytes]]:
    return layout.server_log.open("wb"), layout.service_log.open("wb")


@asynccontextmanager
async def open_system(workdir: Path, variant: str) -> AsyncIterator[RestatePeer]:
    binary = find_server()
    version = _server_version(binary)
    layout = _prepare(workdir)
    # The service's socket is bound here and handed to hypercorn, so its port is ours.
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    # hypercorn stops on SIGINT: the Restate app takes SIGTERM over (it only tells its
    # open invocations that the service is going away).
    processes: list[tuple[asyncio.subprocess.Process, signal.Signals]] = []
    server_log, service_log = _open_logs(layout)
    try:
        with listener, server_log, service_log:
            preexec = _stop_with_parent()
            server = await asyncio.create_subprocess_exec(
                str(binary),
                "--config-file",
                str(layout.config),
                "--base-dir",
                str(layout.base_dir),
                "--no-logo",
                env=_server_env(),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=server_log,
                stderr=server_log,
                preexec_fn=preexec,
            )
            processes.append((server, signal.SIGTERM))
            service = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "hypercorn",
                "--workers",
                "0",
                "--bind",
                f"fd://{listener.fileno()}",
                _SERVICE_APP,
                cwd=_REPO_ROOT,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=service_log,
                stderr=service_log,
                pass_fds=(listener.fileno(),),
                preexec_fn=preexec,
            )
            processes.append((service, signal.SIGINT))
            port = listener.getsockname()[1]
            service_url = f"http://127.0.0.1:{port}"
        # Unlimited connections: each session holds one request open for its whole run.
        connector = aiohttp.TCPConnector(limit=0)
        timeout = aiohttp.ClientTimeout(total=_SESSION_TIMEOUT_S)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
            peer = RestatePeer(http, layout, server, service, service_url, version)
            await peer.wait_ready()
            yield peer
    finally:
        await _stop(processes)
