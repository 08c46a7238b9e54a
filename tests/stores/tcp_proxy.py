"""A loopback TCP proxy in front of a PostgreSQL server that injects faults.

``down()`` drops every connection and refuses new ones until ``up()`` (a server
that is unreachable). ``cut_after_commit()`` arms a cut: the next time a client
sends ``COMMIT``, the proxy forwards it, waits until the server has answered,
drops the answer and closes both sides, so the client cannot tell whether its
transaction committed (it did).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator

_CHUNK = 65536


class FaultProxy:
    """Runs its own event loop in a thread, so any caller (sync or async) can use it."""

    def __init__(self, target_port: int) -> None:
        self._target = target_port
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._down = False
        self._armed = False
        self.cuts = 0
        """Connections cut after a forwarded COMMIT was answered."""
        self.port = 0

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(timeout=30)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()

    def down(self) -> None:
        """Drop every connection now and refuse new ones."""
        self._down = True
        asyncio.run_coroutine_threadsafe(self._drop_all(), self._loop).result(timeout=30)

    def up(self) -> None:
        self._down = False

    def cut_after_commit(self) -> None:
        self._armed = True

    def dsn(self, base_dsn: str, server_port: int) -> str:
        return base_dsn.replace(f":{server_port}/", f":{self.port}/")

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        await self._drop_all()
        # End every connection's task here, so none is left pending on a closed loop.
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    async def _drop_all(self) -> None:
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._down:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._target)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))
        answered = asyncio.Event()
        cut = asyncio.Event()
        tasks = [
            asyncio.create_task(self._client_to_server(reader, up_writer, answered, cut)),
            asyncio.create_task(self._server_to_client(up_reader, writer, answered, cut)),
        ]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            for w in (writer, up_writer):
                w.transport.abort()
                self._writers.discard(w)

    async def _client_to_server(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        answered: asyncio.Event,
        cut: asyncio.Event,
    ) -> None:
        while data := await reader.read(_CHUNK):
            if self._armed and b"COMMIT" in data:
                self._armed = False
                cut.set()
                writer.write(data)
                await writer.drain()
                await asyncio.wait_for(answered.wait(), 30)  # the server committed
                self.cuts += 1
                return
            writer.write(data)
            await writer.drain()

    @staticmethod
    async def _server_to_client(
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        answered: asyncio.Event,
        cut: asyncio.Event,
    ) -> None:
        dropped = b""
        while data := await reader.read(_CHUNK):
            if cut.is_set():
                # Hold back everything from now on; once the server's CommandComplete
                # for COMMIT is among it, the transaction is durable on the server.
                dropped += data
                if b"COMMIT\x00" in dropped:
                    answered.set()
                    await asyncio.Event().wait()
                continue
            writer.write(data)
            await writer.drain()


@contextlib.contextmanager
def fault_proxy(target_port: int) -> Iterator[FaultProxy]:
    proxy = FaultProxy(target_port)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()
