"""``dex-agents-ray sessions`` against a live engine: every subcommand, and bad input."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from actors.support import flow
from dex_agents_ray import AgentSessionClient
from dex_agents_ray.cli import main
from tests.session.polling import has_interrupt, snapshot_when, turn_done

ROOT = Path(__file__).resolve().parents[2]
_CLI = "import sys; from dex_agents_ray.cli import main; sys.exit(main())"
TIMEOUT = 120

_RAY_NOTICE = re.compile(r"^(\x1b\[[0-9;]*m)?\((raylet|pid=\d+)[^)]*\)")
"""A line that Ray's driver prints to this process's stdout on its own (a job
error such as a worker of an earlier test dying), not the command's output."""


def _without_ray_notices(out: str) -> str:
    return "".join(line for line in out.splitlines(keepends=True) if not _RAY_NOTICE.match(line))


class Cli:
    """Runs ``dex-agents-ray sessions ...`` against the test's engine."""

    def __init__(self, namespace: str, store: Path) -> None:
        import ray

        self.flags = [
            *("--address", ray.get_runtime_context().gcs_address, "--namespace", namespace),
            *("--store", str(store), "--agent", "actors.support:flow"),
        ]

    async def __call__(
        self, capsys: pytest.CaptureFixture[str], *args: str
    ) -> tuple[int, str, str]:
        """In this process (Ray is joined already): exit status, stdout, stderr."""
        action, rest = args[0], list(args[1:])
        code = await asyncio.to_thread(main, ["sessions", action, *self.flags, *rest])
        captured = capsys.readouterr()
        # In this process the command shares stdout with the test's Ray driver.
        return code, _without_ray_notices(captured.out), captured.err

    async def process(self, *args: str) -> asyncio.subprocess.Process:
        """As a person runs it: a new process that joins the cluster."""
        action, rest = args[0], list(args[1:])
        return await asyncio.create_subprocess_exec(
            sys.executable, "-c", _CLI, "sessions", action, *self.flags, *rest,
            cwd=ROOT,
            # SIGABRT makes a process that hangs print every thread's stack.
            env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONFAULTHANDLER": "1"},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip


async def _sessions(engine_factory: Any) -> AgentSessionClient:
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("s-approve", "Please refund 300 on order A1.")
    await sessions.start_session("s-question", "I want a refund of 200.")
    await sessions.start_session("s-done", "Where is order A2?")
    await snapshot_when(sessions, "s-approve", has_interrupt, timeout=TIMEOUT)
    await snapshot_when(sessions, "s-question", has_interrupt, timeout=TIMEOUT)
    await snapshot_when(sessions, "s-done", turn_done(1), timeout=TIMEOUT)
    return sessions


async def test_sessions_subcommands(
    engine_factory: Any, namespace: str, store_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sessions = await _sessions(engine_factory)
    cli = Cli(namespace, store_path)

    # list, as a separate process, as a person runs it.
    process = await cli.process("list", "--waiting")
    out, err = await asyncio.wait_for(process.communicate(), TIMEOUT)
    assert process.returncode == 0, err.decode()
    lines = out.decode().splitlines()
    assert lines[0].split() == [
        "SESSION",
        "AGENT",
        "STATUS",
        "WAITING",
        "FOR",
        "TURNS",
        "LAST",
        "ACTIVITY",
    ]
    assert sorted(line.split()[0] for line in lines[1:]) == ["s-approve", "s-question"]
    assert "Traceback" not in err.decode()

    code, out, _ = await cli(capsys, "list", "--json")
    assert code == 0
    rows = {row["session_id"]: row for row in json.loads(out)}
    assert set(rows) == {"s-approve", "s-question", "s-done"}
    assert rows["s-approve"]["waiting_for"] == ["approval"]
    assert rows["s-question"]["waiting_for"] == ["question"]
    assert rows["s-done"]["status"] == "waiting_for_user_message"

    code, out, _ = await cli(capsys, "show", "s-approve")
    assert code == 0
    assert "Please refund 300 on order A1." in out
    assert 'call-refund  approval  refund_order (non_idempotent_write) {"order_id"' in out

    # Approve: a wrong interrupt ID exits 3 and names the pending ones.
    code, _, err = await cli(capsys, "approve", "s-approve", "call-nope")
    assert code == 3 and "no pending interrupt 'call-nope' (pending: call-refund)" in err
    code, out, _ = await cli(capsys, "approve", "s-approve", "call-refund")
    assert (code, out.strip()) == (0, "approved")
    done = await snapshot_when(sessions, "s-approve", turn_done(1), timeout=TIMEOUT)
    assert done.messages[-1].text == "Refund: refunded 300 cents on A1"
    code, _, err = await cli(capsys, "approve", "s-approve", "call-refund")
    assert code == 3 and "(pending: none)" in err

    # A question answered, then the refund it leads to rejected with a message.
    code, _, err = await cli(capsys, "approve", "s-question", "call-ask")
    assert code == 2 and "is a question, not a approval" in err
    code, out, _ = await cli(capsys, "answer", "s-question", "call-ask", "It is A4")
    assert (code, out.strip()) == (0, "answered")
    await snapshot_when(
        sessions,
        "s-question",
        lambda s: any(i.tool_name == "refund_order" for i in s.pending_interrupts),
        timeout=TIMEOUT,
    )
    code, out, _ = await cli(
        capsys, "reject", "s-question", "call-refund-answered", "--message", "not this order"
    )
    assert (code, out.strip()) == (0, "rejected")
    await snapshot_when(sessions, "s-question", turn_done(1), timeout=TIMEOUT)

    # send, steer (no turn running: it queues and starts one), cancel with nothing running.
    code, out, _ = await cli(capsys, "send", "s-done", "Where is order A3?", "--json")
    assert (code, json.loads(out)) == (0, {"session_id": "s-done", "ok": True})
    await snapshot_when(sessions, "s-done", turn_done(2), timeout=TIMEOUT)
    code, out, _ = await cli(capsys, "steer", "s-done", "Where is order A5?")
    assert (code, out.strip()) == (0, "steered")
    third = await snapshot_when(sessions, "s-done", turn_done(3), timeout=TIMEOUT)
    assert "returned" in (third.messages[-1].text or "")
    code, _, err = await cli(capsys, "cancel", "s-done")
    assert code == 1 and "no turn is running" in err

    code, out, _ = await cli(capsys, "events", "s-done", "--json")
    assert code == 0
    kinds = [json.loads(line)["type"] for line in out.splitlines()]
    assert kinds.count("turn_completed") == 3 and kinds[0] == "turn_started"
    code, out, _ = await cli(capsys, "events", "s-done")
    assert "turn_completed" in out and "tool_call_finished" in out


async def test_sessions_bad_input(
    engine_factory: Any, namespace: str, store_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await engine_factory([flow])
    cli = Cli(namespace, store_path)
    code, _, err = await cli(capsys, "show", "no-such-session")
    assert code == 3 and "no session 'no-such-session'" in err
    code, _, err = await cli(capsys, "list", "--limit", "0")
    assert code == 2 and "--limit must be at least 1" in err
    assert main(["sessions", "list", "--agent", "actors.support:nope"]) == 2
    assert "has no attribute 'nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:
        main(["sessions", "approve", "--agent", "actors.support:flow", "only-one-arg"])
    assert usage.value.code == 2


async def test_events_follow_prints_new_events_until_interrupted(
    engine_factory: Any, namespace: str, store_path: Path
) -> None:
    sessions = await _sessions(engine_factory)
    process = await Cli(namespace, store_path).process("events", "s-done", "--follow")
    assert process.stdout is not None
    seen: list[str] = []
    try:
        async with asyncio.timeout(TIMEOUT):
            while not any("turn_completed" in line for line in seen):  # the first turn's
                seen.append((await process.stdout.readline()).decode())
            await sessions.send_user_message("s-done", "Where is order A3?")
            while sum("turn_completed" in line for line in seen) < 2:
                line = (await process.stdout.readline()).decode()
                assert line, "events --follow exited"
                seen.append(line)
    finally:
        process.send_signal(signal.SIGINT)
        try:
            async with asyncio.timeout(60):
                await process.wait()
        except TimeoutError:
            process.send_signal(signal.SIGABRT)
            assert process.stderr is not None
            stacks = await process.stderr.read()
            raise AssertionError(
                "events --follow did not exit within 60 s of SIGINT:\n" + stacks.decode()[-8000:]
            ) from None
    assert process.returncode == 0
    assert any("turn-2" in line and "turn_completed" in line for line in seen)
