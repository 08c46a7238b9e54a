"""Connections of the PostgreSQL store: its own event loop thread, the pool's
idle probe, and where an operation gets a connection when the pool has none."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg.rows import TupleRow
    from psycopg_pool import AsyncConnectionPool

    Connection = AsyncConnection[TupleRow]

T = TypeVar("T")


class LoopThread:
    """An event loop of the store's own, running in a daemon thread."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class IdleProbe:
    """Probes a pooled connection at checkout only when it sat idle.

    A connection the server dropped while idle (a restart, a failover) is
    replaced instead of failing the next commit; a busy connection costs no
    extra round trip.
    """

    IDLE_SECONDS = 1.0

    def __init__(self) -> None:
        self._returned_at: weakref.WeakKeyDictionary[Connection, float] = (
            weakref.WeakKeyDictionary()
        )

    async def returned(self, conn: Connection) -> None:
        self._returned_at[conn] = time.monotonic()

    async def check(self, conn: Connection) -> None:
        returned_at = self._returned_at.get(conn)
        if returned_at is None or time.monotonic() - returned_at > self.IDLE_SECONDS:
            from psycopg_pool import AsyncConnectionPool

            await AsyncConnectionPool.check_connection(conn)


class Connections:
    """Where a store's operations get connections: the pool, or, while the pool
    is backing off from failed reconnections (a server that restarted again and
    again), a connection of their own for that one try."""

    def __init__(
        self,
        pool: AsyncConnectionPool[Connection],
        dsn: str,
        configure: Callable[[Connection], Coroutine[Any, Any, None]],
    ) -> None:
        self.pool = pool
        self._dsn = dsn
        self._configure = configure

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[Connection]:
        from psycopg import AsyncConnection
        from psycopg_pool import PoolTimeout

        try:
            conn = await self.pool.getconn()
        except PoolTimeout:
            own = await AsyncConnection.connect(self._dsn, autocommit=True)
            try:
                await self._configure(own)
                yield own
            finally:
                await own.close()
            return
        try:
            yield conn
        finally:
            await self.pool.putconn(conn)
