"""The client: search_flows, the sync client from a plain thread, a second engine."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from dex import FlowAlreadyStartedError, FlowStatus, Value, WireKind

from tests.engine.flows_client import ClientFlow, Job, OtherFlow
from tests.engine.polling import wait_for_event

TIMEOUT = 60


async def _ids(engine: Any, query: str) -> set[str]:
    page = await engine.client.search_flows(query, 100)
    assert page.next_page_token == ""
    return {entry.flow_id for entry in page.flows}


async def test_search_flows_by_type_active_steps_and_indexed_attributes(
    engine_factory: Any,
) -> None:
    client_flow, other_flow = ClientFlow(), OtherFlow()
    engine = await engine_factory([client_flow, other_flow])
    client = engine.client
    await client.start_flow(client_flow, "bob-1", Job(owner="bob", priority=2))
    await client.start_flow(client_flow, "alice-1", Job(owner="alice", priority=1))
    await client.start_flow(other_flow, "other-1", "x")
    for flow_id in ("bob-1", "alice-1"):
        await wait_for_event(client, flow_id, "Hold-1", "wait_for_completed")
    await wait_for_event(client, "other-1", "Idle-1", "wait_for_completed")

    assert await _ids(engine, "FlowType = 'ClientFlow'") == {"bob-1", "alice-1"}
    assert await _ids(engine, 'FlowType = "OtherFlow"') == {"other-1"}
    assert await _ids(engine, "ActiveStepTypes = 'Hold'") == {"bob-1", "alice-1"}
    assert await _ids(engine, "ActiveStepTypes = 'Idle'") == {"other-1"}
    assert await _ids(engine, "owner = 'bob'") == {"bob-1"}
    assert await _ids(engine, "priority = 1 AND FlowType = 'ClientFlow'") == {"alice-1"}
    assert await _ids(engine, "owner = 'bob' AND ActiveStepTypes = 'Idle'") == set()
    assert await _ids(engine, "FlowType = 'ClientFlow' AND owner != 'bob'") == {"alice-1"}

    [bob] = (await client.search_flows("owner = 'bob'", 10)).flows
    assert (bob.flow_type, bob.status, bob.closed_at) == ("ClientFlow", FlowStatus.RUNNING, None)
    assert bob.indexed_attributes["owner"] == Value(WireKind.STRING, "bob")
    assert bob.indexed_attributes["priority"] == Value(WireKind.INT64, 2)

    await client.invoke_rpc(other_flow.nudge, "other-1")
    await client.wait_for_flow("other-1", timeout=TIMEOUT)
    assert await _ids(engine, "ActiveStepTypes = 'Idle'") == set()
    [closed] = (await client.search_flows("FlowType = 'OtherFlow'", 10)).flows
    assert closed.status is FlowStatus.COMPLETED and closed.closed_at is not None


async def test_search_flows_pages_and_rejects_malformed_queries(engine_factory: Any) -> None:
    flow = ClientFlow()
    engine = await engine_factory([flow])
    for i in range(3):
        await engine.client.start_flow(flow, f"page-{i}", Job(finish=True))
    seen: list[str] = []
    token = ""
    pages = 0
    while True:
        page = await engine.client.search_flows("FlowType = 'ClientFlow'", 2, token)
        seen.extend(entry.flow_id for entry in page.flows)
        pages += 1
        token = page.next_page_token
        if not token:
            break
    assert pages == 2
    assert sorted(seen) == ["page-0", "page-1", "page-2"]
    for query in (
        "FlowType =",
        "FlowType 'ClientFlow'",
        "FlowType = 'ClientFlow' OR owner = 'bob'",
        "FlowType = 'ClientFlow' AND",
        "= 'ClientFlow'",
        "FlowType = ClientFlow",
    ):
        with pytest.raises(ValueError, match="search query"):
            await engine.client.search_flows(query, 10)
    with pytest.raises(ValueError, match="page_size"):
        await engine.client.search_flows("FlowType = 'ClientFlow'", 0)


async def test_the_sync_client_works_from_a_plain_thread(engine_factory: Any) -> None:
    flow = ClientFlow()
    engine = await engine_factory([flow])
    outcome: dict[str, Any] = {}

    def script() -> None:
        client = engine.sync_client()
        run_id = client.start_flow(flow, "sync", Job(owner="thread"))
        while not any(h.event == "wait_for_completed" for h in client.read_step_history("sync")):
            threading.Event().wait(0.05)
        outcome["rpc"] = client.invoke_rpc(flow.release, "sync")
        outcome["result"] = client.wait_for_flow("sync", timeout=TIMEOUT)
        outcome["info"] = client.describe_flow("sync")
        outcome["run_id"] = run_id
        outcome["search"] = client.search_flows("owner = 'thread'", 10)

    def guarded() -> None:
        try:
            script()
        except BaseException as error:  # reported to the test below
            outcome["error"] = error

    thread = threading.Thread(target=guarded, name="plain-script")
    thread.start()
    await asyncio.to_thread(thread.join, 120)
    assert "error" not in outcome, outcome.get("error")
    assert outcome["rpc"] == "released"
    assert outcome["result"].single_output(dict[str, Any]) == {"owner": "thread", "tags": {}}
    assert outcome["info"].run_id == outcome["run_id"]
    assert [e.flow_id for e in outcome["search"].flows] == ["sync"]


async def test_a_second_engine_on_the_same_store_operates_the_same_run(
    engine_factory: Any,
) -> None:
    first_flow = ClientFlow()
    first = await engine_factory([first_flow])
    run_id = await first.client.start_flow(first_flow, "shared", Job(owner="first"))
    await wait_for_event(first.client, "shared", "Hold-1", "wait_for_completed")

    second_flow = ClientFlow()
    second = await engine_factory([second_flow])
    info = await second.client.describe_flow("shared")
    assert (info.run_id, info.status) == (run_id, FlowStatus.RUNNING)
    with pytest.raises(FlowAlreadyStartedError):
        await second.client.start_flow(second_flow, "shared", Job())
    assert await second.client.invoke_rpc(second_flow.set_owner, "shared", "second") == "second"
    assert await second.client.invoke_rpc(second_flow.release, "shared") == "released"
    result = await first.client.wait_for_flow("shared", timeout=TIMEOUT)
    assert result.single_output(dict[str, Any]) == {"owner": "second", "tags": {}}
