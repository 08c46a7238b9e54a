"""Live control of a run from another process: status, pause, resume, cancel.

One named, detached Ray actor per namespace (``dexeval`` in the engine's
namespace) holds each run's state and its latest progress, so a run costs no
process of its own (a worker process per run, kept for good, cost about 0.6 s of
CPU as the run started and 130 MB ever after). ``run_eval`` follows the state
as it schedules: paused, it waits; cancelled, it schedules nothing more, and the
cases already running have their turns cancelled (``cancel_turn``). A driver
interrupted (cancelled, ``SIGTERM``, ``ray job stop``) or failed ``close``s its
run: the actor forgets it, so no one reads a driver that is gone as running, and
the next ``open`` of the run ID (its rerun) starts it again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
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


ACTOR_NAME = "dexeval"
"""The control actor's name in the engine's namespace."""


def _control_actor_class() -> type[Any]:
    """The control actor's class, made in a function so that Ray ships it by value:
    its worker process imports nothing of this package (importing the package
    costs a worker about 0.6 s of CPU, for an actor that holds a few fields).
    So it names only the standard library: states are plain strings, and a run
    it does not know answers ``None``."""

    class _ControlActor:
        def __init__(self) -> None:
            self._runs: dict[str, dict[str, Any]] = {}

        def _run(self, run_id: str) -> dict[str, Any] | None:
            return self._runs.get(run_id)

        async def open(self, run_id: str, total: int | None) -> None:
            run = self._runs.setdefault(run_id, {"changed": asyncio.Event()})
            run["progress"] = {"total": total}
            self._set(run, "running")  # a rerun of the ID starts running again

        def _set(self, run: dict[str, Any], state: str) -> None:
            run["state"] = state
            run["changed"].set()
            run["changed"] = asyncio.Event()

        async def set_state(self, run_id: str, state: str) -> str | None:
            run = self._run(run_id)
            if run is None:
                return None
            self._set(run, state)
            return state

        async def state(self, run_id: str) -> str | None:
            run = self._run(run_id)
            return None if run is None else str(run["state"])

        async def wait_changed(self, run_id: str, timeout: float) -> None:
            run = self._run(run_id)
            if run is None:
                return
            try:
                await asyncio.wait_for(run["changed"].wait(), timeout)
            except TimeoutError:
                pass

        async def publish(self, run_id: str, progress: dict[str, Any]) -> None:
            run = self._run(run_id)
            if run is not None:
                run["progress"] = progress

        async def status(self, run_id: str) -> dict[str, Any] | None:
            run = self._run(run_id)
            return None if run is None else {**run["progress"], "state": run["state"]}

        async def close(self, run_id: str) -> None:
            # Its one waiter (``wait_changed``) is the closing driver's, stopped first.
            self._runs.pop(run_id, None)

    return _ControlActor


_actor_class: Any = None
logger = logging.getLogger("dex_agents_ray.evals")


def _gone(error: BaseException) -> bool:
    """Whether ``error`` says the control actor is gone for good (its process or
    its node died), not that a call failed."""
    import ray.exceptions

    return isinstance(error, ray.exceptions.ActorDiedError)


def _actor(namespace: str | None, create: bool) -> tuple[Any, bool]:
    """The namespace's control actor (created when ``create`` and missing), and
    whether this call created it."""
    global _actor_class
    import ray

    try:
        return ray.get_actor(ACTOR_NAME, namespace=namespace), False
    except ValueError:
        if not create:
            raise
    if _actor_class is None:
        _actor_class = ray.remote(_control_actor_class())
    handle = _actor_class.options(
        name=ACTOR_NAME,
        namespace=namespace,
        lifetime="detached",
        get_if_exists=True,
        num_cpus=0,
        max_concurrency=1000,
    ).remote()
    return handle, True


class EvalControl:
    """The control handle of run ``run_id`` (``create=False``: the run must exist;
    ``ValueError`` otherwise, from the constructor or, for a run its namespace's
    actor does not know, from the first call)."""

    def __init__(self, run_id: str, *, namespace: str | None = None, create: bool = True) -> None:
        self.run_id = run_id
        self.namespace = namespace
        self._opening: asyncio.Future[Any] | None = None
        self._opened_here = False
        self._total: int | None = None
        try:
            self._handle, self._created = _actor(namespace, create)
        except ValueError as error:
            raise self._unknown() from error

    def _unknown(self) -> ValueError:
        return ValueError(
            f"no eval run {self.run_id!r} in namespace {self.namespace!r} (its driver runs "
            "nowhere on this cluster)"
        )

    def _known(self, answer: Any) -> Any:
        if answer is None:
            raise self._unknown()
        return answer

    async def open(self, total: int | None) -> None:
        """Begin the run: its total (``None``: not known, the cases come from a
        stream), and its state running (an earlier run of the ID may have left it
        cancelled). To an actor this handle created the call is
        sent, not waited for: its process starts while the first cases run, and
        this handle's other calls wait for it."""
        self._total = total
        self._opened_here = True
        self._opening = asyncio.ensure_future(self._handle.open.remote(self.run_id, total))
        if not self._created:
            await self._opened()

    async def _opened(self) -> None:
        """Wait for this handle's ``open`` (its other calls come after it)."""
        if self._opening is not None:
            opening, self._opening = self._opening, None
            try:
                await opening
            except Exception as error:
                if not _gone(error):
                    raise
                await self._replace()

    async def _call(self, method: str, *args: Any) -> Any:
        """Call the actor; when it is gone (its node died, say), a new one is made
        (the name is free again) and, for the run this handle opened, the run is
        opened on it before the call is tried once more. What the old actor held
        (a pause or cancel asked meanwhile, the last progress) went with it."""
        await self._opened()
        try:
            return await getattr(self._handle, method).remote(self.run_id, *args)
        except Exception as error:
            if not _gone(error):
                raise
        await self._replace()
        return await getattr(self._handle, method).remote(self.run_id, *args)

    async def _replace(self) -> None:
        logger.warning(
            "eval %s: the control actor of namespace %r is gone; a new one takes over",
            self.run_id,
            self.namespace,
        )
        self._handle, self._created = _actor(self.namespace, True)
        if self._opened_here:
            await self._handle.open.remote(self.run_id, self._total)

    async def state(self) -> RunState:
        return RunState(self._known(await self._call("state")))

    async def set_state(self, state: RunState) -> RunState:
        value = RunState(state).value
        return RunState(self._known(await self._call("set_state", value)))

    async def wait_changed(self, timeout: float) -> None:
        await self._call("wait_changed", timeout)

    async def publish(self, progress: EvalProgress) -> None:
        data = dataclasses.asdict(progress)
        data["state"] = progress.state.value
        await self._call("publish", data)

    async def status(self) -> dict[str, Any]:
        """The state and the latest progress the driver published."""
        result: dict[str, Any] = self._known(await self._call("status"))
        return result

    async def close(self) -> None:
        """End the run: its driver is gone (interrupted or failed). The actor
        forgets it (``status`` raises ``ValueError``, as for a run it never knew)
        until the run ID is opened again."""
        await self._call("close")
