"""A ``ray job submit`` job of agent sessions: start them, drive their turns,
answer approvals by policy, print a table, and leave waiting sessions waiting.

Each session is a durable flow run in the store, so a session this job leaves
waiting for a person (an approval, a question) keeps waiting after the job
exits, holding no process; any later driver on the same store and namespace
answers it (``dex-agents-ray sessions``, a notebook, or
``AgentSessionClient.resolve_interrupt``).

Submit it to a local head (``cluster/local-head.sh``)::

    export RAY_AUTH_MODE=token
    .venv/bin/ray job submit --address http://127.0.0.1:8265 --working-dir . \\
        --runtime-env-json '{"excludes": [".venv", ".git", "tests", ".dex-agents-ray"]}' \\
        -- "$PWD/.venv/bin/python" examples/session_job.py \\
        --agent actors.support:flow --sessions 4 --leave-waiting 1 --store /tmp/dex-jobs.db

(the entrypoint names the interpreter that has the package installed; on a
cluster whose image installs ``dex-agents-ray``, plain ``python`` does), or run it
directly: ``.venv/bin/python examples/session_job.py`` starts a local Ray.

The store must be reachable from every node: a PostgreSQL DSN on a cluster,
a SQLite file only on one machine.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

# Run from a checkout (``python examples/session_job.py``): the ready agents live in
# ``actors/`` at the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dex_agents_ray import (  # noqa: E402
    AgentSessionClient,
    AgentSessionFlow,
    AgentSnapshot,
    InterruptKind,
)
from dex_agents_ray.engine import FlowEngine  # noqa: E402

DEFAULT_MESSAGES = ("Where is order A2?", "Please refund 300 on order A1.")


@dataclass
class Outcome:
    """How one session ended in this job."""

    session_id: str
    status: str
    """``done``, ``waiting`` (for a person) or ``failed``."""
    turns: int
    detail: str


def load_flow(reference: str) -> AgentSessionFlow:
    """The Flow named ``module:attr`` (for example ``actors.support:flow``)."""
    module_name, _, attr = reference.partition(":")
    if not module_name or not attr:
        raise SystemExit(f"--agent must be module:attr, got {reference!r}")
    try:
        value = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as error:
        raise SystemExit(f"--agent {reference}: {error}") from None
    if not isinstance(value, AgentSessionFlow):
        raise SystemExit(f"--agent {reference} is a {type(value).__name__}, not a session Flow")
    return value


async def drive(
    sessions: AgentSessionClient,
    session_id: str,
    messages: list[str],
    *,
    approve: bool,
    answer: str | None,
    leave_waiting: bool,
    timeout: float,
) -> Outcome:
    """Run ``messages`` as turns; answer interrupts by the policy or leave them."""
    deadline = time.monotonic() + timeout
    handled: set[str] = set()
    for turn, text in enumerate(messages, start=1):
        if turn == 1:
            await sessions.start_session(session_id, text)
        else:
            await sessions.send_user_message(session_id, text)
        while True:
            snapshot = await sessions.get_agent_snapshot(session_id)
            state = snapshot.state
            if state is not None and state.turn_count >= turn and state.active_turn_id is None:
                if state.last_turn_error:
                    return Outcome(session_id, "failed", turn, state.last_turn_error)
                break
            for interrupt in snapshot.pending_interrupts:
                if interrupt.interrupt_id in handled:
                    continue
                if leave_waiting or (interrupt.kind is InterruptKind.QUESTION and answer is None):
                    return Outcome(
                        session_id,
                        "waiting",
                        turn,
                        f"{interrupt.kind.value} {interrupt.interrupt_id} ({interrupt.tool_name})",
                    )
                handled.add(interrupt.interrupt_id)
                if interrupt.kind is InterruptKind.QUESTION and answer is not None:
                    await sessions.answer_question(session_id, interrupt.interrupt_id, answer)
                else:
                    await sessions.resolve_interrupt(
                        session_id,
                        interrupt.interrupt_id,
                        approved=approve,
                        rejection_message=None if approve else "rejected by the job's policy",
                    )
            if time.monotonic() > deadline:
                return Outcome(session_id, "failed", turn, f"turn {turn} timed out")
            await asyncio.sleep(0.1)
    return Outcome(session_id, "done", len(messages), _last_answer(snapshot))


def _last_answer(snapshot: AgentSnapshot) -> str:
    for message in reversed(snapshot.messages):
        if message.role.value == "assistant" and message.text:
            return message.text
    return ""


def print_table(outcomes: list[Outcome]) -> None:
    rows = [("session", "status", "turns", "detail")] + [
        (o.session_id, o.status, str(o.turns), o.detail[:70]) for o in outcomes
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for index, row in enumerate(rows):
        print("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:3])) + "  " + row[3])
        if index == 0:
            print("  ".join("-" * w for w in widths) + "  " + "-" * 6)


async def main(args: argparse.Namespace) -> int:
    flow = load_flow(args.agent)
    messages = list(args.message or DEFAULT_MESSAGES)
    engine = await FlowEngine.start([flow], store=args.store, namespace=args.namespace)
    try:
        sessions = AgentSessionClient(engine.client, flow)
        ids = [f"{args.prefix}-{i}" for i in range(args.sessions)]
        first_left = args.sessions - args.leave_waiting
        outcomes = await asyncio.gather(
            *(
                drive(
                    sessions,
                    session_id,
                    messages,
                    approve=args.approve == "all",
                    answer=args.answer,
                    leave_waiting=i >= first_left,
                    timeout=args.timeout,
                )
                for i, session_id in enumerate(ids)
            )
        )
    finally:
        # Waiting sessions stay in the store; the hosts go with the job.
        await engine.shutdown(stop_hosts=True)
    print_table(list(outcomes))
    summary = {
        status: [o.session_id for o in outcomes if o.status == status]
        for status in ("done", "waiting", "failed")
    }
    print("summary " + json.dumps(summary))
    return 1 if summary["failed"] else 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--agent", default="actors.support:flow", help="the Flow, module:attr")
    parser.add_argument("--sessions", type=int, default=3, help="how many sessions to start")
    parser.add_argument("--store", default=None, help="SQLite path or postgresql:// DSN")
    parser.add_argument("--namespace", default="dex-jobs", help="the engine's Ray namespace")
    parser.add_argument("--prefix", default="job-session", help="session ID prefix")
    parser.add_argument(
        "--message", action="append", help="a user message per turn (repeat; default: two turns)"
    )
    parser.add_argument(
        "--approve", choices=("all", "none"), default="all", help="approve or reject approvals"
    )
    parser.add_argument("--answer", default=None, help="answer questions with this text")
    parser.add_argument(
        "--leave-waiting",
        type=int,
        default=0,
        help="the last N sessions leave their approvals and questions for a person",
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per session")
    args = parser.parse_args(argv)
    if args.sessions < 1:
        parser.error("--sessions must be at least 1")
    if not 0 <= args.leave_waiting <= args.sessions:
        parser.error("--leave-waiting must be between 0 and --sessions")
    return args


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
