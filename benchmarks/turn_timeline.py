"""Where one agent turn's time goes, across the client, the host and the executor.

The agent-loop workload (``benchmarks/peers/dex_engine.py``: model -> 3 no-op
tools -> model) in the default configuration (shared hosts, tool Steps on pooled
executors), one session at a time (C=1), on a fresh local Ray and SQLite store.
Every Ray worker stamps the wall clock as it enters and leaves the engine's
methods on a turn's path (a Ray ``worker_process_setup_hook`` wraps them; the
client's calls are wrapped here), so one clock orders what three processes did.
For each timed turn (turns 2 to 10 of each session; turn 1 starts the session),
the chain from ``send_user_message`` to the ``turn_completed`` event is cut into
the segments below; their medians are printed, with the Ray hops' share and,
measured in the same Ray, the round trip of an empty Ray call from the driver to
an async actor and from one async actor to another. The hops between the client,
the host and the executor go by Unix sockets once the first call of each pair
has answered through Ray (``engine/actors/_channel.py``); ``--over-ray`` keeps them all
on Ray (``local_channels=False``, ``ExecutorPoolOptions(local_channel=False)``).

The stamps cost a few microseconds each (about 40 a turn): the turns here are a
little slower than the uninstrumented ones of ``agent_loop.py``.

    .venv/bin/python benchmarks/turn_timeline.py [--sessions 15] [--over-ray]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import inspect
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

_REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(_REPO))

_DIR_VARIABLE = "DEX_TURN_TIMELINE_DIR"
_file: Any = None


def _stamp(label: str) -> None:
    global _file
    if _file is None:
        _file = open(  # noqa: SIM115 - one file per process, open while it lives
            Path(os.environ[_DIR_VARIABLE]) / f"{os.getpid()}.txt", "a", buffering=1
        )
    _file.write(f"{time.time_ns()} {label}\n")


def _wrap(owner: Any, name: str, label: Callable[..., str]) -> None:
    """Stamp ``B <label>`` and ``E <label>`` around ``owner.name``."""
    function = getattr(owner, name)  # AttributeError: the engine renamed it
    if inspect.iscoroutinefunction(function):

        @functools.wraps(function)
        async def stamped_async(*args: Any, **kwargs: Any) -> Any:
            text = label(*args, **kwargs)
            _stamp(f"B {text}")
            try:
                return await function(*args, **kwargs)
            finally:
                _stamp(f"E {text}")

        setattr(owner, name, stamped_async)
        return

    @functools.wraps(function)
    def stamped(*args: Any, **kwargs: Any) -> Any:
        text = label(*args, **kwargs)
        _stamp(f"B {text}")
        try:
            return function(*args, **kwargs)
        finally:
            _stamp(f"E {text}")

    setattr(owner, name, stamped)


def install() -> None:
    """The Ray workers' setup hook: stamp the host's and the executor's methods."""
    if not os.environ.get(_DIR_VARIABLE):
        return
    from dex_agents_ray.engine.actors import _executor, _host, _pool
    from dex_agents_ray.engine.run import _driver
    from dex_agents_ray.engine.store import _sqlite_db

    _wrap(_host.FlowHost, "invoke_rpc", lambda self, flow_id, rpc, *a, **k: f"rpc {rpc}")
    _wrap(_host.FlowHost, "wait_streams", lambda *a, **k: "poll")
    _wrap(_driver.RunDriver, "_run_execute", lambda self, record: f"exec {record.step_type}")
    _wrap(_driver.RunDriver, "commit", lambda *a, **k: "commit")
    _wrap(_sqlite_db.SqliteDatabase, "_write_queued", lambda *a, **k: "store write")
    _wrap(_pool.ExecutorPool, "_send", lambda *a, **k: "send tools")
    _wrap(_pool, "_settle_many", lambda *a, **k: "tool reply")
    _wrap(_pool, "_settle_one", lambda *a, **k: "tool reply")
    _wrap(_executor.StepExecutor, "run_many", lambda *a, **k: "executor")
    _wrap(_executor.StepExecutor, "run", lambda *a, **k: "executor")


# -- the chain of one turn --------------------------------------------------------

SEGMENTS = (
    ("client -> host: send_user_message arrives", "B c-send", "B rpc send_user_message", True),
    ("the message stored (its commit)", None, "E rpc send_user_message", False),
    ("AwaitUserMessage starts the turn", None, "E exec AwaitUserMessage", False),
    ("RunModel: the model asks for 3 tools (its commit)", None, "E exec RunModel", False),
    ("the tool calls sent", None, "E send tools", False),
    ("host -> executor", None, "B executor", True),
    ("3 tool Steps on the executor", None, "E executor", False),
    ("executor -> host: the reply", None, "E tool reply", True),
    ("the results committed, ResumeTurn", None, "E exec ResumeTurn", False),
    ("RunModel: the answer, turn_completed (its commit)", None, "E exec RunModel", False),
    ("AwaitUserMessage waits; the long poll answers", None, "E poll", False),
    ("host -> client: the events", None, "E c-read", True),
    ("the client reads the turn's other events", None, "last E c-read", False),
)
"""(what, start label or None for the previous end, end label, a Ray hop)."""


