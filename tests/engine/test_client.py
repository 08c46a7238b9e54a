"""The client: start_flow input checks and options, describe, history, stop."""

from __future__ import annotations

from typing import Any

import pytest
from dex import (
    FlowAlreadyStartedError,
    FlowDefinitionError,
    FlowErrorType,
    FlowNotActiveOrNotFoundError,
    FlowNotFoundError,
    FlowStatus,
    IdReusePolicy,
    StartFlowOptions,
    StopFlowOptions,
    StopType,
    ValueMappingError,
)

from tests.engine.flows_client import ClientFlow, Job, OtherFlow, Owner, Tags
from tests.engine.polling import events, wait_for_event

TIMEOUT = 60


async def _engine(engine_factory: Any) -> tuple[Any, ClientFlow]:
    flow = ClientFlow()
    return await engine_factory([flow]), flow


async def _held(engine: Any, flow: ClientFlow, flow_id: str, job: Job | None = None) -> str:
    run_id: str = await engine.client.start_flow(flow, flow_id, job or Job())
    await wait_for_event(engine.client, flow_id, "Hold-1", "wait_for_completed")
    return run_id


async def test_start_flow_refuses_bad_input_and_changes_nothing(engine_factory: Any) -> None:
    engine, flow = await _engine(engine_factory)
    client = engine.client
    with pytest.raises(FlowDefinitionError, match="OtherFlow"):
        await client.start_flow(OtherFlow(), "bad", "x")
    with pytest.raises(FlowDefinitionError):
        await client.start_flow(ClientFlow(), "bad", Job())  # not the registered instance
    with pytest.raises(ValueMappingError):
        await client.start_flow(flow, "bad", "not a Job")
    for blank in ("", "   "):
        with pytest.raises(ValueError, match="flow_id"):
            await client.start_flow(flow, blank, Job())
    with pytest.raises(FlowNotFoundError):
        await client.describe_flow("bad")
    assert (await client.search_flows("FlowType = 'ClientFlow'", 10)).flows == []


async def test_invoke_rpc_refuses_unregistered_rpcs_and_undecodable_input(
    engine_factory: Any,
) -> None:
    engine, flow = await _engine(engine_factory)
    await _held(engine, flow, "rpc-checks")
    with pytest.raises(FlowDefinitionError):
        await engine.client.invoke_rpc(OtherFlow().nudge, "rpc-checks")
    with pytest.raises(FlowDefinitionError):
        await engine.client.invoke_rpc(ClientFlow().release, "rpc-checks")
    with pytest.raises(ValueMappingError):
        await engine.client.invoke_rpc(flow.set_owner, "rpc-checks", 42)
    assert (await engine.client.describe_flow("rpc-checks")).status is FlowStatus.RUNNING


async def test_a_running_flow_id_cannot_start_twice(engine_factory: Any) -> None:
    engine, flow = await _engine(engine_factory)
    run_id = await _held(engine, flow, "dup")
    with pytest.raises(FlowAlreadyStartedError) as raised:
        await engine.client.start_flow(flow, "dup", Job())
    assert raised.value.flow_id == "dup"
    ignored = StartFlowOptions(ignore_already_started=True)
    assert await engine.client.start_flow(flow, "dup", Job(), ignored) == run_id
    repeated = StartFlowOptions(request_id="start-once")
    again = await engine.client.start_flow(flow, "dup-request", Job(finish=True), repeated)
    assert await engine.client.start_flow(flow, "dup-request", Job(finish=True), repeated) == again
    assert (await engine.client.describe_flow("dup")).run_id == run_id


