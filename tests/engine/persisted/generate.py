"""Write the persisted-store fixture with the checkout this runs in.

Run from a checkout's root (its package installed, ``agents.py`` beside this)::

    python -m tests.engine.persisted.generate tests/engine/persisted

It starts a local Ray and two engines in turn on a fresh SQLite store, and
leaves in it:

- ``passivated``: a support session whose first turn ended, passivated (it left
  memory; a user message brings it back);
- ``approval``: a support session mid-turn, waiting in ``AwaitToolApproval``
  for ``refund_order`` (a non-idempotent write);
- ``reminder``: a ``ReminderFlow`` run waiting on a durable timer of a century,
  its definition stored by value (as a Flow defined in a script is).

Then it stops every host (the runs stay in the store, as after a shutdown) and
writes the store, compacted into one file (``VACUUM INTO``: no WAL beside it),
to ``<out>/store.db``, with ``<out>/store.json`` saying which commit wrote it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import subprocess
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from tests.engine.persisted import reminders
from tests.engine.persisted.agents import GREETING, REFUND_PROMPT, support_flow
from tests.engine.persisted.reminders import REMINDER_DAYS, REMINDER_TEXT, Reminder, ReminderFlow

ROOT = Path(__file__).resolve().parents[3]


async def _until(probe: Callable[[], Awaitable[bool]], what: str, timeout: float = 120.0) -> None:
    """Poll ``probe`` until it holds; fail naming ``what`` after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await probe():
        if loop.time() > deadline:
            raise TimeoutError(f"{what} not reached within {timeout} s")
        await asyncio.sleep(0.05)


async def _passivated_session(store: Path, namespace: str) -> None:
    """Finish a first turn and wait until the session leaves memory."""
    from dex_agents_ray import AgentSessionClient
    from dex_agents_ray.engine import FlowEngine

    flow = support_flow()
    engine = await FlowEngine.start(
        [flow, ReminderFlow()],
        store=store,
        namespace=namespace,
        passivate_after=timedelta(seconds=1),
        placement="dedicated",
    )
    try:
        sessions = AgentSessionClient(engine.client, flow)
        await sessions.start_session("passivated", GREETING)

        async def turn_done() -> bool:
            state = (await sessions.get_agent_snapshot("passivated")).state
            return state is not None and state.turn_count == 1 and state.active_turn_id is None

        await _until(turn_done, "the end of the first turn")

        async def passivated() -> bool:  # the store only: a client call would wake it
            return bool(await engine.store.passivation.passivated_count() == 1)

        await _until(passivated, "the session's passivation")
    finally:
        await engine.shutdown(stop_hosts=True)


async def _waiting_runs(store: Path, namespace: str) -> None:
    """Leave a session waiting for an approval and a Flow waiting on its timer."""
    from dex_agents_ray import AgentSessionClient
    from dex_agents_ray.engine import FlowEngine

    flow = support_flow()
    reminders = ReminderFlow()
    # No resume: the passivated session stays as it is.
    engine = await FlowEngine.start(
        [flow, reminders], store=store, namespace=namespace, resume=False
    )
    try:
        sessions = AgentSessionClient(engine.client, flow)
        await sessions.start_session("approval", REFUND_PROMPT)

        async def pending() -> bool:
            return bool((await sessions.get_agent_snapshot("approval")).pending_interrupts)

        await _until(pending, "the approval request")
        await engine.client.start_flow(
            reminders, "reminder", Reminder(days=REMINDER_DAYS, text=REMINDER_TEXT)
        )

        async def armed() -> bool:
            history = await engine.store.runs.history("reminder")
            return any(
                h.exec_id == "RemindWhenDue-1" and h.event == "wait_for_completed" for h in history
            )

        await _until(armed, "the reminder's timer")
    finally:
        await engine.shutdown(stop_hosts=True)


def _commit() -> dict[str, Any]:
    """Which code wrote the store: the checkout's commit, and whether it had changes."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True
        ).stdout.strip()

    changed = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": git("rev-parse", "HEAD"), "changed": bool(changed)}


async def _write_runs(store: Path) -> None:
    """Leave the fixture's runs in ``store``, with a Ray of this process's own."""
    import ray
    from ray import cloudpickle

    from dex_agents_ray.engine._engine import task_worker_system_config

    cloudpickle.register_pickle_by_value(reminders)  # type: ignore[no-untyped-call]
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    # Ray workers import the Flows' modules by name: put the checkout on their path.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
    )
    namespace = f"persisted-{uuid.uuid4().hex[:8]}"
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        _system_config=task_worker_system_config(),
        namespace=namespace,
        log_to_driver=False,
    )
    try:
        await _passivated_session(store, namespace)
        await _waiting_runs(store, namespace)
    finally:
        ray.shutdown()


def generate(out: Path) -> Path:
    """Write the fixture store into ``out``; returns its path."""
    out.mkdir(parents=True, exist_ok=True)
    target = out / "store.db"
    with tempfile.TemporaryDirectory() as scratch:
        store = Path(scratch) / "engine.db"
        asyncio.run(_write_runs(store))
        target.unlink(missing_ok=True)
        conn = sqlite3.connect(store)
        try:
            conn.execute("VACUUM INTO ?", (str(target),))
        finally:
            conn.close()
    (out / "store.json").write_text(json.dumps(_commit(), indent=2) + "\n")
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description="Write the persisted-store fixture.")
    parser.add_argument("out", type=Path, help="the folder for store.db and store.json")
    target = generate(parser.parse_args().out)
    print(f"wrote {target} ({target.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
