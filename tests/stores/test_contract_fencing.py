"""The epoch fence under concurrency, on every backend: two store objects (as two
processes would hold) race activations and commits of one run."""

from __future__ import annotations

import asyncio

from dex_agents_ray.engine import FlowStore, StaleEpochError
from dex_agents_ray.engine.store._records import Commit, LoadedRun
from tests.stores.conftest import Backend
from tests.stores.records import completion, entry, opened, run


async def _commit_outcome(store: FlowStore, commit: Commit) -> StaleEpochError | None:
    try:
        await store.runs.commit(commit)
    except StaleEpochError as refused:
        return refused
    return None


async def test_racing_owners_leave_one_winning_epoch(backend: Backend) -> None:
    async with opened(backend.config) as first, opened(backend.config) as second:
        (epoch_a, _), (epoch_b, _) = await asyncio.gather(
            first.runs.activate("a"), second.runs.activate("a")
        )
        assert {epoch_a, epoch_b} == {1, 2}

        outcomes = await asyncio.gather(
            _commit_outcome(first, Commit(flow_id="a", epoch=epoch_a, run=run("a", run_id="A"))),
            _commit_outcome(second, Commit(flow_id="a", epoch=epoch_b, run=run("a", run_id="B"))),
        )

        winner = "A" if epoch_a == 2 else "B"
        refused = [o for o in outcomes if o is not None]
        assert len(refused) == 1 and refused[0].current == 2
        found = await first.runs.get_run("a")
        assert found is not None and (found.run_id, found.epoch) == (winner, 2)


async def test_no_commit_of_the_old_owner_lands_after_a_take_over(backend: Backend) -> None:
    async with opened(backend.config) as old, opened(backend.config) as new:
        epoch, _ = await old.runs.activate("a")
        await old.runs.commit(Commit(flow_id="a", epoch=epoch, run=run("a")))

        async def take_over() -> tuple[int, LoadedRun | None]:
            return await new.runs.activate("a")

        commits = [
            _commit_outcome(
                old, Commit(flow_id="a", epoch=epoch, completions=[completion(f"W-{i}", b"")])
            )
            for i in range(20)
        ]
        # gather starts the old owner's commits first, then the take-over.
        *outcomes, (new_epoch, loaded) = await asyncio.gather(*commits, take_over())

        assert new_epoch == epoch + 1 and loaded is not None
        landed = [o for o in outcomes if o is None]
        assert all(o.current == new_epoch for o in outcomes if o is not None)
        # Whatever landed, the new owner loaded; nothing landed after it.
        assert len(loaded.completions) == len(landed)
        assert await new.runs.completions("a") == loaded.completions


async def test_concurrent_commits_of_the_owner_all_apply_in_sequence(backend: Backend) -> None:
    async with opened(backend.config) as store:
        epoch, _ = await store.runs.activate("a")
        await store.runs.commit(Commit(flow_id="a", epoch=epoch, run=run("a")))

        await asyncio.gather(
            *(
                store.runs.commit(
                    Commit(
                        flow_id="a",
                        epoch=epoch,
                        attribute_upserts={f"k{i}": b"v"},
                        completions=[completion(f"W-{i}", b"%d" % i)],
                        history=[entry(f"W-{i}", "step_completed")],
                    )
                )
                for i in range(20)
            )
        )

        completions = await store.runs.completions("a")
        assert sorted(c.exec_id for c in completions) == sorted(f"W-{i}" for i in range(20))
        history = await store.runs.history("a")
        # Each commit's completion and history entry keep the same relative order.
        assert [h.exec_id for h in history] == [c.exec_id for c in completions]
        _, loaded = await store.runs.activate("a")
        assert loaded is not None and len(loaded.attributes) == 20
