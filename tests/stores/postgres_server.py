"""A throwaway PostgreSQL server for the test session, from the Debian binaries.

``scripts/services`` installs the package; this module only uses it: initdb a
cluster in a temporary directory, start it on a free loopback port with a
password-protected role, and remove it afterwards. PostgreSQL refuses to run
as root, so under root the server runs as the ``postgres`` user the Debian
package creates (or ``nobody``).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PREFERRED_VERSION = "15"
USER = "dex"
SERVICES_HINT = "run scripts/services (it installs the postgresql-15 Debian package)"


def find_bin_dir() -> Path | None:
    """The directory of the Debian PostgreSQL binaries, version 15 first."""
    root = Path("/usr/lib/postgresql")
    candidates = [root / PREFERRED_VERSION / "bin"]
    if root.is_dir():
        candidates += sorted(root.glob("*/bin"), key=lambda p: p.parent.name, reverse=True)
    for candidate in candidates:
        if (candidate / "initdb").is_file() and (candidate / "pg_ctl").is_file():
            return candidate
    return None


@dataclass(frozen=True)
class PostgresServer:
    bin_dir: Path
    port: int
    password: str
    root: Path | None = None
    """The cluster's directory (its data directory is ``root / "data"``)."""

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://{USER}:{self.password}@127.0.0.1:{self.port}/{database}"

    def restart(self, mode: str = "immediate") -> None:
        """``pg_ctl restart``; ``immediate`` is a crash: no checkpoint, every
        connection cut, WAL recovery at start. Same port."""
        assert self.root is not None, "a server this module started"
        run = _Runner(self.root, _server_user())
        run(
            self.bin_dir / "pg_ctl",
            "restart",
            "--pgdata",
            self.root / "data",
            "--mode",
            mode,
            "--log",
            self.root / "server.log",
            "--wait",
        )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _server_user() -> pwd.struct_passwd | None:
    """The unprivileged user to run the server as, or ``None`` when not root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise RuntimeError("running as root, and neither a postgres nor a nobody user exists")


class _Runner:
    """Runs the server's binaries in the cluster directory, as the server user."""

    def __init__(self, cwd: Path, user: pwd.struct_passwd | None) -> None:
        self._cwd = cwd
        self._user = user

    def __call__(self, *args: str | os.PathLike[str]) -> None:
        user = self._user
        subprocess.run(
            [str(a) for a in args],
            check=True,
            capture_output=True,
            cwd=self._cwd,
            user=None if user is None else user.pw_uid,
            group=None if user is None else user.pw_gid,
            extra_groups=None if user is None else [],
        )


@contextlib.contextmanager
def running_server(bin_dir: Path) -> Iterator[PostgresServer]:
    """initdb, start, yield, stop and remove a cluster."""
    user = _server_user()
    root = Path(tempfile.mkdtemp(prefix="dex-pg-"))
    data = root / "data"
    password = secrets.token_hex(12)
    run = _Runner(root, user)
    started = False
    try:
        (root / "password").write_text(password)
        if user is not None:
            for path in (root, root / "password"):
                os.chown(path, user.pw_uid, user.pw_gid)
        run(
            bin_dir / "initdb",
            "--pgdata",
            data,
            "--username",
            USER,
            f"--pwfile={root / 'password'}",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        )
        port = _start(run, bin_dir, root, data)
        started = True
        yield PostgresServer(bin_dir=bin_dir, port=port, password=password, root=root)
    finally:
        try:
            if started:
                run(bin_dir / "pg_ctl", "stop", "--pgdata", data, "--mode", "fast", "--wait")
        finally:
            shutil.rmtree(root, ignore_errors=True)


def _start(run: _Runner, bin_dir: Path, root: Path, data: Path) -> int:
    """Start on a free port; another process may take the port first, so try again."""
    conf = data / "postgresql.conf"
    base = conf.read_text()
    log = root / "server.log"
    last: subprocess.CalledProcessError | None = None
    for _ in range(3):
        port = _free_port()
        conf.write_text(
            base
            + f"\nlisten_addresses = '127.0.0.1'\nport = {port}\n"
            + "unix_socket_directories = ''\nmax_connections = 200\n"
        )
        try:
            run(bin_dir / "pg_ctl", "start", "--pgdata", data, "--log", log, "--wait")
            return port
        except subprocess.CalledProcessError as error:
            last = error
    text = log.read_text() if log.exists() else ""
    raise RuntimeError(f"PostgreSQL did not start: {last}\n{text}") from last
