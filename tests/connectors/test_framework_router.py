"""FrameworkToolSourceRouter through a minimal framework adapter: listing with
collision checks, calls built and routed through their source, and replay-only
tools answered inside the framework."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from dex_agents_ray import AgentSessionClient, BuiltInTool
from dex_agents_ray.builtin_loop import (
    SOURCE_TOOL_NOT_OFFERED_RESULT,
    FrameworkToolSourceRouter,
    SourceToolListing,
)
from dex_agents_ray.connectors import ConnectorToolSource
from tests.connectors.framework import NATIVE_TOOL, DroppingSource, framework_flow
from tests.connectors.provider import Provider
from tests.connectors.support import lab_tool, ledger_tool
from tests.mcp.support import record, turn
from tests.session.polling import eventually, snapshot_when, turn_done


async def test_the_router_refuses_a_source_tool_that_repeats_another_tool(
    provider: Provider,
) -> None:
    balance = ledger_tool(provider, "get_balance")
    router = FrameworkToolSourceRouter([ConnectorToolSource([balance])])
    twice = FrameworkToolSourceRouter(
        [ConnectorToolSource([balance]), ConnectorToolSource([balance], source_name="other")]
    )
    asking = ledger_tool(provider, "get_balance", name="ask_user")
    built_in = FrameworkToolSourceRouter([ConnectorToolSource([asking])])
    asks = dataclasses.replace(turn(), enabled_built_in_tools=frozenset({BuiltInTool.ASK_USER}))

    with pytest.raises(ValueError, match="uses the name of a framework tool"):
        await router.list_for_turn(turn(), framework_tool_names={"ledger_get_balance"})
    with pytest.raises(ValueError, match="two tool sources list a tool named"):
        await twice.list_for_turn(turn())
    with pytest.raises(ValueError, match="uses the name of an enabled built-in tool"):
        await built_in.list_for_turn(asks)
    listing = await router.list_for_turn(turn(), framework_tool_names={NATIVE_TOOL})
    assert [tool.name for _, tool in listing.tools] == ["ledger_get_balance"]
    assert listing.replay_only_tools == ()


async def test_calls_are_built_and_routed_through_their_source(provider: Provider) -> None:
    source = ConnectorToolSource([ledger_tool(provider, "create_refund")], source_name="pay")
    router = FrameworkToolSourceRouter([source])
    listing = await router.list_for_turn(turn())
    arguments = json.dumps({"charge": "ch_1", "amount": 5, "reason": "fraud"})

    call = router.build_call(
        turn(), listing, tool_call_id="c1", tool_name="ledger_create_refund", arguments=arguments
    )
    other = router.build_call(
        turn(), listing, tool_call_id="c2", tool_name=NATIVE_TOOL, arguments="{}"
    )

    assert call is not None and other is None
    assert call.ordered and not call.policy.approval_required
    assert json.loads(call.tool_source_reference or "") == {
        "stepwise_tool_source": "pay",
        "reference": '{"tool":"ledger_create_refund"}',
    }
    stored = record("ledger_create_refund", call.tool_source_reference)
    assert router.is_source_call(stored)
    assert router.tool_call_step_options(stored) == source.tools[0].step_options


async def test_replay_only_tools_come_from_the_turns_records(provider: Provider) -> None:
    tool = lab_tool("pickBranch", mutation=False)
    source = ConnectorToolSource([tool])
    router = FrameworkToolSourceRouter([source])
    listing = await router.list_for_turn(turn())
    built = router.build_call(
        turn(), listing, tool_call_id="c1", tool_name=tool.name, arguments="{}"
    )
    assert built is not None
    earlier = record(tool.name, built.tool_source_reference)
    with_call = dataclasses.replace(turn(), tool_calls={"c1": earlier})
    empty = FrameworkToolSourceRouter([ConnectorToolSource([], source_name="connectors")])

    replay = await empty.list_for_turn(with_call)

    assert replay.tools == () and replay.is_replay_only(tool.name)
    assert [t.name for _, t in replay.replay_only_tools] == [tool.name]
    assert replay.replay_only_tools[0][1].name == tool.name
    assert router.replay_result(with_call, "c9") == SOURCE_TOOL_NOT_OFFERED_RESULT
    assert SourceToolListing().replay_only_tools == ()


async def test_a_framework_adapter_replays_a_dropped_tool_and_refuses_a_new_call(
    engine_factory: Any, provider: Provider, state_dir: Path
) -> None:
    source = DroppingSource(
        [ledger_tool(provider, "get_balance"), ledger_tool(provider, "post_entry")],
        state_dir=str(state_dir),
    )
    script = [
        [("c1", "ledger_get_balance", {"account": "A1"}), ("f1", NATIVE_TOOL, {"n": 1})],
        [("c1", "ledger_get_balance", {"account": "A1"}), ("c2", "ledger_get_balance", {})],
    ]
    flow = framework_flow("MiniFramework", [source], script, state_dir=str(state_dir))
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    held = provider.hold("/balance")
    await sessions.start_session("replay", "go")

    async def sent() -> int:
        return len(provider.to("/balance"))

    try:
        await eventually(sent, timeout=120, description="the first balance request")
        (state_dir / "dropped").write_text("ledger_get_balance")  # the source stops listing it
    finally:
        held.set()
    done = await snapshot_when(sessions, "replay", turn_done(1), timeout=120)
    assert done.state is not None and done.state.last_turn_error is None, done.state

    assert done.messages[-1].text == " | ".join(
        [
            'c1 ledger_get_balance: {"account":"A1","balance":120}',  # resumed from its record
            'f1 framework_echo: echo {"n": 1}',
            f"c2 ledger_get_balance: {SOURCE_TOOL_NOT_OFFERED_RESULT}",  # never a tool Step
        ]
    )
    assert len(provider.to("/balance")) == 1
    offers = [json.loads(line) for line in (state_dir / "offers.log").read_text().splitlines()]
    assert offers[0] == {"offered": ["ledger_get_balance", "ledger_post_entry"], "replay_only": []}
    assert offers[-1] == {"offered": ["ledger_post_entry"], "replay_only": ["ledger_get_balance"]}
