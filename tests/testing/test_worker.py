"""The Worker child on Ray: ``run_agent_worker`` owns the namespace's hosts and
executors, so a kill at a gate ends them and the running call, and the next
worker runs the call again; the stack's calls wait for a worker while none runs;
misuse is refused with a clear error."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
import ray
from ray import cloudpickle

from dex_agents_ray import AgentSnapshot
from dex_agents_ray.engine import EngineError
from dex_agents_ray.testing import (
    EXECUTE_COMPLETED_EVENT,
    AgentTestStack,
    FileGate,
    run_agent_worker,
    wait_for_agent_snapshot,
    wait_until,
)
from tests.my_agent import LOOKUP_GATE, build_flow

ROOT = Path(__file__).resolve().parents[2]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _actors(namespace: str) -> list[str]:
    return sorted(
        entry["name"]
        for entry in ray.util.list_named_actors(all_namespaces=True)
        if entry["namespace"] == namespace
    )


def _finished(snapshot: AgentSnapshot) -> AgentSnapshot | None:
    state = snapshot.state
    done = state is not None and state.turn_count == 1 and not state.active_turn_id
    return snapshot if done else None


async def test_a_worker_killed_at_a_gate_leaves_the_call_to_the_next(
    ray_session: None, tmp_path: Path
) -> None:
    flow = build_flow()
    gate = FileGate(tmp_path, LOOKUP_GATE)
    env = {"MY_STATE_DIR": str(tmp_path)}
    async with AgentTestStack(
        tmp_path, [flow], "tests.my_worker", worker_cwd=ROOT, worker_env=env
    ) as stack:
        sessions = stack.sessions(flow)
        worker = await stack.start_worker()
        assert any(name.startswith("dexhost:") for name in _actors(stack.namespace))
        await sessions.start_session("lookup", "look up order 7")
        first = await gate.wait_until_reached(timeout=120)  # in the worker's executor
        worker.kill()
        await wait_until("the call's process is gone", lambda: _gone(first))
        await wait_until("the worker's actors are gone", lambda: not _actors(stack.namespace))

        # No worker runs: the stack's engine starts no host; its calls wait.
        stack.engine.forget_hosts()
        with pytest.raises(EngineError, match="no worker runs host"):
            stack.engine.host("lookup")
        waiting = asyncio.ensure_future(sessions.get_agent_snapshot("lookup"))
        await stack.start_worker()
        assert (await waiting).state is not None
        second = await gate.wait_until_reached(times=2, timeout=120)
        gate.release()
        done = await wait_for_agent_snapshot(
            sessions, "lookup", _finished, description="the turn's end", timeout=120
        )
        history = await stack.read_step_history("lookup")
        # One host at a time still works under a worker: Ray restarts it (its owner lives).
        killed = await stack.kill_session_host("lookup")
        assert (await sessions.get_agent_snapshot("lookup")).state is not None
        assert int(await stack.engine.host("lookup").pid.remote()) != killed

    assert second != first
    assert done.messages[-1].text == "order 7 has shipped"
    lookups = [
        entry
        for entry in history
        if entry.event_type == EXECUTE_COMPLETED_EVENT and entry.step_type == "CallTool"
    ]
    assert [entry.final_attempt for entry in lookups] == [2]
    assert not _actors(stack.namespace)  # leaving the block ended the worker


async def test_start_worker_refuses_misuse_and_reports_a_child_that_fails(
    ray_session: None, tmp_path: Path
) -> None:
    flow = build_flow()
    with pytest.raises(ValueError, match="module path such as 'tests.my_worker'"):
        AgentTestStack(tmp_path, [flow], "tests/my_worker.py")
    with pytest.raises(ValueError, match="need a worker_module"):
        AgentTestStack(tmp_path, [flow], worker_env={"A": "1"})
    with pytest.raises(ValueError, match="worker_env values must be strings"):
        AgentTestStack(tmp_path, [flow], "tests.my_worker", worker_env={"A": 1})  # type: ignore[dict-item]
    async with AgentTestStack(tmp_path / "plain", [flow]) as plain:
        with pytest.raises(RuntimeError, match="has no worker module"):
            await plain.start_worker()
    # A module that exits at once (json.tool on an empty stdin) never starts hosts.
    async with AgentTestStack(tmp_path / "broken", [flow], "json.tool") as broken:
        with pytest.raises(
            RuntimeError, match=r"json.tool did not start its hosts \(exit status 1\)"
        ):
            await broken.start_worker()


def test_run_agent_worker_runs_only_in_a_stack_child_serving_the_stacks_flows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DEX_AGENTS_RAY_WORKER_CONFIG", raising=False)
    with pytest.raises(RuntimeError, match="DEX_AGENTS_RAY_WORKER_CONFIG is not set"):
        run_agent_worker([build_flow()])
    from dex_agents_ray.testing._worker import WorkerConfig

    config = WorkerConfig(
        ray_address="unused",
        namespace="unused",
        store=tmp_path / "engine.db",
        ready_path=str(tmp_path / "ready"),
        flow_types=("OrdersAgent", "BillingAgent"),
    )
    path = tmp_path / "worker.config"
    path.write_bytes(cloudpickle.dumps(config))  # type: ignore[no-untyped-call]
    monkeypatch.setenv("DEX_AGENTS_RAY_WORKER_CONFIG", str(path))
    with pytest.raises(ValueError, match=r"Flow types \['BillingAgent'\] are not among"):
        run_agent_worker([build_flow()])
