"""The runs a host holds in memory: their activation, Flow definitions and reload.

A run is activated at most once at a time (concurrent callers share one
activation); each activation takes a new ownership epoch from the store, which
fences every commit of older incarnations. A run whose commit failed past the
store's retry deadline is dropped and activated again once the store answers.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from dex_agents_ray.engine._errors import HostPassivatedError, StoreUnavailableError
from dex_agents_ray.engine._metrics import record_run_activated, set_resident_runs
from dex_agents_ray.engine.actors._config import HostConfig
from dex_agents_ray.engine.actors._pool import ExecutorPool
from dex_agents_ray.engine.run._attempts import FlowDefinition
from dex_agents_ray.engine.run._driver import RunDriver
from dex_agents_ray.engine.run._operations import not_active
from dex_agents_ray.engine.run._remote import load_definition
from dex_agents_ray.engine.run._streams import StreamBuffer
from dex_agents_ray.engine.store._store import FlowStore

logger = logging.getLogger("dex_agents_ray.engine")


class ResidentRuns:
    """The drivers of the runs one host holds, by flow ID; see the module docstring.

    ``suffix`` ends the name this host incarnation gives its dispatches, so an
    executor tells a re-created or restarted host from the old one.
    """

    def __init__(
        self,
        store: FlowStore,
        config: HostConfig,
        pool: ExecutorPool,
        *,
        actor_id: str | None,
        suffix: str,
    ) -> None:
        self._store = store
        self._config = config
        self._pool = pool
        self._actor_id = actor_id
        self._suffix = suffix
        self.streams = StreamBuffer(
            store.streams,
            busy=self.busy,
            batch_window=config.stream_batch_window,
            committing=self.committing,
        )
        """The Stream writes of these runs on their way to the store, and long polls."""
        self.exiting = False
        """The host is leaving: activations are refused (the client retries elsewhere)."""
        self._drivers: dict[str, RunDriver] = {}
        self._activations: dict[str, asyncio.Task[RunDriver]] = {}
        self._definitions: dict[tuple[str, str], FlowDefinition] = {}
        self._reloading: dict[str, asyncio.Task[None]] = {}
        self._refused: dict[str, int] = {}
        self._handle: Any = None
        """This host's own actor handle, made once (Ray builds a new one per ask)."""

    # -- lookups -----------------------------------------------------------------------

    def held(self, flow_id: str) -> RunDriver | None:
        """The driver of ``flow_id`` in memory (stale or not), if any."""
        return self._drivers.get(flow_id)

    def live(self, flow_id: str) -> RunDriver | None:
        """The driver of ``flow_id`` if it is in memory and still owns the run."""
        driver = self._drivers.get(flow_id)
        return None if driver is None or driver.stale else driver

    def busy(self, flow_id: str) -> bool:
        """Whether ``flow_id`` runs here and is about to do more on its own."""
        driver = self._drivers.get(flow_id)
        return driver is not None and driver.busy

    def committing(self, flow_id: str) -> bool:
        """Whether a commit of ``flow_id`` here will take its queued Stream writes."""
        driver = self._drivers.get(flow_id)
        return driver is not None and not driver.stale and driver.committing

    def items(self) -> list[tuple[str, RunDriver]]:
        """Every run in memory with its driver (a copy: safe while they change)."""
        return list(self._drivers.items())

    @property
    def empty(self) -> bool:
        """No run is in memory or on its way in."""
        return not self._drivers and not self._activations

    # -- activation --------------------------------------------------------------------

    async def driver(self, flow_id: str) -> RunDriver:
        """The run's driver, activating the run here unless it is in memory."""
        if self.exiting:
            raise HostPassivatedError(f"the host of {flow_id!r} is passivating it")
        driver = self._drivers.get(flow_id)
        if driver is not None and not driver.stale:
            driver.touch()
            return driver
        task = self._activations.get(flow_id)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._activate(flow_id))
            self._activations[flow_id] = task
            task.add_done_callback(lambda _: self._activations.pop(flow_id, None))
        return await task

    async def running_or_closed(self, flow_id: str, operation: str) -> RunDriver:
        """The run's driver; refuses ``operation`` on a flow ID that never ran."""
        driver = await self.driver(flow_id)
        if driver.state.run is None:
            raise not_active(flow_id, operation)
        return driver

    async def _activate(self, flow_id: str) -> RunDriver:
        previous = self._drivers.pop(flow_id, None)
        if previous is not None:
            await previous.stop()
        self.streams.forget(flow_id)
        epoch, loaded = await self._store.runs.activate(flow_id)
        definition = None
        if loaded is not None:
            definition = await self.definition(loaded.run.flow_type, loaded.run.flow_hash)
        if self._handle is None:
            import ray

            self._handle = ray.get_runtime_context().current_actor
        driver = RunDriver(
            store=self._store.runs,
            flow_id=flow_id,
            epoch=epoch,
            definition=definition,
            host_handle=self._handle,
            streams=self.streams,
            on_stale=lambda: self._count_refusal(flow_id),
            pool=self._pool,
            # The suffix tells an executor a re-created or restarted host from the old one.
            host_name=f"{self._config.placement.host_name(flow_id)}{self._suffix}",
            on_store_down=lambda: self._reload_later(flow_id),
            retention=self._config.retention,
        )
        if loaded is not None:
            driver.load(loaded)
            driver.start()
        self._drivers[flow_id] = driver
        record_run_activated()
        set_resident_runs(self._actor_id, len(self._drivers))
        return driver

    async def definition(self, flow_type: str, flow_hash: str) -> FlowDefinition:
        """The Flow definition of that type and version (loaded once per host)."""
        key = (flow_type, flow_hash)
        cached = self._definitions.get(key)
        if cached is None:
            blob = await self._store.definitions.get(flow_type, flow_hash)
            if blob is None:
                raise KeyError(f"flow type {flow_type!r} version {flow_hash} is not registered")
            flow, mapper = load_definition(blob)
            cached = FlowDefinition(flow_type, flow_hash, blob, flow, mapper)
            self._definitions[key] = cached
        return cached

    async def resume_slot(self, slot: int) -> None:
        """A shared host (re)starting: resume every run of its slot with work in flight."""
        for flow_id in await self._store.runs.runs_with_work():
            if self._config.placement.slot(flow_id) == slot:
                await self.driver(flow_id)

    async def take_over(self, flow_id: str) -> int:
        """Activate ``flow_id`` again, leaving its current driver running; the new epoch."""
        self._drivers.pop(flow_id, None)
        driver = await self.driver(flow_id)
        return driver.epoch

    def release(self, flow_id: str) -> None:
        """Forget ``flow_id``'s driver and Stream state (the run was passivated)."""
        del self._drivers[flow_id]
        self.streams.forget(flow_id)
        set_resident_runs(self._actor_id, len(self._drivers))

    async def stop_all(self) -> None:
        """Stop every driver (the runs stay in the store) and the Stream buffer."""
        for driver in list(self._drivers.values()):
            await driver.stop()
        self.streams.close()

    # -- store outages and refusals ----------------------------------------------------

    def _reload_later(self, flow_id: str) -> None:
        """A commit of ``flow_id`` failed past the store's retry deadline: drop the
        run from memory and activate it again from the store once it answers."""
        if flow_id not in self._reloading:
            task = asyncio.get_running_loop().create_task(self._reload(flow_id))
            self._reloading[flow_id] = task
            task.add_done_callback(lambda _: self._reloading.pop(flow_id, None))

    async def _reload(self, flow_id: str) -> None:
        driver = self._drivers.get(flow_id)
        if driver is not None and driver.stale:  # not one a client call already reloaded
            del self._drivers[flow_id]
            await driver.stop()
        delay = 0.5
        while not self.exiting:
            try:
                await self.driver(flow_id)
                logger.info("run %s: reloaded from the store", flow_id)
                return
            except StoreUnavailableError as error:
                logger.warning("run %s: still waiting for the store: %s", flow_id, error)
            except Exception:
                logger.exception("run %s: reloading failed", flow_id)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)

    def reloading(self) -> list[str]:
        """Runs dropped after a store outage, waiting to activate again."""
        return sorted(self._reloading)

    def _count_refusal(self, flow_id: str) -> None:
        self._refused[flow_id] = self._refused.get(flow_id, 0) + 1

    def refused_commits(self, flow_id: str) -> int:
        """How many commits of superseded incarnations of ``flow_id`` the store refused."""
        return self._refused.get(flow_id, 0)
