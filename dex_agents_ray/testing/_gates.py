"""File-based gates and invocation counts that work across processes.

A Step (in a host actor or a Ray task worker) waits at a gate; the test sees
that it arrived, does something at that exact point (kill a process, send an
RPC), then releases it. State lives in files, so it survives the processes it
is used to crash.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

_POLL_SECONDS = 0.01


class FileGate:
    """A named gate under ``state_dir``; once released it stays open.

    Inside a Step: ``await gate.wait_for_release()`` (or
    ``gate.wait_for_release_sync()`` in sync code). In the test:
    ``await gate.wait_until_reached()``, then ``gate.release()``.
    """

    def __init__(self, state_dir: str | os.PathLike[str], name: str) -> None:
        if not name or "/" in name or name.startswith("."):
            raise ValueError(f"FileGate name must be a plain file name, got {name!r}")
        self.state_dir = Path(state_dir)
        self.name = name
        self.state_dir.mkdir(parents=True, exist_ok=True)

    def __repr__(self) -> str:
        return f"FileGate({str(self.state_dir)!r}, {self.name!r})"

    @property
    def _reached(self) -> Path:
        return self.state_dir / f"{self.name}.reached"

    @property
    def _released(self) -> Path:
        return self.state_dir / f"{self.name}.released"

    def _arrive(self) -> None:
        with open(self._reached, "a", encoding="utf-8") as file:
            file.write(f"{os.getpid()}\n")
            file.flush()
            os.fsync(file.fileno())

    async def wait_for_release(self) -> None:
        """Record arrival (with this process's PID), then wait until released."""
        self._arrive()
        # The release comes from another process: poll the file.
        while not self._released.exists():  # noqa: ASYNC110
            await asyncio.sleep(_POLL_SECONDS)

    def wait_for_release_sync(self) -> None:
        """Blocking form of :meth:`wait_for_release`, for sync handlers."""
        self._arrive()
        while not self._released.exists():
            time.sleep(_POLL_SECONDS)

    def times_reached(self) -> int:
        """How many times any process arrived at the gate."""
        if not self._reached.exists():
            return 0
        return len(self._reached.read_text(encoding="utf-8").split())

    def reached_pids(self) -> list[int]:
        """The PIDs of the processes that arrived, in order."""
        if not self._reached.exists():
            return []
        return [int(p) for p in self._reached.read_text(encoding="utf-8").split()]

    async def wait_until_reached(self, times: int = 1, timeout: float = 60.0) -> int:
        """Wait until the gate was reached ``times`` times; returns the last PID."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.times_reached() < times:
            if loop.time() > deadline:
                raise TimeoutError(f"{self!r} was not reached {times} time(s) within {timeout} s")
            await asyncio.sleep(_POLL_SECONDS)
        return self.reached_pids()[times - 1]

    def release(self) -> None:
        """Open the gate for every waiter, now and later."""
        self._released.touch()

    def close(self) -> None:
        """Close the gate again: later arrivals wait for the next ``release``
        (arrivals so far still count in ``times_reached``)."""
        self._released.unlink(missing_ok=True)


class InvocationLog:
    """Counts real invocations of named actions across processes (an append-only file)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def __repr__(self) -> str:
        return f"InvocationLog({str(self.path)!r})"

    def record(self, key: str) -> None:
        """Append one invocation of ``key`` durably."""
        if "\n" in key:
            raise ValueError("InvocationLog keys cannot contain newlines")
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, f"{key}\n".encode())
            os.fsync(fd)
        finally:
            os.close(fd)

    def entries(self) -> list[str]:
        if not self.path.exists():
            return []
        return self.path.read_text(encoding="utf-8").splitlines()

    def count(self, key: str) -> int:
        return sum(1 for entry in self.entries() if entry == key)
