"""What a host does for a client's call on one of its runs.

``FlowHost`` answers each call (by Ray or by its socket) with an envelope of
what these return; each activates the run here first unless it is in memory,
and keeps it there while the call is in progress.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

from dex_agents_ray.engine._errors import HostPassivatedError
from dex_agents_ray.engine.actors._residents import ResidentRuns
from dex_agents_ray.engine.run._driver import RunDriver
from dex_agents_ray.engine.run._operations import (
    StartRequest,
    run_rpc,
    start_run,
    stop_run,
    update_run_config,
)


@contextlib.contextmanager
def _client_call(driver: RunDriver) -> Iterator[RunDriver]:
    """Keep the run in memory while a client call on it is in progress.

    Without this, a call that outlasts ``passivate_after`` (a slow RPC handler,
    a busy host) could see its run passivated under it and then commit into a
    run that no process holds any more: the change would be stored, but nothing
    would act on it until the next activation.
    """
    driver.waiters += 1
    try:
        yield driver
    finally:
        driver.waiters -= 1
        driver.touch()


class ClientCalls:
    """A client's operations on the runs of one host."""

    def __init__(self, runs: ResidentRuns) -> None:
        self._runs = runs

    async def start(self, flow_id: str, request: StartRequest) -> str:
        with _client_call(await self._runs.driver(flow_id)) as driver:
            if driver.definition is None or driver.definition.flow_hash != request.flow_hash:
                running = driver.state.is_running
                if not running or request.id_reuse_policy == "allow_terminate_if_running":
                    driver.definition = await self._runs.definition(
                        request.flow_type, request.flow_hash
                    )
            return await start_run(driver, request)

    async def rpc(
        self,
        flow_id: str,
        rpc_name: str,
        input_value: bytes | None,
        request_id: str,
        extra: tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]],
        fresh: bool,
    ) -> bytes:
        with _client_call(await self._runs.running_or_closed(flow_id, "InvokeRPC")) as driver:
            return await run_rpc(driver, rpc_name, input_value, request_id, extra, fresh=fresh)

    async def stop(self, flow_id: str, stop_type: str, reason: str | None) -> None:
        with _client_call(await self._runs.running_or_closed(flow_id, "StopFlow")) as driver:
            await stop_run(driver, stop_type, reason)

    async def update_config(self, flow_id: str, search_mode: str | None) -> None:
        running = await self._runs.running_or_closed(flow_id, "UpdateFlowConfig")
        with _client_call(running) as driver:
            await update_run_config(driver, search_mode)

    async def attributes(self, flow_id: str, keys: list[str]) -> list[bytes | None]:
        """The stored values of ``keys`` (``None`` when unset), once durable."""
        with _client_call(await self._runs.running_or_closed(flow_id, "GetAttributes")) as driver:
            attributes = driver.state.attributes
            values = [attributes.get(key) for key in keys]
            await driver.durable()
            return values

    async def wait_closed(self, flow_id: str, timeout: float | None) -> bool:
        """Wait until the run is no longer running; False when ``timeout`` passed first."""
        with _client_call(await self._runs.driver(flow_id)) as driver:
            loop = asyncio.get_running_loop()
            deadline = None if timeout is None else loop.time() + timeout
            while driver.state.run is not None and driver.state.is_running:
                remaining = None if deadline is None else deadline - loop.time()
                if remaining is not None and remaining <= 0:
                    return False
                try:
                    await asyncio.wait_for(asyncio.shield(driver.closed()), remaining)
                except TimeoutError:
                    return False
                if driver.state.is_running:  # stopped here, not closed: ask again
                    raise HostPassivatedError(f"the host of {flow_id!r} let it go")
            return driver.state.run is not None
