"""The scheduler: brings passivated runs back when their timers come due.

One detached actor per namespace. Hosts tell it when they passivate a run with
a timer; it sleeps until the earliest due time in the store (re-reading it
after every notification, and at least every 30 s), then activates each due
run through its host. A year-long wait costs one row in the store.
"""

from __future__ import annotations

import asyncio
import logging
import os

from dex_agents_ray.engine import _clock as clock
from dex_agents_ray.engine._errors import HostPassivatedError, unwrap
from dex_agents_ray.engine.actors._config import HostConfig
from dex_agents_ray.engine.actors._handles import host_handle
from dex_agents_ray.engine.store._open import open_store
from dex_agents_ray.engine.store._store import FlowStore

logger = logging.getLogger("dex_agents_ray.engine")

_MAX_SLEEP = 30.0


class FlowScheduler:
    """See the module docstring."""

    async def __init__(self, config: HostConfig) -> None:  # type: ignore[misc]
        self._config = config
        self._store: FlowStore = open_store(config.store)
        await self._store.open()
        clock.set_offset(await self._store.clock.offset())
        self._wakeup = asyncio.Event()
        self.woken = 0
        self._loop_task = asyncio.get_running_loop().create_task(self._run())

    def notify(self) -> None:
        """A run was passivated with a timer: look at the due times again."""
        self._wakeup.set()

    def set_clock_offset(self, seconds: float) -> None:
        """A test engine moved the clock: wake the runs now due."""
        clock.set_offset(seconds)
        self._wakeup.set()

    def pid(self) -> int:
        """The actor's process ID (for crash tests)."""
        return os.getpid()

    def node_id(self) -> str:
        """The Ray node the actor runs on (for node-fault tests)."""
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def woken_runs(self) -> int:
        """How many activations the scheduler made (for tests and monitoring)."""
        return self.woken

    async def _run(self) -> None:
        while True:
            # Cleared before reading, so a notification that arrives while the
            # store is read (a run passivated just after the read) wakes us again.
            self._wakeup.clear()
            try:
                for flow_id in await self._store.passivation.due_passivated(clock.now()):
                    await self._wake(flow_id)
                due = await self._store.passivation.next_passivated_wake()
            except Exception:
                logger.exception("scheduler: reading due runs failed; retrying")
                due = clock.now() + 1.0
            delay = _MAX_SLEEP if due is None else min(_MAX_SLEEP, max(0.01, due - clock.now()))
            try:
                await asyncio.wait_for(self._wakeup.wait(), delay)
            except TimeoutError:
                pass

    async def _wake(self, flow_id: str) -> None:
        import ray.exceptions

        for _ in range(100):
            try:
                unwrap(await host_handle(self._config, flow_id).wake.remote(flow_id))
                self.woken += 1
                return
            except (HostPassivatedError, ray.exceptions.RayActorError):
                await asyncio.sleep(0.05)  # the host is leaving; the next one takes the run
        logger.warning("scheduler: could not wake run %s", flow_id)
