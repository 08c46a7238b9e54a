"""The same-node path of a host's calls to an executor: a Unix socket.

A Ray call from one async actor to another takes about 1.2-1.6 ms there and
back on a 2-core machine, a Unix socket between the same two processes about
0.1 ms (``benchmarks/turn_timeline.py`` prints the first; a tool call crosses
it twice). So an executor also serves ``run_many`` on a Unix socket, and a host
on the same node connects to it once and sends its later batches of calls there.
On Linux the socket's name is in the abstract namespace (nothing on disk to
leave behind when Ray kills the executor) and the executor accepts only
connections from its own user (``SO_PEERCRED``); elsewhere it is a file in a
directory only its user may open. The first batch, a host
on another node, cancellations, start acknowledgements, frames and results sent
ahead all stay on Ray.

The socket closes when the executor's process ends: every call in flight on it
fails as an actor death does (:class:`ChannelClosed`), and the host's next batch
goes through Ray, after Ray has restarted the executor, until it connects anew.
A request carries no object ref (Ray could not count a borrower it never
saw): an executor that has not loaded the Flow definition asks the host for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import shutil
import socket
import struct
import sys
import tempfile
from collections.abc import Awaitable, Callable
from typing import Any

logger = logging.getLogger("dex_agents_ray.engine")

_HEADER = struct.Struct("!IQ")
"""Payload length and request ID."""
_MAX_PATH = 100
"""A Unix socket path must fit ``sun_path`` (108 bytes on Linux)."""

Handler = Callable[[list[tuple[Any, ...]]], Awaitable[list[Any]]]


class ChannelClosed(ConnectionError):
    """The executor's socket closed with calls in flight: its process ended."""


def _dumps(value: Any) -> bytes:
    from ray import cloudpickle

    data: bytes = cloudpickle.dumps(value)  # type: ignore[no-untyped-call]
    return data


def _loads(data: bytes) -> Any:
    from ray import cloudpickle

    return cloudpickle.loads(data)


def _frame(request_id: int, value: Any) -> bytes:
    payload = _dumps(value)
    return _HEADER.pack(len(payload), request_id) + payload


async def _read(reader: asyncio.StreamReader) -> tuple[int, Any]:
    length, request_id = _HEADER.unpack(await reader.readexactly(_HEADER.size))
    return request_id, _loads(await reader.readexactly(length))


class ChannelServer:
    """An executor's socket: each request's calls go to ``handler`` (``run_many``)."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self._server: asyncio.Server | None = None
        self._directory: str | None = None
        self._path: str | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.connections = 0
        """Hosts that connected since start."""
        self.calls = 0
        """Calls that came by the socket since start."""

    async def address(self) -> str | None:
        """The socket's path (started on first use), or ``None`` when it cannot
        have one here (the temporary directory's path is too long)."""
        if self._path is None:
            if sys.platform == "linux":
                path = f"\0dex-exec-{os.getpid()}-{secrets.token_hex(8)}"
            else:
                directory = tempfile.mkdtemp(prefix="dex-exec-")  # mode 0700: this user only
                path = os.path.join(directory, "calls")
                if len(path.encode()) > _MAX_PATH:
                    shutil.rmtree(directory, ignore_errors=True)
                    return None
                self._directory = directory
            # A socket made here: uvloop's own unix calls refuse abstract names.
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(path)
            listener.listen(socket.SOMAXCONN)
            self._server = await asyncio.start_unix_server(self._serve, sock=listener)
            self._path = path
        return self._path

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not _same_user(writer):
            logger.warning("executor channel: refused a connection from another user")
            writer.close()
            return
        self.connections += 1
        try:
            while True:
                request_id, calls = await _read(reader)
                self.calls += len(calls)
                task = asyncio.ensure_future(self._answer(writer, request_id, calls))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the host closed its end (it died or shut down)
        finally:
            writer.close()

    async def _answer(self, writer: asyncio.StreamWriter, request_id: int, calls: Any) -> None:
        try:
            outcomes = await self._handler(calls)
        except Exception as error:  # run_many keeps each call's failure: not expected
            logger.exception("executor channel: a batch failed as a whole")
            failure = RuntimeError(f"the executor failed the batch: {error!r}")
            outcomes = [("error", failure)] * len(calls)
        if writer.is_closing():
            return  # the host is gone: nobody waits for these
        writer.write(_frame(request_id, outcomes))
        with contextlib.suppress(ConnectionError):
            await writer.drain()

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)


def _same_user(writer: asyncio.StreamWriter) -> bool:
    """Whether the peer runs as this process's user (Linux; elsewhere the socket's
    directory already admits only that user)."""
    peer = writer.get_extra_info("socket")
    credentials = getattr(socket, "SO_PEERCRED", None)
    if peer is None or credentials is None:
        return sys.platform != "linux"
    _, uid, _ = struct.unpack("3i", peer.getsockopt(socket.SOL_SOCKET, credentials, 12))
    return bool(uid == os.getuid())


class Channel:
    """A host's connection to one executor's socket."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        self._pending: dict[int, asyncio.Future[list[Any]]] = {}
        self._next_id = 0
        self.closed = False
        self._reading = asyncio.ensure_future(self._read_replies(reader))

    @classmethod
    async def connect(cls, path: str) -> Channel:
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            await asyncio.to_thread(connection.connect, path)
            connection.setblocking(False)
            reader, writer = await asyncio.open_unix_connection(sock=connection)
        except BaseException:
            connection.close()
            raise
        return cls(reader, writer)

    def request(self, calls: list[tuple[Any, ...]]) -> asyncio.Future[list[Any]]:
        """Send ``calls`` (``run_many``'s argument); the future is its reply, or
        :class:`ChannelClosed` when the executor's process ends first."""
        future: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        if self.closed:
            future.set_exception(ChannelClosed("the executor's socket is closed"))
            return future
        self._next_id += 1
        self._pending[self._next_id] = future
        self._writer.write(_frame(self._next_id, calls))
        return future

    async def _read_replies(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                request_id, outcomes = await _read(reader)
                future = self._pending.pop(request_id, None)
                if future is not None and not future.done():
                    future.set_result(outcomes)
        except (asyncio.IncompleteReadError, ConnectionError) as error:
            self._fail(ChannelClosed(f"the executor's socket closed: {error!r}"))
        except Exception as error:  # a reply that does not unpickle here
            logger.warning("executor channel: unreadable reply, closing it: %r", error)
            self._fail(ChannelClosed(f"unreadable reply from the executor: {error!r}"))

    def _fail(self, error: ChannelClosed) -> None:
        self.closed = True
        self._writer.close()
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(error)

    def close(self) -> None:
        if not self.closed:
            self._reading.cancel()
            self._fail(ChannelClosed("the host closed the channel"))
