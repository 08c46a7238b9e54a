"""When a running attempt's heartbeat values are written (``AttemptRunner``,
``engine/run/_attempts.py``), over an in-memory ``RunState`` and an owner that
records its commits: a retryable attempt's value waits ``HEARTBEAT_LINGER`` and
the run's waiting values go in one commit; a value whose attempt ended is moot;
a failure takes its attempt's value; a last attempt's value is written at once."""

from __future__ import annotations

import asyncio
from typing import Any

from dex.dexpb import dex_pb2 as pb

from dex_agents_ray.engine.run._attempts import HEARTBEAT_LINGER, AttemptRunner, Live
from dex_agents_ray.engine.run._state import RunState, Tx
from dex_agents_ray.engine.store._records import Commit, ExecRecord, ExecStatus, evolve
from tests.stores.records import execution, run


def _exec(exec_id: str, maximum_attempts: int) -> ExecRecord:
    options = pb.StepOptions(execute_retry_policy=pb.RetryPolicy(maximum_attempts=maximum_attempts))
    return execution(exec_id, options=options.SerializeToString())


class _Owner:
    """The driver as an ``AttemptRunner`` sees it: commits applied in memory and kept."""

    flow_id = "f-1"
    definition = None
    streams: Any = None

    def __init__(self, *records: ExecRecord) -> None:
        self.state = RunState()
        self.state.load(run("f-1"), {}, [], list(records), [])
        self.commit_lock = asyncio.Lock()
        self.commits: list[Commit] = []
        self.tasks: list[asyncio.Task[Any]] = []

    def tx(self) -> Tx:
        return Tx(self.state, 0, 2000.0)

    async def commit(self, tx: Tx) -> Commit:
        built = tx.build()
        self.state.apply(built)
        self.commits.append(built)
        return built

    def background(self, coro: Any) -> None:
        self.tasks.append(asyncio.ensure_future(coro))

    def is_current(self, exec_id: str, status: ExecStatus, attempt: int, *, wait: bool) -> bool:
        return True

    async def settle(self) -> None:
        while self.tasks:
            await self.tasks.pop(0)


def _beat(value: str | None) -> pb.StepMethodHeartbeat:
    if value is None:
        return pb.StepMethodHeartbeat()
    return pb.StepMethodHeartbeat(value=pb.Value(string_value=value))


def _stored(owner: _Owner, exec_id: str) -> str | None:
    raw = owner.state.execs[exec_id].heartbeat
    return None if raw is None else pb.Value.FromString(raw).string_value


def _running(runner: AttemptRunner, exec_id: str, attempt: int, *, exact: bool = False) -> None:
    """Register a running attempt as ``AttemptRunner.run`` does."""
    loop = asyncio.get_running_loop()
    runner._live[exec_id] = Live(attempt, loop.time(), lambda: None, exact=exact)


async def _after_linger() -> None:
    await asyncio.sleep(HEARTBEAT_LINGER * 2)


async def test_retryable_attempts_values_wait_and_share_one_commit() -> None:
    owner = _Owner(_exec("A-1", 3), _exec("B-1", 3))
    runner = AttemptRunner(owner)
    _running(runner, "A-1", 1)
    _running(runner, "B-1", 1)
    runner.on_frame("A-1", 1, _beat("a"))
    runner.on_frame("B-1", 1, _beat("b"))
    await owner.settle()
    assert owner.commits == []  # nothing written yet
    await _after_linger()
    await owner.settle()
    assert len(owner.commits) == 1
    assert (_stored(owner, "A-1"), _stored(owner, "B-1")) == ("a", "b")
    # A later beat with the stored value writes nothing; a new value waits again.
    runner.on_frame("A-1", 1, _beat("a"))
    await _after_linger()
    await owner.settle()
    assert len(owner.commits) == 1


async def test_a_value_whose_attempt_ended_is_not_written() -> None:
    owner = _Owner(_exec("A-1", 3))
    runner = AttemptRunner(owner)
    _running(runner, "A-1", 1)
    runner.on_frame("A-1", 1, _beat("a"))
    # The attempt completes (its commit ends the execution) before the linger ends.
    async with owner.commit_lock:
        tx = owner.tx()
        tx.update(evolve(tx.current("A-1"), status=ExecStatus.COMPLETED))
        await owner.commit(tx)
    await _after_linger()
    await owner.settle()
    assert len(owner.commits) == 1  # the completion only


async def test_a_failure_takes_its_attempts_waiting_value() -> None:
    owner = _Owner(_exec("A-1", 3))
    runner = AttemptRunner(owner)
    _running(runner, "A-1", 1)
    runner.on_frame("A-1", 1, _beat("a"))
    assert runner.take_heartbeat("A-1", 2) is None  # another attempt's: not this one's
    taken = runner.take_heartbeat("A-1", 1)
    assert taken is not None and pb.Value.FromString(taken[0] or b"").string_value == "a"
    assert runner.take_heartbeat("A-1", 1) is None  # taken once
    await _after_linger()
    await owner.settle()
    assert owner.commits == []  # the failure's commit writes it, not the linger


async def test_a_last_attempts_value_is_written_at_once() -> None:
    owner = _Owner(_exec("A-1", 2))
    runner = AttemptRunner(owner)
    _running(runner, "A-1", 2, exact=True)
    runner.on_frame("A-1", 2, _beat("last"))
    await owner.settle()
    assert len(owner.commits) == 1 and _stored(owner, "A-1") == "last"
    # A beat without a value after one with a value clears it, as before.
    runner.on_frame("A-1", 2, _beat(None))
    await owner.settle()
    assert owner.state.execs["A-1"].heartbeat is None
