"""Retention on every backend: a commit's ``PruneRequest`` deletes the run's older
finished executions with their history and its older RPC responses, and keeps
active executions, completions and other runs."""

from __future__ import annotations

from dex_agents_ray.engine.store._records import Commit, ExecStatus, PruneRequest
from tests.stores.conftest import Backend
from tests.stores.records import completion, entry, execution, opened, run


async def test_prune_keeps_the_newest_finished_executions_and_rpc_responses(
    backend: Backend,
) -> None:
    async with opened(backend.config) as store:
        for flow_id in ("a", "b"):
            epoch, _ = await store.runs.activate(flow_id)
            await store.runs.commit(Commit(flow_id=flow_id, epoch=epoch, run=run(flow_id)))
            for i in range(1, 6):
                await store.runs.commit(
                    Commit(
                        flow_id=flow_id,
                        epoch=epoch,
                        executions=[execution(f"Step-{i}", ExecStatus.COMPLETED)],
                        history=[entry(f"Step-{i}", "step_completed")],
                        rpc_request=(f"req-{i}", b"ok"),
                    )
                )
        epoch, _ = await store.runs.activate("a")
        await store.runs.commit(
            Commit(
                flow_id="a",
                epoch=epoch,
                executions=[execution("Wait-1", ExecStatus.WAITING)],
                completions=[completion("Step-1", b"out")],
                prune=PruneRequest(keep_finished_executions=2, keep_rpc_requests=1),
            )
        )
        epoch, loaded = await store.runs.activate("a")
        assert loaded is not None
        assert sorted(e.exec_id for e in loaded.executions) == ["Step-4", "Step-5", "Wait-1"]
        assert [c.exec_id for c in loaded.completions] == ["Step-1"]
        assert [h.exec_id for h in await store.runs.history("a")] == ["Step-4", "Step-5"]
        # History of no kept execution (an RPC's): only the newest as many as RPC responses.
        await store.runs.commit(
            Commit(
                flow_id="a",
                epoch=epoch,
                history=[entry("", "rpc", n=1), entry("", "rpc", n=2)],
                prune=PruneRequest(keep_finished_executions=2, keep_rpc_requests=1),
            )
        )
        kept = [(h.exec_id, h.detail.get("n")) for h in await store.runs.history("a")]
        assert kept == [("Step-4", None), ("Step-5", None), ("", 2)]
        assert await store.runs.rpc_response("a", "req-5") == b"ok"
        assert await store.runs.rpc_response("a", "req-4") is None
        # Another run keeps everything.
        assert len(await store.runs.history("b")) == 5
        assert await store.runs.rpc_response("b", "req-1") == b"ok"
