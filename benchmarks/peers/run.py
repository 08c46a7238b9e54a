"""Run one peer job in this process and print one JSON line; or run one in a fresh process.

From the repository root, with a Python that has the ``bench`` extra for the peers::

    .venv/bin/python -m benchmarks.peers.run SYSTEM[:VARIANT] C [N]
    .venv/bin/python benchmarks/peers/run.py SYSTEM[:VARIANT] C [N]

SYSTEM is ``plain``, ``pydantic-ai`` (an unchanged Pydantic AI agent run plainly,
no durability), ``openai-agents`` (the same for an OpenAI Agents SDK agent),
``sqlite`` (``full``, ``normal``, ``group``), ``dbos`` (``default``, ``wal``),
``langgraph`` (``async``, ``sync``), ``restate`` or ``dex`` (this project,
``dex_engine.py``); without a variant the first one is used. C is
the number of concurrent sessions: 1 times N sequential sessions (default 10);
more runs C sessions at once. Each job uses a fresh temporary directory and 2
untimed warm-up sessions (see ``workload.py``). A system whose packages are not
installed (or whose server binary is missing: Restate's comes from
``scripts/install-restate``) prints ``{"system": ..., "C": ..., "skipped": reason}``.

Another benchmark calls :func:`run_job`, which runs each job in its own process so
that every job has its own peak RSS and nothing is shared between systems; or
:func:`run_paired`, two C=1 jobs in their own processes whose sessions alternate,
one at a time (``--paced``: each session waits for a ``go`` line on stdin), so
that both systems' figures come from the same minutes of a noisy machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import queue
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import IO, Any

PEER_SYSTEMS: tuple[str, ...] = (
    "plain",
    "sqlite:full",
    "sqlite:normal",
    "sqlite:group",
    "dbos:wal",
    "langgraph:async",
    "restate",
)
"""The jobs a comparison runs by default (each at C=1 and C=50)."""


@dataclass(frozen=True, kw_only=True)
class _Peer:
    module: str
    """The module in this package with ``open_system(workdir, variant)``."""
    variants: tuple[str, ...]
    """Accepted variants, the default first; empty when the system has none."""


_PEERS = {
    "plain": _Peer(module="plain", variants=()),
    "pydantic-ai": _Peer(module="pydantic_ai_peer", variants=()),
    "openai-agents": _Peer(module="openai_agents_peer", variants=()),
    "sqlite": _Peer(module="sqlite_floor", variants=("full", "normal", "group")),
    "dbos": _Peer(module="dbos_peer", variants=("default", "wal")),
    "langgraph": _Peer(module="langgraph_peer", variants=("async", "sync")),
    "restate": _Peer(module="restate_peer", variants=()),
    "dex": _Peer(
        module="dex_engine",
        variants=(
            "flow-shared",
            "flow-dedicated",
            "session-shared-ray",
            "session-shared-ray-nosockets",
            "session-shared",
            "session-dedicated",
            "session-shared-tasks",
            "pydantic-ai",
            "openai-agents",
            "flow-shared-postgres",
            "session-shared-postgres",
        ),
    ),
}
_REPO_ROOT = Path(__file__).resolve().parents[2]
_INSTALL_HINT = "pip install -c constraints.txt -e '.[bench]'"


class PeerJobError(RuntimeError):
    """A peer job's process failed or printed no result.

    Attributes:
        system: The job's ``SYSTEM[:VARIANT]``.
        returncode: The process's exit status; None when it was stopped at the timeout.
        output: The tail of what the process wrote to stderr (or stdout).
    """

    def __init__(self, system: str, returncode: int | None, output: str) -> None:
        status = "timed out" if returncode is None else f"exited with {returncode}"
        super().__init__(f"peer job {system!r} {status}: {output}")
        self.system = system
        self.returncode = returncode
        self.output = output


def _parse_system(system: str) -> tuple[_Peer, str]:
    """Split ``SYSTEM[:VARIANT]`` into the peer and its variant (the default if none)."""
    name, _, variant = system.partition(":")
    peer = _PEERS.get(name)
    if peer is None:
        raise ValueError(f"system must be one of {sorted(_PEERS)}, got {name!r}")
    if not peer.variants:
        if variant:
            raise ValueError(f"system {name!r} has no variants, got {variant!r}")
        return peer, ""
    variant = variant or peer.variants[0]
    if variant not in peer.variants:
        raise ValueError(f"{name} variant must be one of {list(peer.variants)}, got {variant!r}")
    return peer, variant


def _check_job(system: str, concurrency: int, sessions: int) -> None:
    _parse_system(system)
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    if sessions < 1:
        raise ValueError(f"sessions must be >= 1, got {sessions}")


def run_job(
    system: str,
    concurrency: int,
    sessions: int,
    python: str | None = None,
    *,
    timeout: timedelta = timedelta(minutes=15),
) -> dict[str, Any]:
    """Run one job in a fresh process and return its JSON result.

    Args:
        system: ``SYSTEM[:VARIANT]``, e.g. ``"sqlite:group"`` (see :data:`PEER_SYSTEMS`).
        concurrency: 1 for sequential sessions, each timed; more for that many at once.
        sessions: Sequential sessions timed at C=1 (unused at C>1).
        python: The interpreter to run the job with; None means this one
            (``sys.executable``). It needs the ``bench`` extra for DBOS and LangGraph.
        timeout: How long the job may take before its process is killed.

    Returns:
        The job's figures: ``system``, ``C``, ``sessions``, ``ms_per_step`` (median
        session time / 50), ``session_ms_median``, ``steps_per_s``,
        ``cpu_ms_per_step`` (all threads of the job's process), ``wall_s``,
        ``rss_after_warmup_mb``, ``peak_rss_mb`` and ``versions``; or ``system``,
        ``C`` and ``skipped`` (the reason) when the peer's packages (or server
        binary) are missing.

    Raises:
        ValueError: An unknown system or a count below 1 (nothing is run).
        PeerJobError: The job's process failed, timed out or printed no result.
    """
    _check_job(system, concurrency, sessions)
    if python is None:
        python = sys.executable
    elif "/" in python:
        # The job runs in the repository root: keep a relative path meaning the caller's.
        python = str(Path(python).absolute())
    command = [
        python,
        "-m",
        "benchmarks.peers.run",
        system,
        str(concurrency),
        str(sessions),
    ]
    try:
        done = subprocess.run(
            command,
            cwd=_REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=timeout.total_seconds(),
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise PeerJobError(system, None, _tail(exc.stderr)) from exc
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("{"):
            result: dict[str, Any] = json.loads(line)
            if done.returncode == 0:
                return result
            break
    raise PeerJobError(system, done.returncode, _tail(done.stderr or done.stdout))


async def _next_command() -> str:
    line: str = await asyncio.to_thread(sys.stdin.readline)
    return line.strip()


def _report(message: dict[str, Any]) -> None:
    print(json.dumps(message), flush=True)


class _PacedJob:
    """One ``--paced`` job's process; its JSON lines come through a reader thread."""

    def __init__(self, system: str, python: str, stderr: IO[str], deadline: float) -> None:
        self.system = system
        self._deadline = deadline
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._eof = False
        self._process = subprocess.Popen(
            [python, "-m", "benchmarks.peers.run", system, "1", "1", "--paced"],
            cwd=_REPO_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        self._stderr = stderr
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self._process.stdout is not None
        with self._process.stdout:
            for line in self._process.stdout:
                if line.startswith("{"):
                    self._lines.put(line)
        self._lines.put(None)

    def message(self) -> dict[str, Any]:
        """The job's next JSON line; PeerJobError when it exits or runs past the deadline."""
        try:
            line = self._lines.get(timeout=max(0.0, self._deadline - time.monotonic()))
        except queue.Empty:
            self.stop()
            raise PeerJobError(self.system, None, self._error_output()) from None
        if line is None:
            self._eof = True
            returncode = self._process.wait()
            raise PeerJobError(self.system, returncode, self._error_output())
        result: dict[str, Any] = json.loads(line)
        return result

    def send(self, command: str) -> None:
        assert self._process.stdin is not None
        self._process.stdin.write(command + "\n")
        self._process.stdin.flush()

    def finish(self) -> dict[str, Any]:
        self.send("end")
        result = self.message()
        self._process.wait(timeout=max(1.0, self._deadline - time.monotonic()))
        return result

    def stop(self) -> None:
        """Kill the process if it still runs; its pipes close with it."""
        if self._process.poll() is None:
            self._process.kill()
        self._process.wait()
        assert self._process.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            self._process.stdin.close()
        while not self._eof:  # until the reader has closed stdout at EOF
            self._eof = self._lines.get() is None

    def _error_output(self) -> str:
        self._stderr.flush()
        self._stderr.seek(0)
        return _tail(self._stderr.read())


def run_paired(
    system: str,
    partner: str,
    sessions: int,
    python: str | None = None,
    *,
    timeout: timedelta = timedelta(minutes=15),
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Two C=1 jobs, each in its own process, whose timed sessions alternate.

    Both processes start and warm up (one after the other), then ``sessions``
    rounds each run one session of either system, one at a time, the order
    swapped every round; the machine's drift between the two is then seconds,
    not the minutes between two jobs. Each result is :func:`run_job`'s, over its
    own timed sessions (``steps_per_s`` counts their time, not the pauses).

    Returns:
        ``(system's result, partner's result)``; a system whose packages (or
        server binary) are missing gives its ``skipped`` result, and the other
        then runs alone.

    Raises:
        ValueError: An unknown system or a count below 1 (nothing is run).
        PeerJobError: A job's process failed, timed out or printed no result.
    """
    _check_job(system, 1, sessions)
    _check_job(partner, 1, sessions)
    if python is None:
        python = sys.executable
    elif "/" in python:
        python = str(Path(python).absolute())
    deadline = time.monotonic() + timeout.total_seconds()
    with contextlib.ExitStack() as stack:
        jobs: list[_PacedJob] = []
        skipped: dict[str, dict[str, Any]] = {}
        for name in (system, partner):
            stderr = stack.enter_context(tempfile.TemporaryFile("w+"))
            job = _PacedJob(name, python, stderr, deadline)
            stack.callback(job.stop)
            first = job.message()
            if "skipped" in first:
                skipped[name] = first
            else:
                jobs.append(job)
        for round_number in range(sessions if jobs else 0):
            for job in jobs if round_number % 2 == 0 else jobs[::-1]:
                job.send("go")
                job.message()
        results = {job.system: job.finish() for job in jobs} | skipped
    return results[system], results[partner]


def _tail(output: str | bytes | None, limit: int = 2000) -> str:
    if isinstance(output, bytes):
        output = output.decode(errors="replace")
    return (output or "")[-limit:]


def _versions(module: ModuleType) -> dict[str, str]:
    versions = {"python": sys.version.split()[0], "sqlite": sqlite3.sqlite_version}
    for package in getattr(module, "PACKAGES", ()):
        versions[package] = metadata.version(package)
    return versions


async def _job(system: str, concurrency: int, sessions: int, paced: bool = False) -> dict[str, Any]:
    peer, variant = _parse_system(system)
    try:
        module = importlib.import_module(f".{peer.module}", __package__)
    except ModuleNotFoundError as exc:
        reason = f"{exc.name or exc} is not installed ({_INSTALL_HINT})"
        return {"system": system, "C": concurrency, "skipped": reason}
    from .workload import PeerUnavailable, measure, measure_paced

    with tempfile.TemporaryDirectory(prefix="dex-peers-") as workdir:
        try:
            async with module.open_system(Path(workdir), variant) as system_under_test:
                if paced:
                    result = await measure_paced(system_under_test, _next_command, _report)
                else:
                    result = await measure(system_under_test, concurrency, sessions)
                # A system can report versions of what is not a Python distribution.
                versions = _versions(module) | getattr(system_under_test, "versions", {})
        except PeerUnavailable as exc:
            return {"system": system, "C": concurrency, "skipped": str(exc)}
    return {"system": system, **result, "versions": versions}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("system", help="SYSTEM[:VARIANT], e.g. sqlite:group")
    parser.add_argument("concurrency", type=int, help="concurrent sessions (1 = sequential)")
    parser.add_argument(
        "sessions", type=int, nargs="?", default=10, help="sequential sessions at C=1"
    )
    parser.add_argument(
        "--paced",
        action="store_true",
        help="C=1 only: after the warm-up print a ready line, then run one timed "
        "session per 'go' line on stdin until another line or EOF",
    )
    args = parser.parse_args(argv)
    try:
        _check_job(args.system, args.concurrency, args.sessions)
        if args.paced and args.concurrency != 1:
            raise ValueError(f"--paced runs C=1 only, got C={args.concurrency}")
    except ValueError as exc:
        parser.error(str(exc))
    result = asyncio.run(_job(args.system, args.concurrency, args.sessions, args.paced))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    if not __package__:
        # Started as a file: import this folder as the package `benchmarks.peers` so
        # its relative imports resolve (and its modules do not shadow top-level names).
        sys.path[0] = str(_REPO_ROOT)
        __package__ = "benchmarks.peers"
    main()
