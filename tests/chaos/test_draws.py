"""The campaign's fault draws: the last faults go to the kinds not injected yet."""

from __future__ import annotations

import asyncio
import random
import time
from datetime import timedelta
from typing import Any, cast

from dex_agents_ray.testing.chaos import ChaosCampaign, FaultKind
from dex_agents_ray.testing.chaos._faults import FaultOutcome

RARE = {FaultKind.SESSION_HOST: 1000.0, FaultKind.TOOL_EXECUTOR: 0.001, FaultKind.SCHEDULER: 0.001}


class _Injector:
    """Records the kinds asked for; ``no_target`` kinds never find one."""

    def __init__(self, no_target: frozenset[FaultKind] = frozenset()) -> None:
        self.kinds: list[FaultKind] = []
        self.no_target = no_target

    async def inject(self, kind: FaultKind, busy: list[str]) -> FaultOutcome:
        self.kinds.append(kind)
        return FaultOutcome(target="t", injected=kind not in self.no_target, detail="")


async def _draw(faults: int, injector: _Injector) -> None:
    campaign = ChaosCampaign(
        engine=cast(Any, None),
        flow=cast(Any, None),
        turns=["hello"],
        faults=faults,
        seed=1,
        fault_weights=RARE,
        interval=(timedelta(microseconds=1), timedelta(microseconds=1)),
    )
    never_ends = asyncio.create_task(asyncio.sleep(3600))  # a session slot still running
    log: list[Any] = []
    await campaign._inject(
        cast(Any, injector), random.Random(1), log, time.monotonic(), asyncio.Event(), [never_ends]
    )
    never_ends.cancel()


async def test_every_weighted_kind_occurs_however_rare() -> None:
    injector = _Injector()
    await _draw(6, injector)
    assert injector.kinds[:4] == [FaultKind.SESSION_HOST] * 4
    assert set(injector.kinds[4:]) == {FaultKind.TOOL_EXECUTOR, FaultKind.SCHEDULER}
    assert len(injector.kinds) == 6


async def test_a_kind_that_finds_no_target_does_not_hold_the_campaign_up() -> None:
    injector = _Injector(no_target=frozenset({FaultKind.SCHEDULER}))
    await _draw(6, injector)
    injected = [k for k in injector.kinds if k is not FaultKind.SCHEDULER]
    assert len(injected) == 6 and FaultKind.TOOL_EXECUTOR in injected
    assert injector.kinds.count(FaultKind.SCHEDULER) >= 20  # tried, then drawn by weight
