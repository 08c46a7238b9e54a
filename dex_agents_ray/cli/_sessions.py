"""``dex-agents-ray sessions``: operate sessions of a running engine from a shell.

    dex-agents-ray sessions list [--waiting] [--limit N]
    dex-agents-ray sessions show ID
    dex-agents-ray sessions events ID [--follow]
    dex-agents-ray sessions send ID TEXT
    dex-agents-ray sessions approve ID INTERRUPT
    dex-agents-ray sessions reject ID INTERRUPT [--message TEXT]
    dex-agents-ray sessions answer ID INTERRUPT TEXT
    dex-agents-ray sessions steer ID TEXT
    dex-agents-ray sessions cancel ID [--turn TURN]

Every subcommand takes the connection flags (``--address``, ``--namespace``,
``--store``, ``--agent``) and ``--json``. Exit status: 0 done; 1 the session
refused (nothing changed: the interrupt was no longer pending, no turn was
active, ...); 2 bad usage (flags, ``--agent``); 3 no such session or interrupt.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from dex import LongPollTimeoutError
from dex.runtime_errors import FlowNotFoundError

from dex_agents_ray.cli._connection import (
    ConnectionOptions,
    connection_options,
    connection_parser,
    load_agents,
    start_engine,
)
from dex_agents_ray.errors import DexAgentsError
from dex_agents_ray.session import (
    AgentEvent,
    AgentInterrupt,
    AgentSessionClient,
    AgentSessionFlow,
    AgentSnapshot,
    FlowClient,
)
from dex_agents_ray.session_listing import message_line

DONE, REFUSED, USAGE, NOT_FOUND = 0, 1, 2, 3


class _Exit(DexAgentsError):
    """End the subcommand with ``code`` after printing ``message`` to stderr."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def add_sessions_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``sessions`` and its subcommands, each with the connection flags."""
    sessions = sub.add_parser(
        "sessions",
        help="list, inspect and operate sessions of a running engine",
        description="Operate the sessions of a running engine. Exit status: 0 done, "
        "1 refused by the session (nothing changed), 2 bad usage, 3 no such session "
        "or interrupt.",
    )
    actions = sessions.add_subparsers(dest="action", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parents = [connection_parser(), common]

    def action(name: str, help_text: str) -> argparse.ArgumentParser:
        return actions.add_parser(name, parents=parents, help=help_text, description=help_text)

    listing = action("list", "the sessions, most recently active first")
    listing.add_argument("--waiting", action="store_true", help="only those waiting for a person")
    listing.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    action("show", "one session: state, transcript, tool calls, interrupts, usage").add_argument(
        "session_id", metavar="ID"
    )
    events = action("events", "the session's AgentEvents, oldest first")
    events.add_argument("session_id", metavar="ID")
    events.add_argument("--follow", action="store_true", help="keep printing new events")
    events.add_argument("--limit", type=int, default=200, help="recent events shown (200)")
    send = action("send", "send a user message (starts a turn, or queues)")
    send.add_argument("session_id", metavar="ID")
    send.add_argument("text", metavar="TEXT")
    approve = action("approve", "approve a pending tool call")
    approve.add_argument("session_id", metavar="ID")
    approve.add_argument("interrupt_id", metavar="INTERRUPT")
    reject = action("reject", "reject a pending tool call, or decline a question")
    reject.add_argument("session_id", metavar="ID")
    reject.add_argument("interrupt_id", metavar="INTERRUPT")
    reject.add_argument("--message", default=None, help="what the model is told")
    answer = action("answer", "answer a pending question")
    answer.add_argument("session_id", metavar="ID")
    answer.add_argument("interrupt_id", metavar="INTERRUPT")
    answer.add_argument("text", metavar="TEXT")
    steer = action("steer", "steer the running turn with a new message")
    steer.add_argument("session_id", metavar="ID")
    steer.add_argument("text", metavar="TEXT")
    cancel = action("cancel", "stop the running turn")
    cancel.add_argument("session_id", metavar="ID")
    cancel.add_argument("--turn", default=None, help="the turn ID (default: the active turn)")


def run_sessions(args: argparse.Namespace) -> int:
    """Run one ``sessions`` subcommand; returns the exit status."""
    try:
        flows = load_agents(connection_options(args).agents)
    except ValueError as error:
        print(f"dex-agents-ray sessions: {error}", file=sys.stderr)
        return USAGE
    if getattr(args, "limit", 1) < 1:
        print("dex-agents-ray sessions: --limit must be at least 1", file=sys.stderr)
        return USAGE
    try:
        return asyncio.run(_run(args, connection_options(args), flows))
    except _Exit as stop:
        print(f"dex-agents-ray sessions {args.action}: {stop}", file=sys.stderr)
        return stop.code
    except KeyboardInterrupt:
        return DONE


async def _run(
    args: argparse.Namespace, options: ConnectionOptions, flows: Sequence[AgentSessionFlow]
) -> int:
    engine = await start_engine(options, flows)
    try:
        if args.action == "list":
            return await _list(engine.client, flows, args)
        flow = await _flow_of(engine.client, flows, args.session_id)
        sessions = AgentSessionClient(engine.client, flow)
        code: int = await _HANDLERS[args.action](sessions, args)
        return code
    finally:
        await engine.shutdown()


async def _flow_of(
    client: FlowClient, flows: Sequence[AgentSessionFlow], session_id: str
) -> AgentSessionFlow:
    try:
        info = await client.describe_flow(session_id)
    except FlowNotFoundError:
        raise _Exit(NOT_FOUND, f"no session {session_id!r}") from None
    for flow in flows:
        if flow.get_flow_type() == info.flow_type:
            return flow
    given = ", ".join(flow.get_flow_type() for flow in flows)
    raise _Exit(USAGE, f"session {session_id!r} is a {info.flow_type}; --agent gives only {given}")


# -- list and show ----------------------------------------------------------------------


async def _list(
    client: FlowClient, flows: Sequence[AgentSessionFlow], args: argparse.Namespace
) -> int:
    from dex_agents_ray.session_listing import list_sessions

    rows = await list_sessions(client, flows, waiting_only=args.waiting, limit=args.limit)
    if args.json:
        print(json.dumps([row.to_json() for row in rows], indent=2))
        return DONE
    now = datetime.now(UTC)
    _table(
        ("SESSION", "AGENT", "STATUS", "WAITING FOR", "TURNS", "LAST ACTIVITY"),
        [
            (
                row.session_id,
                row.agent,
                row.status if row.flow_status == "running" else row.flow_status,
                ", ".join(row.waiting_for) or "-",
                str(row.turn_count),
                _ago(now, row.last_activity),
            )
            for row in rows
        ],
        empty="no sessions waiting for a person" if args.waiting else "no sessions",
    )
    return DONE


async def _show(sessions: AgentSessionClient, args: argparse.Namespace) -> int:
    snapshot = await sessions.get_agent_snapshot(args.session_id)
    if args.json:
        print(json.dumps(_snapshot_json(snapshot), indent=2, default=str))
        return DONE
    state = snapshot.state
    print(f"session {args.session_id}")
    if state is None:
        print("  not started yet")
        return DONE
    print(
        f"  status {state.status.value} · {state.interaction_mode.value} · "
        f"{state.turn_count} turn(s) · active turn {state.active_turn_id or '-'}"
    )
    if state.last_turn_error:
        print(f"  last turn error: {state.last_turn_error}")
    if snapshot.usage is not None:
        usage = snapshot.usage
        print(
            f"  usage {usage.input_tokens} input / {usage.output_tokens} output tokens, "
            f"{usage.model_calls} model call(s)"
        )
    print("\ntranscript:")
    for message in snapshot.messages:
        print(f"  {message.sequence:>4} {message.role.value:<9} {message_line(message)}")
    if snapshot.tool_calls:
        print("\ntool calls of the active turn:")
        _table(
            ("CALL", "TOOL", "EFFECT", "STATUS"),
            [
                (c.tool_call_id, c.tool_name, c.effect.value, c.status.value)
                for c in snapshot.tool_calls
            ],
            indent="  ",
        )
    print(
        "\nwaiting for a person:" if snapshot.pending_interrupts else "\nnothing waits for a person"
    )
    for interrupt in snapshot.pending_interrupts:
        print("  " + _interrupt_line(interrupt))
    return DONE


def _interrupt_line(interrupt: AgentInterrupt) -> str:
    if interrupt.kind.value == "question":
        choices = f" choices: {', '.join(interrupt.choices)}" if interrupt.choices else ""
        return f"{interrupt.interrupt_id}  question  {interrupt.question}{choices}"
    effect = interrupt.effect.value if interrupt.effect is not None else "-"
    return (
        f"{interrupt.interrupt_id}  approval  {interrupt.tool_name} ({effect}) "
        f"{interrupt.arguments}"
    )


def _snapshot_json(snapshot: AgentSnapshot) -> dict[str, Any]:
    from dex_agents_ray.ui_stream import snapshot_wire

    return snapshot_wire(snapshot)


# -- events ----------------------------------------------------------------------------


async def _events(sessions: AgentSessionClient, args: argparse.Namespace) -> int:
    client = sessions.client
    page = await client.list_stream_messages(
        args.session_id, sessions.flow.agent_events, args.limit
    )
    token = ""
    for message in reversed(page.messages):
        _print_event(message.value, args.json)
        token = message.resume_token
    if args.follow:
        await _follow(sessions, args, token)
    return DONE


async def _follow(sessions: AgentSessionClient, args: argparse.Namespace, token: str) -> None:
    """Print new events until Ctrl-C. SIGINT sets an event the loop waits on beside
    the long poll, so the command ends here and shuts its engine down, whatever
    the poll was doing (a cancellation that lands as the poll answers can be lost
    in Python 3.11's ``wait_for``)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGINT, stop.set)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        while True:
            read = asyncio.ensure_future(sessions.read_event(args.session_id, token, timeout=30))
            await asyncio.wait({read, stopped}, return_when=asyncio.FIRST_COMPLETED)
            if stop.is_set():
                read.cancel()
                with contextlib.suppress(BaseException):
                    await read
                return
            try:
                message = read.result()
            except LongPollTimeoutError:  # nothing new for 30 s: poll again
                continue
            _print_event(message.value, args.json)
            token = message.resume_token
    finally:
        stopped.cancel()
        loop.remove_signal_handler(signal.SIGINT)


def _print_event(event: AgentEvent, as_json: bool) -> None:
    if as_json:
        print(json.dumps(_event_json(event), ensure_ascii=False))
    else:
        payload = json.dumps(event.payload, ensure_ascii=False, separators=(",", ":"))
        turn = event.turn_id or "-"
        print(f"{event.created_at:%H:%M:%S}  {turn:<8} {event.type.value:<22} {payload[:150]}")
    sys.stdout.flush()


def _event_json(event: AgentEvent) -> dict[str, Any]:
    return {
        "type": event.type.value,
        "turn_id": event.turn_id,
        "payload": event.payload,
        "step_execution_id": event.step_execution_id,
        "attempt": event.attempt,
        "created_at": event.created_at.isoformat(),
    }


# -- actions ---------------------------------------------------------------------------


async def _send(sessions: AgentSessionClient, args: argparse.Namespace) -> int:
    accepted = await sessions.send_user_message(args.session_id, args.text)
    return _verdict(args, accepted, "message sent", "the session did not accept the message")


async def _approve(sessions: AgentSessionClient, args: argparse.Namespace) -> int:
    await _pending(sessions, args, kind="approval")
    done = await sessions.resolve_interrupt(args.session_id, args.interrupt_id, approved=True)
    return _verdict(args, done, "approved", "not approved: the interrupt is no longer pending")


async def _reject(sessions: AgentSessionClient, args: argparse.Namespace) -> int:
    await _pending(sessions, args, kind=None)
    done = await sessions.resolve_interrupt(
        args.session_id, args.interrupt_id, approved=False, rejection_message=args.message
    )
    return _verdict(args, done, "rejected", "not rejected: the interrupt is no longer pending")


async def _answer(sessions: AgentSessionClient, args: argparse.Namespace) -> int:
    interrupt = await _pending(sessions, args, kind="question")
    done = await sessions.answer_question(args.session_id, args.interrupt_id, args.text)
    refusal = "not answered: the question is no longer pending, or the answer is blank"
    if interrupt.choices and not interrupt.allows_free_text:
        refusal += f" or not one of {', '.join(interrupt.choices)}"
    return _verdict(args, done, "answered", refusal)


async def _steer(sessions: AgentSessionClient, args: argparse.Namespace) -> int:
    done = await sessions.steer_user_message(args.session_id, text=args.text)
    return _verdict(args, done, "steered", "the session did not accept the message")


async def _cancel(sessions: AgentSessionClient, args: argparse.Namespace) -> int:
    turn_id = args.turn
    if turn_id is None:
        snapshot = await sessions.get_agent_snapshot(args.session_id)
        turn_id = snapshot.state.active_turn_id if snapshot.state is not None else None
        if turn_id is None:
            return _verdict(args, False, "", "no turn is running")
    done = await sessions.cancel_turn(args.session_id, turn_id)
    return _verdict(args, done, f"turn {turn_id} cancelled", f"turn {turn_id} was not cancelled")


async def _pending(
    sessions: AgentSessionClient, args: argparse.Namespace, *, kind: str | None
) -> AgentInterrupt:
    """The pending interrupt the command names; exits 3 when there is none."""
    snapshot = await sessions.get_agent_snapshot(args.session_id)
    for interrupt in snapshot.pending_interrupts:
        if interrupt.interrupt_id == args.interrupt_id:
            if kind is not None and interrupt.kind.value != kind:
                raise _Exit(
                    USAGE,
                    f"interrupt {args.interrupt_id!r} is a {interrupt.kind.value}, not a {kind}",
                )
            return interrupt
    pending = ", ".join(i.interrupt_id for i in snapshot.pending_interrupts) or "none"
    raise _Exit(
        NOT_FOUND,
        f"session {args.session_id!r} has no pending interrupt {args.interrupt_id!r} "
        f"(pending: {pending})",
    )


def _verdict(args: argparse.Namespace, done: bool, success: str, refusal: str) -> int:
    if args.json:
        print(json.dumps({"session_id": args.session_id, "ok": done}))
    elif done:
        print(success)
    if not done:
        raise _Exit(REFUSED, refusal)
    return DONE


_HANDLERS: dict[str, Callable[[AgentSessionClient, argparse.Namespace], Awaitable[int]]] = {
    "show": _show,
    "events": _events,
    "send": _send,
    "approve": _approve,
    "reject": _reject,
    "answer": _answer,
    "steer": _steer,
    "cancel": _cancel,
}


# -- tables ----------------------------------------------------------------------------


def _table(
    header: Sequence[str], rows: Sequence[Sequence[str]], *, empty: str = "", indent: str = ""
) -> None:
    if not rows:
        print(indent + empty if empty else "")
        return
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print(
            indent + "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        )


def _ago(now: datetime, then: datetime) -> str:
    seconds = max(0, int((now - then).total_seconds()))
    if seconds < 60:
        return f"{seconds} s ago"
    if seconds < 3600:
        return f"{seconds // 60} min ago"
    if seconds < 86400:
        return f"{seconds // 3600} h ago"
    return f"{seconds // 86400} d ago"
