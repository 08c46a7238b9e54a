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
on another node and cancellations stay on Ray. The way back uses the host's own
socket: an executor that gets calls by its socket sends its start
acknowledgements, frames, results sent ahead and orphan checks to their host by
the host's socket once it has asked for it (``StepExecutor._host_call``).

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
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

from dex_agents_ray.errors import DexAgentsError

logger = logging.getLogger("dex_agents_ray.engine")

_HEADER = struct.Struct("!IQ")
"""Payload length and request ID."""
_MAX_PATH = 100
"""A Unix socket path must fit ``sun_path`` (108 bytes on Linux)."""

Handler = Callable[[Any], Awaitable[Any]]


class ChannelClosed(DexAgentsError, ConnectionError):
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
    """A process's socket: each request goes to ``handler`` (an executor's
    ``run_many``, a host's client calls), its return value or exception back."""

    def __init__(self, handler: Handler, prefix: str) -> None:
        self._handler = handler
        self._prefix = prefix
        self._server: asyncio.Server | None = None
        self._directory: str | None = None
        self._path: str | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.connections = 0
        """Peers that connected since start."""

    async def address(self) -> str | None:
        """The socket's path (started on first use), or ``None`` when it cannot
        have one here (the temporary directory's path is too long)."""
        if self._path is None:
            if sys.platform == "linux":
                path = f"\0{self._prefix}-{os.getpid()}-{secrets.token_hex(8)}"
            else:
                directory = tempfile.mkdtemp(prefix=f"{self._prefix}-")  # mode 0700: this user only
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
            logger.warning("%s channel: refused a connection from another user", self._prefix)
            writer.close()
            return
        self.connections += 1
        try:
            while True:
                request_id, request = await _read(reader)
                task = asyncio.ensure_future(self._answer(writer, request_id, request))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the peer closed its end (it died or shut down)
        finally:
            writer.close()

    async def _answer(self, writer: asyncio.StreamWriter, request_id: int, request: Any) -> None:
        reply: tuple[str, Any]
        try:
            reply = ("ok", await self._handler(request))
        except Exception as error:
            reply = ("error", error)
        if writer.is_closing():
            return  # the peer is gone: nobody waits for this
        try:
            frame = _frame(request_id, reply)
        except Exception as error:  # a value or an exception that does not pickle
            frame = _frame(request_id, ("error", RuntimeError(f"unpicklable reply: {error!r}")))
        writer.write(frame)
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
    """A connection to another process's socket (a host's to an executor, a
    client's to a host)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        self._pending: dict[int, asyncio.Future[Any]] = {}
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

    def request(self, request: Any) -> asyncio.Future[Any]:
        """Send ``request``; the future is the handler's return value or exception,
        or :class:`ChannelClosed` when the serving process ends first."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self.closed:
            future.set_exception(ChannelClosed("the socket is closed"))
            return future
        frame = _frame(self._next_id + 1, request)  # raises for a request that does not pickle
        self._next_id += 1
        self._pending[self._next_id] = future
        self._writer.write(frame)
        return future

    async def _read_replies(self, reader: asyncio.StreamReader) -> None:
        try:
            await self._read_loop(reader)
        except asyncio.CancelledError:
            # Cancelled with its loop (``asyncio.run`` ending): close the socket too.
            self._fail(ChannelClosed("the channel's event loop ended"))
            raise

    async def _read_loop(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                request_id, (kind, value) = await _read(reader)
                future = self._pending.pop(request_id, None)
                if future is None or future.done():
                    continue
                if kind == "ok":
                    future.set_result(value)
                else:
                    future.set_exception(value)
        except (asyncio.IncompleteReadError, ConnectionError) as error:
            self._fail(ChannelClosed(f"the socket closed: {error!r}"))
        except Exception as error:  # a reply that does not unpickle here
            logger.warning("channel: unreadable reply, closing it: %r", error)
            self._fail(ChannelClosed(f"unreadable reply: {error!r}"))

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
            self._fail(ChannelClosed("this end closed the channel"))


async def open_if_local(node: str, path: str | None, what: str) -> Channel | None:
    """The socket at ``path`` when its process (``what``) runs on this node, else
    ``None`` (another node, no socket, a Ray Client driver, a refused connection)."""
    import ray

    try:
        here = ray.get_runtime_context().get_node_id()
        return None if path is None or node != here else await Channel.connect(path)
    except Exception as error:
        logger.debug("%s: its socket did not open (%r)", what, error)
        return None


class HostChannels:
    """A client's sockets to the shared hosts of its own node.

    A host is asked for its socket after the client's first call to it through
    Ray has answered; calls made meanwhile, and calls to hosts of another node,
    go through Ray. The sockets belong to the event loop the engine started on
    (``engine.shutdown`` closes them there): calls from any other loop (the
    blocking client's thread, a short ``asyncio.run``) go through Ray, so no
    loop that ends on its own leaves a socket or its reader behind.
    """

    def __init__(self, enabled: bool) -> None:
        loop: asyncio.AbstractEventLoop | None = None
        if enabled:
            with contextlib.suppress(RuntimeError):
                loop = asyncio.get_running_loop()
        self._loop = loop
        self._channels: dict[str, Channel] = {}
        """Open sockets by host (the same dict for the client's life: see below)."""
        self._connecting: set[str] = set()
        self._elsewhere: set[str] = set()
        """Hosts that answered from another node, or whose socket did not open."""
        self._tasks: set[asyncio.Task[None]] = set()
        if loop is not None:
            # A client dropped without ``close`` closes its sockets as it goes: a
            # socket's reader only holds it weakly, so otherwise the garbage
            # collector would find the socket open (a ResourceWarning) instead.
            weakref.finalize(self, _close_left, self._channels, loop).atexit = False

    def _here(self) -> bool:
        try:
            return self._loop is not None and asyncio.get_running_loop() is self._loop
        except RuntimeError:
            return False

    def get(self, host_name: str) -> Channel | None:
        """The open socket to ``host_name``, if any (on the engine's loop)."""
        if not self._here():
            return None
        channel = self._channels.get(host_name)
        if channel is not None and channel.closed:
            del self._channels[host_name]
            return None
        return channel

    def answered(self, host_name: str, handle: Any) -> None:
        """A call through Ray to ``host_name`` answered: open its socket if it has one."""
        if (
            host_name in self._elsewhere
            or host_name in self._connecting
            or host_name in self._channels
            or not self._here()
        ):
            return
        self._connecting.add(host_name)
        task = asyncio.get_running_loop().create_task(self._connect(host_name, handle))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _connect(self, host_name: str, handle: Any) -> None:
        try:
            try:
                node, path = await handle.client_channel.remote()
            except Exception as error:  # the host is going away: a later call asks again
                logger.debug("host %s: no socket address (%r)", host_name, error)
                return
            channel = await open_if_local(node, path, f"host {host_name}")
            if channel is None:
                self._elsewhere.add(host_name)
                return
        finally:
            self._connecting.discard(host_name)
        if self._loop is None:  # closed meanwhile (the engine shut down)
            channel.close()
            return
        old = self._channels.pop(host_name, None)
        if old is not None:
            old.close()
        self._channels[host_name] = channel

    def forget(self, host_name: str) -> None:
        """``host_name`` died or went away: close its socket."""
        channel = self._channels.pop(host_name, None) if self._here() else None
        if channel is not None:
            channel.close()

    def close(self) -> None:
        """Close every socket (the engine shuts down), on the engine's loop; later
        calls go through Ray."""
        channels = list(self._channels.values())
        self._channels.clear()
        tasks = list(self._tasks)
        here, loop = self._here(), self._loop
        self._loop = None
        if here:
            for channel in channels:
                channel.close()
            for task in tasks:
                task.cancel()
        elif loop is not None and loop.is_running():
            for channel in channels:
                loop.call_soon_threadsafe(channel.close)
            for task in tasks:
                loop.call_soon_threadsafe(task.cancel)


def _close_left(channels: dict[str, Channel], loop: asyncio.AbstractEventLoop) -> None:
    """Close the sockets of a ``HostChannels`` that was dropped without ``close``,
    on the loop they belong to."""
    left = list(channels.values())
    channels.clear()
    if not left or loop.is_closed():
        return
    try:
        here = asyncio.get_running_loop() is loop
    except RuntimeError:
        here = False
    for channel in left:
        if here:
            channel.close()
        else:
            loop.call_soon_threadsafe(channel.close)
