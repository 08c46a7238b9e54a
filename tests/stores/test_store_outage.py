"""A PostgreSQL server away past the store's retry deadline: callers get the
documented error, and the sessions resume once it is back."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from dex_agents_ray import AgentSessionClient, AgentSessionOptions, ToolEffect, ToolPolicy
from dex_agents_ray.engine import PostgresStoreConfig, StoreUnavailableError
from dex_agents_ray.testing import FileGate, InvocationLog
from tests.session.agents import Call, Reply, build_flow
from tests.session.polling import eventually, snapshot_when, turn_done
from tests.stores.postgres_server import PostgresServer
from tests.stores.tcp_proxy import fault_proxy


async def test_sessions_resume_after_an_outage_longer_than_the_deadline(
    engine_factory: Any, state_dir: Path, postgres_server: PostgresServer, postgres_dsn: str
) -> None:
    options = AgentSessionOptions(
        tool_policies={"work": ToolPolicy(ToolEffect.READ, requires_approval=False)}
    )
    flow = build_flow(
        state_dir, {"go": [Reply(calls=[Call("c1", "work")]), Reply()]}, {"work": "gate"},
        options=options,
    )  # fmt: skip
    with fault_proxy(postgres_server.port) as proxy:
        dsn = postgres_dsn.replace(f":{postgres_server.port}/", f":{proxy.port}/")
        store = PostgresStoreConfig(dsn=dsn, retry_deadline=timedelta(seconds=2))
        engine = await engine_factory([flow], store=store)
        sessions = AgentSessionClient(engine.client, flow)
        await sessions.start_session("outage-1", "go")
        await FileGate(state_dir, "work-1").wait_until_reached(timeout=120)
        FileGate(state_dir, "work-2").release()

        proxy.down()
        FileGate(state_dir, "work-1").release()  # its result cannot be committed now
        # A read of the store fails, naming it (a snapshot the host answers from its
        # committed state in memory may still succeed until the host drops the run).
        with pytest.raises(StoreUnavailableError) as failed:
            await engine.client.describe_flow("outage-1")
        assert failed.value.store == store.location
        # The host's commit of the tool result gave up too: it dropped the run.
        host = engine.host("outage-1")
        await eventually(lambda: host.reloading.remote(), lambda ids: "outage-1" in ids)
        proxy.up()

        done = await snapshot_when(sessions, "outage-1", turn_done(1), timeout=180)
        assert done.messages[-1].text == "work=work done"
        # Reloaded from the store, the read whose result was lost ran again.
        assert [e.split("/")[1] for e in InvocationLog(state_dir / "work.log").entries()] == [
            "1",
            "2",
        ]
        history = await engine.client.read_step_history("outage-1")
        failed_attempts = [h.detail["error_type"] for h in history if h.event == "attempt_failed"]
        assert failed_attempts == ["HostDiedError"]
        # Shut down while the proxy still forwards: closing the store's connections
        # through a proxy already gone took the fixture's teardown 8 s.
        await engine.shutdown(stop_hosts=True)