def _turn_chains(marks: list[tuple[int, str]]) -> list[list[float]]:
    """Each timed turn's segment durations in ms, in ``SEGMENTS`` order."""
    sends = [i for i, (_, label) in enumerate(marks) if label == "B c-send"]
    chains = []
    for n, start in enumerate(sends):
        stop = sends[n + 1] if n + 1 < len(sends) else len(marks)
        turn = marks[start:stop]
        times: list[int] = []
        at = 0
        try:
            for _, first, last, _ in SEGMENTS:
                if first is not None:
                    at, moment = _find(turn, first, at)
                    times.append(moment)
                if last == "last E c-read":
                    reads = [t for t, label in turn[at:] if label == "E c-read"]
                    times.append(reads[-1])
                    continue
                at, moment = _find(turn, last, at)
                times.append(moment)
        except LookupError:
            continue  # the session's last turn lost a stamp to shutdown
        chains.append([(b - a) / 1e6 for a, b in zip(times, times[1:], strict=False)])
    return chains


def _find(turn: list[tuple[int, str]], label: str, after: int) -> tuple[int, int]:
    for i in range(after, len(turn)):
        if turn[i][1] == label:
            return i + 1, turn[i][0]
    raise LookupError(label)


# -- the run --------------------------------------------------------------------------


async def _round_trips() -> tuple[float, float]:
    """Median round trips of an empty call: driver -> async actor, actor -> actor."""
    import ray

    @ray.remote
    class Echo:
        async def echo(self) -> None:
            return None

        async def echo_from(self, other: Any, n: int) -> list[float]:
            times = []
            for _ in range(n):
                start = time.perf_counter()
                await other.echo.remote()
                times.append((time.perf_counter() - start) * 1e3)
            return times

    first, second = Echo.remote(), Echo.remote()  # type: ignore[attr-defined]
    await first.echo.remote()
    await second.echo.remote()
    driver = []
    for _ in range(300):
        start = time.perf_counter()
        await first.echo.remote()
        driver.append((time.perf_counter() - start) * 1e3)
    actors = await first.echo_from.remote(second, 300)
    for actor in (first, second):
        ray.kill(actor)
    return statistics.median(driver[50:]), statistics.median(actors[50:])


def _clear(marks_dir: Path) -> None:
    for path in marks_dir.iterdir():
        path.write_text("")  # the workers append: their next stamp starts the file


async def _run(sessions: int, marks_dir: Path, workdir: Path, variant: str) -> tuple[float, float]:
    from benchmarks.peers.dex_engine import open_system

    hook = {"worker_process_setup_hook": "benchmarks.turn_timeline.install"}
    async with open_system(workdir, variant, runtime_env=hook) as system:
        client = system.sessions
        _wrap(client, "send_user_message", lambda *a, **k: "c-send")
        _wrap(client, "read_event", lambda *a, **k: "c-read")
        for i in range(2):
            await system.session(f"warm-extra-{i}")
        await asyncio.to_thread(_clear, marks_dir)  # the warm-up turns are not measured
        for i in range(sessions):
            await system.session(f"s-{i}")
        return await _round_trips()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=15, help="timed sessions of 10 turns")
    parser.add_argument("--over-ray", action="store_true", help="no Unix sockets: Ray calls only")
    args = parser.parse_args()
    variant = "session-shared-ray" + ("-nosockets" if args.over_ray else "")
    with tempfile.TemporaryDirectory() as marks, tempfile.TemporaryDirectory() as workdir:
        os.environ[_DIR_VARIABLE] = marks  # Ray's workers inherit it
        driver_rtt, actor_rtt = asyncio.run(
            _run(args.sessions, Path(marks), Path(workdir), variant)
        )
        stamps: list[tuple[int, str]] = []
        for path in Path(marks).iterdir():
            for line in path.read_text().splitlines():
                moment, _, label = line.partition(" ")
                stamps.append((int(moment), label))
    stamps.sort()
    chains = _turn_chains(stamps)
    if not chains:
        raise SystemExit("no complete turn was stamped")
    medians = [statistics.median(chain[i] for chain in chains) for i in range(len(SEGMENTS))]
    turns = [sum(chain) for chain in chains]
    print(f"A turn at C=1, {variant}: {len(chains)} turns, medians in ms\n")
    print(f"{'segment':<52} {'ms':>7}  {'share':>6}")
    total = sum(medians)
    for (what, _, _, hop), value in zip(SEGMENTS, medians, strict=True):
        mark = " (hop)" if hop else ""
        print(f"{what + mark:<52} {value:7.2f}  {value / total:6.1%}")
    hops = sum(value for (_, _, _, hop), value in zip(SEGMENTS, medians, strict=True) if hop)
    print(f"{'sum of the segment medians':<52} {total:7.2f}")
    print(f"{'median turn':<52} {statistics.median(turns):7.2f}")
    print(f"\nHops between processes on the chain: {hops:.2f} ms ({hops / total:.0%} of the turn)")
    print(
        f"The same Ray: an empty Ray call's round trip driver -> async actor "
        f"{driver_rtt:.2f} ms, async actor -> async actor {actor_rtt:.2f} ms "
        f"(the turn's four hops as Ray calls: at least {driver_rtt + actor_rtt:.2f} ms)"
    )


if __name__ == "__main__":
    main()
