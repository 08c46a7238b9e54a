"""Live control of a run from another process: status, pause, resume, cancel.

One named, detached Ray actor per run (``dexeval:<run_id>`` in the engine's
namespace) holds the run's state and its latest progress. ``run_eval`` reads
the state before it schedules each case: paused, it waits; cancelled, it
schedules nothing more, and the cases already running have their turns
cancelled (``cancel_turn``) by ``cancel_run``.
"""

from __future__ import annotations

import asyncio
import dataclasses
from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dex_agents_ray.evals._runner import EvalProgress

__all__ = ["EvalControl", "RunState"]


class RunState(StrEnum):
    """What a run's driver may do."""

    RUNNING = "running"
    PAUSED = "paused"
    """Schedule no new case until resumed (running cases go on)."""
    CANCELLED = "cancelled"
    """Schedule nothing more; running cases' turns are cancelled."""


def _control_actor_class() -> type[Any]:
    """The control actor's class, made in a function so that Ray ships it by value:
    its worker process imports nothing of this package (importing the package
    costs a worker about 0.6 s of CPU, for an actor that holds a few fields).
    So it names only the standard library: states are plain strings."""

    class _ControlActor:
        def __init__(self) -> None:
            self._state = "running"
            self._progress: dict[str, Any] = {}
            self._changed = asyncio.Event()

        async def open(self, total: int, reset: bool) -> None:
            self._progress = {"total": total}
            if reset:  # an earlier run of the ID left its state here
                self._set("running")

        def _set(self, state: str) -> None:
            self._state = state
            self._changed.set()
            self._changed = asyncio.Event()

        async def set_state(self, state: str) -> str:
            self._set(state)
            return self._state

        async def state(self) -> str:
            return self._state

        async def wait_changed(self, timeout: float) -> None:
            try:
                await asyncio.wait_for(self._changed.wait(), timeout)
            except TimeoutError:
                pass

        async def publish(self, progress: dict[str, Any]) -> None:
            self._progress = progress

        async def status(self) -> dict[str, Any]:
            return {**self._progress, "state": self._state}

    return _ControlActor


_actor_class: Any = None


def _actor(run_id: str, namespace: str | None, create: bool) -> tuple[Any, bool]:
    """The run's actor handle, and whether this call created the actor."""
    global _actor_class
    import ray

    name = f"dexeval:{run_id}"
    try:
        return ray.get_actor(name, namespace=namespace), False
    except ValueError:
        if not create:
            raise
    if _actor_class is None:
        _actor_class = ray.remote(_control_actor_class())
    handle = _actor_class.options(
        name=name,
        namespace=namespace,
        lifetime="detached",
        get_if_exists=True,
        num_cpus=0,
        max_concurrency=64,
    ).remote()
    return handle, True


class EvalControl:
    """The control handle of run ``run_id`` (``create=False``: the run must exist;
    ``ValueError`` otherwise)."""

    def __init__(self, run_id: str, *, namespace: str | None = None, create: bool = True) -> None:
        self.run_id = run_id
        try:
            self._handle, self._created = _actor(run_id, namespace, create)
        except ValueError as error:
            raise ValueError(
                f"no eval run {run_id!r} in namespace {namespace!r} (its driver runs "
                "nowhere on this cluster)"
            ) from error

    async def open(self, total: int) -> None:
        """Begin the run: its total, and the state back to running where an earlier run
        of the ID left the actor. An actor this handle created starts running, and a
        pause sent while it starts is kept: the call is sent, not waited for (the
        actor's process starts while the first cases run; Ray hands it this
        driver's calls in order)."""
        reference = self._handle.open.remote(total, not self._created)
        if not self._created:
            await reference

    async def state(self) -> RunState:
        return RunState(await self._handle.state.remote())

    async def set_state(self, state: RunState) -> RunState:
        return RunState(await self._handle.set_state.remote(RunState(state).value))

    async def wait_changed(self, timeout: float) -> None:
        await self._handle.wait_changed.remote(timeout)

    async def publish(self, progress: EvalProgress) -> None:
        data = dataclasses.asdict(progress)
        data["state"] = progress.state.value
        await self._handle.publish.remote(data)

    async def status(self) -> dict[str, Any]:
        """The state and the latest progress the driver published."""
        result: dict[str, Any] = await self._handle.status.remote()
        return result
