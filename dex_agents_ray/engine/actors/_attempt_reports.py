"""What executors and Ray tasks report to a host about the attempts it dispatched.

Start acknowledgements, heartbeats and Stream writes (frames), results sent
ahead of a batch, and the question of which calls still run. Each report names
its attempt by (run, execution, attempt or dispatch number); an executor's
reports also carry the name the host gave the dispatch, so a report about an
earlier incarnation of the host is refused (see :meth:`AttemptReports.from_here`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from dex_agents_ray.engine.actors._pool import ExecutorPool
from dex_agents_ray.engine.actors._residents import ResidentRuns
from dex_agents_ray.engine.run._remote import decode_frame


class AttemptReports:
    """Hands each report to the run it concerns; see the module docstring."""

    def __init__(self, runs: ResidentRuns, pool: ExecutorPool, suffix: str) -> None:
        self._runs = runs
        self._pool = pool
        self._suffix = suffix

    def from_here(self, host_name: str | None) -> bool:
        """Whether an executor's call concerns attempts this incarnation dispatched
        (``host_name``: the name they were sent with; ``None``: not said). A
        call about an earlier incarnation's attempt is refused: its attempt key
        (run, execution, attempt number) may name one this incarnation sent
        again after reloading the run, and must not pass for it."""
        return host_name is None or host_name.endswith(self._suffix)

    async def ack_start(self, flow_id: str, exec_id: str, attempt: int) -> bool:
        """A Ray task's attempt starts: whether it may run."""
        driver = self._runs.live(flow_id)
        if driver is None:
            return False
        return await driver.attempts.ack_remote_start(exec_id, attempt)

    def frame(self, flow_id: str, exec_id: str, attempt: int, kind: str, payload: bytes) -> None:
        """A heartbeat or Stream write of a Ray task's attempt."""
        driver = self._runs.held(flow_id)
        if driver is not None:
            driver.attempts.on_frame(exec_id, attempt, decode_frame(kind, payload))

    def frames(self, frames: list[tuple[str, str, int, str, bytes]], host_name: str | None) -> None:
        """An executor's heartbeats and Stream writes, in the order they happened."""
        if not self.from_here(host_name):
            return
        for flow_id, exec_id, dispatch, kind, payload in frames:
            driver = self._runs.held(flow_id)
            if driver is not None:
                driver.attempts.on_dispatch_frame(exec_id, dispatch, decode_frame(kind, payload))

    def results(
        self, results: list[tuple[tuple[str, str, int], Any]], host_name: str | None
    ) -> None:
        """Outcomes of attempts an executor finished ahead of its batch."""
        if self.from_here(host_name):
            self._pool.deliver(results)

    async def ack_starts(
        self, attempts: list[tuple[str, str, int]], host_name: str | None
    ) -> list[bool]:
        """An executor's start acknowledgements: one commit per run."""
        if not self.from_here(host_name):
            return [False] * len(attempts)
        by_run: dict[str, list[int]] = {}
        for index, (flow_id, _, _) in enumerate(attempts):
            by_run.setdefault(flow_id, []).append(index)
        answers = [False] * len(attempts)

        async def one_run(flow_id: str, indexes: list[int]) -> None:
            driver = self._runs.live(flow_id)
            if driver is None:
                return
            batch = [(attempts[i][1], attempts[i][2]) for i in indexes]
            for index, answer in zip(
                indexes, await driver.attempts.ack_dispatches(batch), strict=True
            ):
                answers[index] = answer

        await asyncio.gather(*(one_run(f, i) for f, i in by_run.items()))
        return answers

    def live(self, attempts: list[tuple[str, str, int]], host_name: str | None) -> list[bool]:
        """Whether each (flow ID, execution ID, dispatch number) still runs for this host."""
        if not self.from_here(host_name):
            return [False] * len(attempts)
        live = []
        for flow_id, exec_id, dispatch in attempts:
            driver = self._runs.live(flow_id)
            live.append(driver is not None and driver.attempts.dispatch_active(exec_id, dispatch))
        return live