async def test_id_reuse_policies_for_a_closed_flow(engine_factory: Any) -> None:
    engine, flow = await _engine(engine_factory)
    client = engine.client
    first = await client.start_flow(flow, "reuse", Job(finish=True))
    await client.wait_for_flow("reuse", timeout=TIMEOUT)
    with pytest.raises(FlowAlreadyStartedError, match="policy is DEFAULT"):
        await client.start_flow(flow, "reuse", Job())  # the server default: no reuse
    for policy in (IdReusePolicy.DISALLOW, IdReusePolicy.ALLOW_IF_PREVIOUS_FAILED):
        with pytest.raises(FlowAlreadyStartedError):
            await client.start_flow(flow, "reuse", Job(), StartFlowOptions(id_reuse_policy=policy))
    reuse = StartFlowOptions(id_reuse_policy=IdReusePolicy.ALLOW_IF_NOT_RUNNING)
    second = await client.start_flow(flow, "reuse", Job(finish=True), reuse)
    assert second != first
    assert (await client.wait_for_flow("reuse", timeout=TIMEOUT)).status is FlowStatus.COMPLETED
    assert (await client.describe_flow("reuse")).run_id == second
    history = await client.read_step_history("reuse")
    started = [h.detail["run_id"] for h in history if h.event == "flow_started"]
    assert started == [second]  # the history is the current run's

    await _held(engine, flow, "failed")
    await client.stop_flow("failed", StopFlowOptions(type=StopType.FAIL, reason="test"))
    retry = StartFlowOptions(id_reuse_policy=IdReusePolicy.ALLOW_IF_PREVIOUS_FAILED)
    restarted = await client.start_flow(flow, "failed", Job(finish=True), retry)
    assert (await client.wait_for_flow("failed", timeout=TIMEOUT)).status is FlowStatus.COMPLETED
    assert (await client.describe_flow("failed")).run_id == restarted


async def test_allow_terminate_if_running_replaces_the_running_run(engine_factory: Any) -> None:
    engine, flow = await _engine(engine_factory)
    old = await _held(engine, flow, "replace", Job(owner="old"))
    options = StartFlowOptions(id_reuse_policy=IdReusePolicy.ALLOW_TERMINATE_IF_RUNNING)
    new = await engine.client.start_flow(flow, "replace", Job(finish=True), options)
    assert new != old
    result = await engine.client.wait_for_flow("replace", timeout=TIMEOUT)
    assert result.status is FlowStatus.COMPLETED
    # The new run starts from fresh state: nothing of the old run's Attributes.
    assert result.single_output(dict[str, Any]) == {"owner": None, "tags": {}}


async def test_with_attribute_initializes_state_before_the_first_step(
    engine_factory: Any,
) -> None:
    engine, flow = await _engine(engine_factory)
    options = (
        StartFlowOptions()
        .with_attribute(Owner, "initial-owner")
        .with_attribute(Tags, "color", "blue")
        .with_attribute(Tags, "size two", "L")
    )
    await engine.client.start_flow(flow, "init", Job(finish=True), options)
    result = await engine.client.wait_for_flow("init", timeout=TIMEOUT)
    assert result.single_output(dict[str, Any]) == {
        "owner": "initial-owner",
        "tags": {"color": "blue", "size two": "L"},
    }
    page = await engine.client.search_flows("owner = 'initial-owner'", 10)
    assert [entry.flow_id for entry in page.flows] == ["init"]


async def test_describe_flow_reports_the_run(engine_factory: Any) -> None:
    engine, flow = await _engine(engine_factory)
    run_id = await _held(engine, flow, "described")
    info = await engine.client.describe_flow("described")
    assert (info.flow_id, info.run_id, info.flow_type) == ("described", run_id, "ClientFlow")
    assert info.status is FlowStatus.RUNNING
    assert info.started_at.tzinfo is not None
    with pytest.raises(FlowNotFoundError):
        await engine.client.describe_flow("never-started")
    with pytest.raises(FlowNotFoundError):
        await engine.client.wait_for_flow("never-started", timeout=1)
    with pytest.raises(FlowNotFoundError):
        await engine.client.read_step_history("never-started")


