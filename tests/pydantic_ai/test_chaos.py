"""A bounded chaos campaign over Pydantic AI sessions: seeded SIGKILLs of session
hosts, tool executors and the scheduler while sessions run every tool effect and
an approval; the kit's invariant checker reads the store and the tools' logs.

Fifteen faults, with the scheduler's weight doubled from the kit's default (4:3:1):
a kind is left out of a campaign about as rarely as with 25 at the default weights."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from dex_agents_ray import (
    TOOL_CALL_NOT_RUN_ERROR_PREFIX,
    AgentSessionOptions,
    MessageRole,
    ToolEffect,
    ToolPolicy,
)
from dex_agents_ray.pydantic_ai import pydantic_ai_session_flow
from dex_agents_ray.testing import InvocationLog
from dex_agents_ray.testing.chaos import ChaosCampaign, FaultKind, ToolInvocation
from tests.pydantic_ai.agents import CHAOS_TURNS, Deps, chaos_agent

pytestmark = pytest.mark.serial  # alone after the parallel run: see scripts/test

POLICIES = {
    "look": ToolPolicy(ToolEffect.READ),
    "save": ToolPolicy(ToolEffect.IDEMPOTENT_WRITE),
    "note": ToolPolicy(ToolEffect.UNCLASSIFIED, requires_approval=False),
    "pay": ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE),
}
FAULTS = 15
WEIGHTS = {FaultKind.SESSION_HOST: 4.0, FaultKind.TOOL_EXECUTOR: 3.0, FaultKind.SCHEDULER: 2.0}


def _invocations(state_dir: Path) -> Iterator[ToolInvocation]:
    for tool in POLICIES:
        for entry in InvocationLog(state_dir / f"{tool}.log").entries():
            call_id, attempt, session_id, turn_id, _, _ = entry.split("/")
            yield ToolInvocation(
                session_id=session_id, turn_id=turn_id, tool_call_id=call_id, attempt=int(attempt)
            )


async def test_a_bounded_campaign_holds_every_invariant_for_pydantic_ai_sessions(
    engine_factory: Any, state_dir: Path, caplog: Any
) -> None:
    caplog.set_level(logging.CRITICAL)
    flow = pydantic_ai_session_flow(
        chaos_agent,
        flow_type="PydanticChaos",
        options=AgentSessionOptions(tool_policies=POLICIES),
        deps=Deps(str(state_dir)),
    )
    engine = await engine_factory([flow], passivate_after=timedelta(seconds=1))
    campaign = ChaosCampaign(
        engine=engine,
        flow=flow,
        turns=CHAOS_TURNS,
        sessions=3,
        faults=FAULTS,
        seed=43,
        fault_weights=WEIGHTS,
        interval=(timedelta(seconds=0.2), timedelta(seconds=0.8)),
        invocations=lambda: _invocations(state_dir),
    )

    report = await campaign.run()
    print(report)

    report.raise_for_violations()
    assert len(report.injected) >= FAULTS
    assert report.turns >= 3 * len(CHAOS_TURNS)
    # Tools ran. The retried ones run in the end; the single-attempt call whose
    # attempt never started (its host or executor killed first) is recorded as not
    # run and never runs again: then every session's result for it says so.
    ran = {i.tool_call_id for i in _invocations(state_dir)}
    assert {"l1", "s1"} <= ran
    if "n1" not in ran:
        results = [
            m.framework_item
            for session in report.record.sessions.values()
            for m in session.messages
            if m.role is MessageRole.TOOL and m.tool_call_id == "n1"
        ]
        assert results, "no session has a result for n1"
        assert all(TOOL_CALL_NOT_RUN_ERROR_PREFIX in item for item in results), results
