"""A store-fault campaign: agent sessions on PostgreSQL while the server crash-restarts.

24 sessions (``--sessions``) run 40 turns each (``--turns``) on a throwaway local
PostgreSQL 15 server (``scripts/services`` installs it) while the server is
crash-restarted (``pg_ctl restart -m immediate``) every 2-4 s (``--every``).
Turns alternate between a turn that calls a read and an idempotent write, and a
turn that calls a single-attempt write the client approves. The client polls
each session's snapshot every 200 ms while it waits for the session.

Printed: restarts, client calls made and client calls that raised (the goal is
0), and the invariants checked at the end: every session finished every turn,
each user message appears once, and each approved single-attempt write ran
exactly once.

    .venv/bin/python benchmarks/store_restarts.py [--sessions 24] [--turns 40] [--every 2 4]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.peers.ray_env import use_repository  # noqa: E402

use_repository()

T = TypeVar("T")


class Campaign:
    def __init__(self) -> None:
        self.calls = 0
        self.errors: list[str] = []

    async def call(self, what: str, operation: Awaitable[T]) -> T:
        self.calls += 1
        try:
            return await operation
        except Exception as error:
            self.errors.append(f"{what}: {type(error).__name__}: {error}")
            raise


async def _wait(campaign: Campaign, sessions: Any, session_id: str, check: Any) -> Any:
    deadline = time.monotonic() + 600
    while True:
        snapshot = await campaign.call(
            "get_agent_snapshot", sessions.get_agent_snapshot(session_id)
        )
        if check(snapshot):
            return snapshot
        if time.monotonic() > deadline:
            raise TimeoutError(f"{session_id} stuck: {snapshot.state}")
        await asyncio.sleep(0.2)


def _done(turns: int) -> Callable[[Any], bool]:
    def check(snapshot: Any) -> bool:
        state = snapshot.state
        return state is not None and state.turn_count >= turns and state.active_turn_id is None

    return check


async def _session(campaign: Campaign, sessions: Any, session_id: str, turns: int) -> None:
    for turn in range(1, turns + 1):
        text = f"pay {turn}" if turn % 2 == 0 else f"go {turn}"
        if turn == 1:
            await campaign.call("start", sessions.start_session(session_id, text))
        else:
            await campaign.call("send", sessions.send_user_message(session_id, text))
        if text.startswith("pay"):
            waiting = await _wait(campaign, sessions, session_id, lambda s: s.pending_interrupts)
            interrupt = waiting.pending_interrupts[0].interrupt_id
            await campaign.call(
                "approve", sessions.resolve_interrupt(session_id, interrupt, approved=True)
            )
        await _wait(campaign, sessions, session_id, _done(turn))


async def main(count: int, turns: int, every: tuple[float, float]) -> int:
    import psycopg

    from dex_agents_ray import AgentSessionClient, AgentSessionOptions, ToolEffect, ToolPolicy
    from dex_agents_ray.engine import FlowEngine
    from dex_agents_ray.testing import InvocationLog
    from tests.session.agents import Call, Reply, build_flow
    from tests.stores.postgres_server import find_bin_dir, running_server

    bin_dir = find_bin_dir()
    if bin_dir is None:
        raise SystemExit("PostgreSQL is not installed: run scripts/services")
    state_dir = Path(tempfile.mkdtemp(prefix="dex-restarts-"))
    options = AgentSessionOptions(
        tool_policies={
            "look": ToolPolicy(ToolEffect.READ, requires_approval=False),
            "save": ToolPolicy(ToolEffect.IDEMPOTENT_WRITE, requires_approval=False),
            "pay": ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE, requires_approval=True),
        }
    )
    script: dict[str, list[Reply]] = {}
    for turn in range(1, turns + 1):
        if turn % 2 == 0:
            script[f"pay {turn}"] = [Reply(calls=[Call(f"p{turn}", "pay")]), Reply()]
        else:
            calls = [Call(f"l{turn}", "look"), Call(f"s{turn}", "save")]
            script[f"go {turn}"] = [Reply(calls=calls), Reply()]
    flow = build_flow(state_dir, script, options=options, flow_type="RestartCampaign")
    with running_server(bin_dir) as server:
        name = f"campaign_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        import ray

        # Faults are expected here: keep the hosts' and drivers' retry logs off the screen.
        logging.getLogger("psycopg").setLevel(logging.ERROR)
        logging.getLogger("dex_agents_ray").setLevel(logging.ERROR)
        ray.init(include_dashboard=False, log_to_driver=False, namespace="restarts")
        engine = await FlowEngine.start([flow], store=server.dsn(name), namespace="restarts")
        sessions = AgentSessionClient(engine.client, flow)
        campaign = Campaign()
        restarts = 0
        ids = [f"session-{i}" for i in range(count)]
        start = time.monotonic()
        work = asyncio.gather(*(_session(campaign, sessions, i, turns) for i in ids))

        async def crash() -> None:
            nonlocal restarts
            while not work.done():
                try:
                    await asyncio.wait_for(asyncio.shield(work), random.uniform(*every))
                except TimeoutError:
                    await asyncio.to_thread(server.restart, "immediate")
                    restarts += 1
                    print(f"  restart {restarts} at {time.monotonic() - start:.0f} s", flush=True)
                except Exception:
                    return

        crasher = asyncio.create_task(crash())
        try:
            await work
        finally:
            await crasher
        wall = time.monotonic() - start
        violations = []
        for session_id in ids:
            snapshot = await sessions.get_agent_snapshot(session_id)
            users = [m.text for m in snapshot.messages if m.role.value == "user"]
            expected = [f"pay {t}" if t % 2 == 0 else f"go {t}" for t in range(1, turns + 1)]
            if users != expected:
                violations.append(f"{session_id}: user messages {users}")
        pays = InvocationLog(state_dir / "pay.log").entries()
        keys = sorted(e.split("/", 2)[2].rsplit("/", 1)[0] for e in pays)
        wanted = sorted(f"{i}/turn-{t}/p{t}" for i in ids for t in range(2, turns + 1, 2))
        if keys != wanted:
            violations.append(f"single-attempt writes ran {len(keys)} times, {len(wanted)} wanted")
        await engine.shutdown(stop_hosts=True)
        ray.shutdown()
    print(f"\nstore restarts: {count} sessions x {turns} turns on PostgreSQL, {wall:.0f} s")
    print(f"  server crash-restarts (pg_ctl restart -m immediate): {restarts}")
    print(f"  client calls: {campaign.calls}")
    print(f"  client calls that raised: {len(campaign.errors)}")
    for error in campaign.errors[:10]:
        print(f"    {error}")
    print(f"  invariant violations: {len(violations)}")
    for violation in violations:
        print(f"    {violation}")
    return 1 if campaign.errors or violations else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sessions", type=int, default=24)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--every", type=float, nargs=2, default=(2.0, 4.0), metavar=("MIN", "MAX"))
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.sessions, args.turns, tuple(args.every))))