async def test_read_step_history_lists_the_run_oldest_first(engine_factory: Any) -> None:
    engine, flow = await _engine(engine_factory)
    await engine.client.start_flow(flow, "history", Job(owner="ann"))
    await wait_for_event(engine.client, "history", "Hold-1", "wait_for_completed")
    await engine.client.invoke_rpc(flow.release, "history")
    await engine.client.wait_for_flow("history", timeout=TIMEOUT)
    assert await events(engine.client, "history") == [
        ("", "flow_started"),
        ("Intake-1", "step_scheduled"),
        ("Intake-1", "attempt_started"),
        ("Intake-1", "step_completed"),
        ("Hold-1", "step_scheduled"),
        ("Hold-1", "wait_for_completed"),
        ("", "rpc_applied"),
        ("Hold-1", "wait_satisfied"),
        ("Hold-1", "attempt_started"),
        ("Hold-1", "step_completed"),
        ("", "flow_closed"),
    ]
    history = await engine.client.read_step_history("history")
    assert all(a.at <= b.at for a, b in zip(history, history[1:], strict=False))


@pytest.mark.parametrize(
    ("stop_type", "status", "error_type"),
    [
        (StopType.CANCEL, FlowStatus.CANCELED, None),
        (StopType.TERMINATE, FlowStatus.TERMINATED, None),
        (StopType.FAIL, FlowStatus.FAILED, FlowErrorType.CLIENT_API_FAILED),
    ],
)
async def test_stop_flow_closes_the_run_and_cancels_its_steps(
    engine_factory: Any, stop_type: StopType, status: FlowStatus, error_type: Any
) -> None:
    engine, flow = await _engine(engine_factory)
    await _held(engine, flow, "stopped")
    await engine.client.stop_flow("stopped", StopFlowOptions(type=stop_type, reason="enough"))
    result = await engine.client.wait_for_flow("stopped", timeout=TIMEOUT)
    assert result.status is status
    assert result.error_type is error_type
    assert result.error_message == "enough"
    assert ("Hold-1", "step_canceled") in await events(engine.client, "stopped")
    with pytest.raises(FlowNotActiveOrNotFoundError):
        await engine.client.stop_flow("stopped")
    with pytest.raises(FlowNotActiveOrNotFoundError):
        await engine.client.invoke_rpc(flow.release, "stopped")


async def test_operations_on_an_unknown_flow_id_create_no_host(engine_factory: Any) -> None:
    import ray
    from dex import Stream

    engine, flow = await _engine(engine_factory)
    with pytest.raises(FlowNotActiveOrNotFoundError):
        await engine.client.invoke_rpc(flow.release, "never-started")
    with pytest.raises(FlowNotActiveOrNotFoundError):
        await engine.client.stop_flow("never-started")
    with pytest.raises(FlowNotFoundError):
        await engine.client.read_stream("never-started", Stream("progress", str, 1024))
    names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)]
    assert not any(name.endswith("never-started") for name in names)


async def test_a_flow_id_the_client_saw_run_is_not_looked_up_again(engine_factory: Any) -> None:
    from dex_agents_ray.engine import EngineClient

    engine, flow = await _engine(engine_factory)
    await _held(engine, flow, "seen")
    lookups: list[str] = []
    get_run = engine.store.runs.get_run

    async def counted(flow_id: str) -> Any:
        lookups.append(flow_id)
        return await get_run(flow_id)

    engine.store.runs.get_run = counted
    assert await engine.client.invoke_rpc(flow.set_owner, "seen", "ada") == "ada"
    assert await engine.client.invoke_rpc(flow.set_owner, "seen", "bob") == "bob"
    assert lookups == []  # started by this client: it exists
    other = EngineClient(engine)  # another client (a process that did not start it)
    assert await other.invoke_rpc(flow.set_owner, "seen", "cy") == "cy"
    assert await other.invoke_rpc(flow.set_owner, "seen", "dee") == "dee"
    assert lookups == ["seen"]  # looked up once, then known
    with pytest.raises(FlowNotActiveOrNotFoundError):
        await other.invoke_rpc(flow.release, "never-started")
    with pytest.raises(FlowNotActiveOrNotFoundError):
        await other.invoke_rpc(flow.release, "never-started")
    assert lookups == ["seen", "never-started", "never-started"]  # a miss is not remembered
    other.close_channels()
