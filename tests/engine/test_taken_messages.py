"""``taken_channel_messages``: an RPC sees the Channel messages a satisfied wait took
while the Step's ``execute`` has not committed, also after the host restarts.

Hold waits on ``Go``; its synchronous ``execute`` holds at a gate (in a handler
thread, so the host keeps serving RPCs). The ``inbox`` RPC lists what ``Go``
holds: the taken message, then the pending ones.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from dex import WorkerInvocationError

from dex_agents_ray.engine import taken_channel_messages
from dex_agents_ray.engine.store._records import ExecRecord, ExecStatus, RunRecord, RunStatus
from dex_agents_ray.engine.store._run_rows import run_from_row
from dex_agents_ray.testing import FileGate, kill_flow_actor
from tests.engine.flows_config import ConfigFlow, Go, Inbox, Task
from tests.engine.polling import wait_for_event

TIMEOUT = 60


async def test_an_rpc_sees_a_taken_message_until_its_step_commits(
    engine_factory: Any, state_dir: Path
) -> None:
    flow = ConfigFlow()
    engine = await engine_factory([flow])
    client = engine.client
    FileGate(state_dir, "work").release()
    await client.start_flow(flow, "r", Task(str(state_dir), hold_gate="hold"))
    await wait_for_event(client, "r", "Hold-1", "wait_for_completed")
    empty: Inbox = await client.invoke_rpc(flow.inbox, "r")
    assert (empty.taken, empty.pending) == ([], [])

    await client.invoke_rpc(flow.push, "r", "first")
    hold = FileGate(state_dir, "hold")
    await hold.wait_until_reached(timeout=TIMEOUT)
    await client.invoke_rpc(flow.push, "r", "second")

    inbox: Inbox = await client.invoke_rpc(flow.inbox, "r")
    assert (inbox.taken, inbox.pending) == (["first"], ["second"])
    [taken_id] = inbox.taken_ids
    assert taken_id and taken_id not in inbox.pending_ids

    # The host dies with the attempt at the gate: the run reloads from the store,
    # the attempt runs again, and the taken message (its ID too) is still shown.
    await kill_flow_actor(engine, "r")
    await hold.wait_until_reached(times=2, timeout=TIMEOUT)
    again: Inbox = await client.invoke_rpc(flow.inbox, "r")
    assert (again.taken, again.taken_ids, again.pending) == (["first"], [taken_id], ["second"])

    hold.release()
    result = await client.wait_for_flow("r", timeout=TIMEOUT)
    assert result.single_output(str) == "first"
    closed: Inbox = await client.invoke_rpc(flow.inbox, "r")
    assert (closed.taken, closed.pending) == ([], ["second"])


async def test_it_needs_the_channel_loaded_and_an_engine_context(
    engine_factory: Any, state_dir: Path
) -> None:
    flow = ConfigFlow()
    engine = await engine_factory([flow])
    FileGate(state_dir, "work").release()
    await engine.client.start_flow(flow, "r", Task(str(state_dir)))

    with pytest.raises(WorkerInvocationError) as refused:
        await engine.client.invoke_rpc(flow.inbox_unloaded, "r")
    assert refused.value.worker_error_type == "ChannelMessagesNotLoadedError"
    assert "not loaded for this invocation: go" in refused.value.worker_error_detail
    with pytest.raises(TypeError, match="needs a Context of this engine"):
        taken_channel_messages(object(), Go)  # type: ignore[arg-type]


def test_rows_written_before_taken_and_search_modes_read_as_none_and_default() -> None:
    """An execution row without ``taken`` and a run row without a search mode (a
    store an earlier release wrote) read as no taken messages and the default."""
    record = ExecRecord(
        exec_id="Hold-1",
        step_type="Hold",
        number=1,
        input=b"",
        options=b"",
        from_exec_id="",
        status=ExecStatus.READY,
        created_at=1.0,
    )
    older = json.loads(record.to_json())
    del older["taken"]
    assert ExecRecord.from_json(json.dumps(older)).taken == ()
    row = list(
        RunRecord(
            flow_id="f",
            run_id="r",
            flow_type="T",
            flow_hash="h",
            status=RunStatus.RUNNING,
            epoch=1,
            started_at=1.0,
        ).row()
    )
    extra = json.loads(row[-1])
    del extra["active_step_search_mode"]
    row[-1] = json.dumps(extra)
    assert run_from_row(tuple(row), 1).active_step_search_mode == "default"
