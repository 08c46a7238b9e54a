"""Passivation: a host lets runs that only wait leave memory.

A run without activity for ``passivate_after`` is recorded passivated in the
store (fenced by its epoch, with the time its timer needs it back) and its
driver stops; the scheduler wakes it when that time comes, and any client call
activates it again. A dedicated host whose run left ends its process.
"""

from __future__ import annotations

import asyncio
import logging
import time

from dex_agents_ray.engine import _clock as clock
from dex_agents_ray.engine._exit_hooks import run_exit_hooks
from dex_agents_ray.engine._metrics import record_run_passivated
from dex_agents_ray.engine.actors._config import HostConfig
from dex_agents_ray.engine.actors._handles import scheduler_handle
from dex_agents_ray.engine.actors._placement import PlacementMode
from dex_agents_ray.engine.actors._residents import ResidentRuns
from dex_agents_ray.engine.run._driver import RunDriver
from dex_agents_ray.engine.store._store import FlowStore

logger = logging.getLogger("dex_agents_ray.engine")


class Passivator:
    """Watches one host's runs for idleness; see the module docstring."""

    def __init__(self, runs: ResidentRuns, store: FlowStore, config: HostConfig) -> None:
        self._runs = runs
        self._store = store
        self._config = config
        self._dedicated = config.placement.mode is PlacementMode.DEDICATED
        self.passivated = 0
        """Runs this host passivated so far."""

    async def watch(self, idle: float) -> None:
        """Let runs that only wait leave memory after ``idle`` seconds without activity."""
        while not self._runs.exiting:
            await asyncio.sleep(max(0.05, idle / 4))
            now = time.monotonic()
            for flow_id, driver in self._runs.items():
                if now - driver.last_activity >= idle:
                    try:
                        await self._passivate(flow_id, driver, idle)
                    except Exception:
                        logger.exception("run %s: passivation failed; it stays", flow_id)
            if self._dedicated and self._runs.empty and self.passivated > 0:
                await self._exit()
                return

    async def _passivate(self, flow_id: str, driver: RunDriver, idle: float) -> None:
        async with driver.commit_lock:
            ok, wake_at = driver.passivation(clock.now(), idle)
            if not ok or self._runs.held(flow_id) is not driver:
                return
            if self._dedicated:
                self._runs.exiting = True  # refuse calls from now on: the client retries
            try:
                await self._store.passivation.passivate(flow_id, driver.epoch, wake_at)
            except Exception:
                self._runs.exiting = False
                raise
            self._runs.release(flow_id)
            self.passivated += 1
            record_run_passivated()
        await driver.stop()
        if wake_at is not None:
            scheduler_handle(self._config).notify.remote()
        logger.info("run %s passivated (wake at %s)", flow_id, wake_at)

    async def _exit(self) -> None:
        """A dedicated host whose run left: end this process (the name is freed)."""
        import ray

        self._runs.exiting = True
        await self._store.close()
        run_exit_hooks()
        ray.kill(ray.get_runtime_context().current_actor, no_restart=True)
