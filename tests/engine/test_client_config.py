"""``update_flow_config`` and ``get_attributes`` on the engine clients.

``FlowConfig(active_step_search_mode=...)`` as ``dex.AsyncClient`` 1.23 takes it,
at start (``StartFlowOptions.config_override``) and on a running run: ``DISABLED``
keeps the run out of the ``ActiveStepTypes`` search, ``WITH_WAIT_FOR`` indexes
only active Steps that have a ``wait_for``, ``ALL`` (and ``DEFAULT``, this
engine's default) every active Step. ``get_attributes`` reads committed values.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from dex import (
    ActiveStepSearchMode,
    FlowConfig,
    FlowNotActiveOrNotFoundError,
    FlowNotFoundError,
    StartFlowOptions,
    StepDurability,
)

from dex_agents_ray import AgentSessionClient
from dex_agents_ray.engine import FlowEngine
from dex_agents_ray.session import AGENT_MESSAGES, AGENT_STATE, message_sequence_key
from dex_agents_ray.testing import FileGate
from tests.engine.flows_client import ClientFlow, Owner
from tests.engine.flows_config import ConfigFlow, Never, Notes, Stage, Task
from tests.engine.polling import eventually, wait_for_event
from tests.session.agents import Reply, build_flow
from tests.session.polling import snapshot_when, turn_done

TIMEOUT = 60


def _start(mode: ActiveStepSearchMode) -> StartFlowOptions:
    return StartFlowOptions(config_override=FlowConfig(active_step_search_mode=mode))


async def _found(engine: FlowEngine, step_type: str) -> set[str]:
    page = await engine.client.search_flows(f"ActiveStepTypes = '{step_type}'", 100)
    return {entry.flow_id for entry in page.flows}


async def test_disabled_keeps_a_run_out_of_the_active_step_search(
    engine_factory: Any, state_dir: Path
) -> None:
    flow = ConfigFlow()
    engine = await engine_factory([flow])
    client = engine.client
    task = Task(state_dir=str(state_dir))
    FileGate(state_dir, "work").release()
    await client.start_flow(flow, "plain", task)
    await client.start_flow(flow, "hidden", task, _start(ActiveStepSearchMode.DISABLED))
    for flow_id in ("plain", "hidden"):
        await wait_for_event(client, flow_id, "Hold-1", "wait_for_completed")

    assert await _found(engine, "Hold") == {"plain"}

    # On a running run: out of the search at once, back in when turned on again.
    await client.update_flow_config(
        "plain", FlowConfig(active_step_search_mode=ActiveStepSearchMode.DISABLED)
    )
    assert await _found(engine, "Hold") == set()
    await client.update_flow_config(
        "hidden", FlowConfig(active_step_search_mode=ActiveStepSearchMode.ALL)
    )
    assert await _found(engine, "Hold") == {"hidden"}
    # A config without the field changes nothing.
    await client.update_flow_config("hidden", FlowConfig())
    assert await _found(engine, "Hold") == {"hidden"}
    # The mode is stored: the run's next commits keep to it.
    await client.invoke_rpc(flow.go, "plain")
    await client.wait_for_flow("plain", timeout=TIMEOUT)
    await client.update_flow_config(
        "hidden", FlowConfig(active_step_search_mode=ActiveStepSearchMode.DEFAULT)
    )
    assert await _found(engine, "Hold") == {"hidden"}


async def test_with_wait_for_indexes_only_steps_that_wait(
    engine_factory: Any, state_dir: Path
) -> None:
    flow = ConfigFlow()
    engine = await engine_factory([flow])
    client = engine.client
    await client.start_flow(flow, "all", Task(str(state_dir), "all"))
    await client.start_flow(
        flow, "waits", Task(str(state_dir), "waits"), _start(ActiveStepSearchMode.WITH_WAIT_FOR)
    )
    await FileGate(state_dir, "all").wait_until_reached(timeout=TIMEOUT)
    await FileGate(state_dir, "waits").wait_until_reached(timeout=TIMEOUT)

    assert await _found(engine, "Work") == {"all"}  # Work has no wait_for

    FileGate(state_dir, "waits").release()
    await eventually(lambda: _found(engine, "Hold"), lambda found: found == {"waits"})
    await client.update_flow_config(
        "all", FlowConfig(active_step_search_mode=ActiveStepSearchMode.WITH_WAIT_FOR)
    )
    assert await _found(engine, "Work") == set()
    FileGate(state_dir, "all").release()
    await eventually(lambda: _found(engine, "Hold"), lambda found: found == {"all", "waits"})


async def test_update_flow_config_refuses_what_it_cannot_apply(
    engine_factory: Any, state_dir: Path
) -> None:
    flow = ConfigFlow()
    engine = await engine_factory([flow])
    client = engine.client
    FileGate(state_dir, "work").release()
    await client.start_flow(flow, "r", Task(str(state_dir)))
    await wait_for_event(client, "r", "Hold-1", "wait_for_completed")

    with pytest.raises(ValueError, match="continue_as_new_threshold"):
        await client.update_flow_config("r", FlowConfig(continue_as_new_threshold=10))
    with pytest.raises(ValueError, match="attribute_store_names"):
        await client.update_flow_config("r", FlowConfig(attribute_store_names=["x"]))
    with pytest.raises(TypeError, match="FlowConfig"):
        await client.update_flow_config("r", {"active_step_search_mode": "disabled"})
    with pytest.raises(ValueError, match="config_override.*worker_target"):
        await client.start_flow(
            flow,
            "other",
            Task(str(state_dir)),
            StartFlowOptions(config_override=FlowConfig(worker_target=object())),  # type: ignore[arg-type]
        )
    assert await _found(engine, "Hold") == {"r"}  # nothing changed
    # Step durability: every Step commits before it moves on here, ASYNC included.
    await client.update_flow_config("r", FlowConfig(step_durability=StepDurability.ASYNC))

    with pytest.raises(FlowNotActiveOrNotFoundError):
        await client.update_flow_config("never-ran", FlowConfig())
    await client.invoke_rpc(flow.go, "r")
    await client.wait_for_flow("r", timeout=TIMEOUT)
    with pytest.raises(FlowNotActiveOrNotFoundError):
        await client.update_flow_config(
            "r", FlowConfig(active_step_search_mode=ActiveStepSearchMode.ALL)
        )


async def test_get_attributes_reads_committed_values_in_order(
    engine_factory: Any, state_dir: Path
) -> None:
    flow, other = ConfigFlow(), ClientFlow()
    engine = await engine_factory([flow, other])
    client = engine.client
    await client.start_flow(flow, "r", Task(str(state_dir)))
    await FileGate(state_dir, "work").wait_until_reached(timeout=TIMEOUT)

    # While Work runs, its writes are not committed: none of them is read.
    assert await client.get_attributes("r", [Stage, Notes.load("c"), Never]) == (None, None, None)

    FileGate(state_dir, "work").release()
    await wait_for_event(client, "r", "Hold-1", "wait_for_completed")
    values = await client.get_attributes("r", [Notes.load("a b"), Stage, Never, Notes.load("c")])
    assert values == (1, "holding", None, 2)
    assert await client.get_attributes("r", []) == ()

    # A closed run keeps its values.
    await client.invoke_rpc(flow.go, "r")
    await client.wait_for_flow("r", timeout=TIMEOUT)
    assert await client.get_attributes("r", [Stage]) == ("done",)

    # The sync client, from a plain thread.
    sync = engine.sync_client()
    assert await asyncio.to_thread(sync.get_attributes, "r", [Stage, Notes.load("c")]) == (
        "done",
        2,
    )

    with pytest.raises(
        ValueError, match="Attribute 'owner' is not an Attribute of Flow ConfigFlow"
    ):
        await client.get_attributes("r", [Owner])
    with pytest.raises(TypeError, match=r"AttributeMap 'notes'.*\.load\(instance\)"):
        await client.get_attributes("r", [Notes])
    with pytest.raises(FlowNotFoundError):
        await client.get_attributes("never-ran", [Stage])


async def test_the_sync_client_updates_flow_config(engine_factory: Any, state_dir: Path) -> None:
    flow = ConfigFlow()
    engine = await engine_factory([flow])
    FileGate(state_dir, "work").release()
    await engine.client.start_flow(flow, "r", Task(str(state_dir)))
    await wait_for_event(engine.client, "r", "Hold-1", "wait_for_completed")
    sync = engine.sync_client()
    disabled = FlowConfig(active_step_search_mode=ActiveStepSearchMode.DISABLED)

    await asyncio.to_thread(sync.update_flow_config, "r", disabled)

    assert await _found(engine, "Hold") == set()


async def test_get_attributes_reads_a_sessions_state_and_messages(
    engine_factory: Any, state_dir: Path
) -> None:
    """The spec's way to read message content a span refers to: by its key."""
    flow = build_flow(state_dir, {"hi": [Reply()]})
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("s-1", "hi")
    snapshot = await snapshot_when(sessions, "s-1", turn_done(1))

    state, first = await engine.client.get_attributes(
        "s-1", [AGENT_STATE, AGENT_MESSAGES.load(message_sequence_key(1))]
    )

    assert state == snapshot.state
    assert first == snapshot.messages[0] and first.text == "hi"
