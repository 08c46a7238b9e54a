"""A tool's executor (the pooled Ray actor running its Step) killed mid-call: each
effect keeps its semantics, exactly as when a task worker or the host dies."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import ray

from dex_agents_ray import (
    TOOL_CALL_NOT_RUN_ERROR_PREFIX,
    AgentSessionClient,
    AgentSessionOptions,
    ToolEffect,
    ToolPolicy,
)
from dex_agents_ray.testing import FileGate, InvocationLog, kill_process
from tests.engine.polling import named_actors, until
from tests.session.agents import Call, Reply, build_flow
from tests.session.polling import snapshot_when, turn_done


async def _kill_executor_during(
    engine_factory: Any,
    state_dir: Path,
    effect: ToolEffect,
    session_id: str,
    *,
    by_socket: bool = False,
) -> tuple[str, int]:
    """Run one gated call of ``effect``, kill its executor at the gate; returns
    the answer and the killed PID. ``by_socket``: the gated call goes by the
    executor's socket (a first turn's call, through Ray, makes the host open it)."""
    policy = ToolPolicy(effect, requires_approval=False)
    options = AgentSessionOptions(tool_policies={"work": policy, "ping": policy})
    script = {"go": [Reply(calls=[Call("c1", "work")]), Reply()]}
    if by_socket:
        script["warm"] = [Reply(calls=[Call("c0", "ping")]), Reply()]
    flow = build_flow(state_dir, script, {"work": "gate"}, options=options)
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    FileGate(state_dir, "work-2").release()
    executor = None
    if by_socket:
        await sessions.start_session(session_id, "warm")
        await snapshot_when(sessions, session_id, turn_done(1), timeout=120)
        (name,) = [n for n in named_actors(engine.namespace) if n.startswith("dexexec:")]
        executor = ray.get_actor(name, namespace=engine.namespace)

        async def connected() -> bool:
            return bool((await executor.stats.remote())["socket_connections"])

        await until(connected, "the host's socket to the executor")
        await sessions.send_user_message(session_id, "go")
    else:
        await sessions.start_session(session_id, "go")
    pid = await FileGate(state_dir, "work-1").wait_until_reached(timeout=120)
    assert pid != await engine.host(session_id).pid.remote()
    if executor is not None:
        assert (await executor.stats.remote())["socket_calls"] == 1
    kill_process(pid)
    turn = 2 if by_socket else 1
    done = await snapshot_when(sessions, session_id, turn_done(turn), timeout=120)
    return done.messages[-1].text or "", pid


def _entries(state_dir: Path) -> list[str]:
    return InvocationLog(state_dir / "work.log").entries()


async def test_executor_killed_during_a_read_runs_it_again(
    engine_factory: Any, state_dir: Path
) -> None:
    answer, killed = await _kill_executor_during(
        engine_factory, state_dir, ToolEffect.READ, "exec-read"
    )

    assert answer == "work=work done"
    assert [e.split("/")[1] for e in _entries(state_dir)] == ["1", "2"]
    # Ray replaced the executor: the retry ran in a new process.
    assert FileGate(state_dir, "work-2").reached_pids()[0] != killed


async def test_executor_killed_during_an_idempotent_write_retries_with_the_same_key(
    engine_factory: Any, state_dir: Path
) -> None:
    answer, _ = await _kill_executor_during(
        engine_factory, state_dir, ToolEffect.IDEMPOTENT_WRITE, "exec-idem"
    )

    assert answer == "work=work done"
    keys = {e.split("/", 2)[2].rsplit("/", 1)[0] for e in _entries(state_dir)}
    assert [e.split("/")[1] for e in _entries(state_dir)] == ["1", "2"]
    assert keys == {"exec-idem/turn-1/c1"}


async def test_executor_killed_during_a_single_attempt_write_is_outcome_unknown(
    engine_factory: Any, state_dir: Path
) -> None:
    answer, _ = await _kill_executor_during(
        engine_factory, state_dir, ToolEffect.NON_IDEMPOTENT_WRITE, "exec-write"
    )

    assert answer.startswith("work=The tool call's outcome is unknown")
    assert TOOL_CALL_NOT_RUN_ERROR_PREFIX not in answer
    assert len(_entries(state_dir)) == 1


async def test_executor_killed_during_a_read_sent_by_its_socket_runs_it_again(
    engine_factory: Any, state_dir: Path
) -> None:
    answer, killed = await _kill_executor_during(
        engine_factory, state_dir, ToolEffect.READ, "sock-read", by_socket=True
    )

    assert answer == "work=work done"
    assert [e.split("/")[1] for e in _entries(state_dir)] == ["1", "2"]
    assert FileGate(state_dir, "work-2").reached_pids()[0] != killed


async def test_executor_killed_during_an_idempotent_write_sent_by_its_socket_retries(
    engine_factory: Any, state_dir: Path
) -> None:
    answer, _ = await _kill_executor_during(
        engine_factory, state_dir, ToolEffect.IDEMPOTENT_WRITE, "sock-idem", by_socket=True
    )

    assert answer == "work=work done"
    keys = {e.split("/", 2)[2].rsplit("/", 1)[0] for e in _entries(state_dir)}
    assert [e.split("/")[1] for e in _entries(state_dir)] == ["1", "2"]
    assert keys == {"sock-idem/turn-2/c1"}


async def test_executor_killed_during_a_single_attempt_write_sent_by_its_socket_is_unknown(
    engine_factory: Any, state_dir: Path
) -> None:
    answer, _ = await _kill_executor_during(
        engine_factory, state_dir, ToolEffect.NON_IDEMPOTENT_WRITE, "sock-write", by_socket=True
    )

    assert answer.startswith("work=The tool call's outcome is unknown")
    assert TOOL_CALL_NOT_RUN_ERROR_PREFIX not in answer
    assert len(_entries(state_dir)) == 1


async def test_a_dedicated_host_recreated_after_passivation_gets_its_tool_results(
    engine_factory: Any, state_dir: Path, namespace: str
) -> None:
    script = {
        "one": [Reply(calls=[Call("c1", "work")]), Reply()],
        "two": [Reply(calls=[Call("c2", "work")]), Reply()],
    }
    options = AgentSessionOptions(
        tool_policies={"work": ToolPolicy(ToolEffect.READ, requires_approval=False)}
    )
    flow = build_flow(state_dir, script, options=options)
    engine = await engine_factory(
        [flow], placement="dedicated", passivate_after=timedelta(seconds=1)
    )
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("dedicated-1", "one")
    await snapshot_when(sessions, "dedicated-1", turn_done(1), timeout=120)

    async def host_gone() -> bool:
        return not [n for n in named_actors(namespace) if n.startswith("dexrun:")]

    await until(host_gone, "the dedicated host's exit", timeout=120)
    assert await sessions.send_user_message("dedicated-1", "two")
    done = await snapshot_when(sessions, "dedicated-1", turn_done(2), timeout=120)

    assert done.messages[-1].text == "work=echo {}"
