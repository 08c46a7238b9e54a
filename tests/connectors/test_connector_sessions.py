"""Connector tools in whole sessions on the engine (real Ray, SQLite, the loopback
provider): retries by effect, host kills mid-write, ordered writes, approval."""

from __future__ import annotations

import json
from typing import Any

from dex_agents_ray import (
    TOOL_CALL_NOT_RUN_ERROR_PREFIX,
    TOOL_CALL_SKIPPED_AFTER_WRITE_DETAIL,
    AgentSessionClient,
    AgentSnapshot,
    ToolEffect,
    ToolPolicy,
)
from dex_agents_ray.connectors import (
    DEFAULT_CONNECTOR_RESULT_MAX_BYTES,
    OUTCOME_UNKNOWN_TOOL_RESULT,
    ConnectorToolSource,
)
from dex_agents_ray.testing import kill_flow_actor
from tests.connectors.agents import connector_flow
from tests.connectors.provider import Answer, Provider
from tests.connectors.support import ledger_tool
from tests.session.polling import eventually, has_interrupt, snapshot_when, turn_done

REFUND = {"charge": "ch_1", "amount": 700, "reason": "requested"}
UNKNOWN = "The tool call's outcome is unknown"


def _source(provider: Provider, *factories: str) -> ConnectorToolSource:
    return ConnectorToolSource([ledger_tool(provider, factory) for factory in factories])


async def _answer(sessions: AgentSessionClient, session_id: str) -> str:
    done = await snapshot_when(sessions, session_id, turn_done(1), timeout=120)
    assert done.state is not None and done.state.last_turn_error is None
    return done.messages[-1].text or ""


async def _requests(provider: Provider, path: str, count: int) -> None:
    async def seen() -> int:
        return len(provider.to(path))

    await eventually(seen, lambda n: n >= count, timeout=120, description=f"{count} x {path}")


async def test_a_query_retries_and_a_write_asking_to_retry_is_never_sent_again(
    engine_factory: Any, provider: Provider
) -> None:
    provider.script("/balance", Answer(503, {"message": "busy"}))
    provider.script("/refunds", Answer(503, {"message": "busy"}))
    flow = connector_flow(
        "ConnectorRetries",
        _source(provider, "get_balance", "create_refund"),
        [("c1", "ledger_get_balance", {"account": "A1"}), ("c2", "ledger_create_refund", REFUND)],
    )
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("retries", "go")
    answer = await _answer(sessions, "retries")

    assert 'ledger_get_balance: {"account":"A1","balance":120}' in answer
    assert f"ledger_create_refund: {UNKNOWN}" in answer
    balance = provider.to("/balance")
    assert len(balance) == 2 and balance[0].call_id == balance[1].call_id  # one Call ID
    assert len(provider.to("/refunds")) == 1  # single attempt: never sent again


async def _kill_host_during(
    engine_factory: Any, provider: Provider, factory: str, arguments: dict[str, Any], path: str
) -> str:
    """Run one call of ``factory``'s tool, kill the session's host while the provider
    holds its request, and return the answer."""
    tool = ledger_tool(provider, factory)
    session_id = f"kill-{factory}"
    flow = connector_flow(
        f"ConnectorKill_{factory}", ConnectorToolSource([tool]), [("c1", tool.name, arguments)]
    )
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    held = provider.hold(path)
    await sessions.start_session(session_id, "go")
    await _requests(provider, path, 1)
    await kill_flow_actor(engine, session_id)
    try:
        return await _answer(sessions, session_id)
    finally:
        held.set()


async def test_a_single_attempt_write_killed_mid_call_is_outcome_unknown_and_sent_once(
    engine_factory: Any, provider: Provider
) -> None:
    answer = await _kill_host_during(engine_factory, provider, "create_refund", REFUND, "/refunds")

    assert answer.startswith(f"ledger_create_refund: {UNKNOWN}")
    assert TOOL_CALL_NOT_RUN_ERROR_PREFIX not in answer
    assert len(provider.to("/refunds")) == 1 and len(provider.refunds) == 1


async def test_a_safe_write_killed_mid_call_retries_with_the_same_call_id_and_key(
    engine_factory: Any, provider: Provider
) -> None:
    entry = {"account": "A1", "amount": 5}
    answer = await _kill_host_during(engine_factory, provider, "post_entry", entry, "/entries")

    first, second = provider.to("/entries")
    assert answer == 'ledger_post_entry: {"account":"A1","amount":5,"entryId":"en_1"}'
    assert first.call_id == second.call_id and first.call_id is not None
    assert first.idempotency_key == second.idempotency_key == f"ledger:{first.call_id}"
    assert [first.headers["x-attempt"], second.headers["x-attempt"]] == ["1", "2"]
    assert len(provider.entries) == 1  # the provider applied the write once


async def test_ordered_writes_stop_after_a_failed_middle_write(
    engine_factory: Any, provider: Provider
) -> None:
    provider.script(
        "/refunds",
        Answer(200, {"refundId": "re_1"}),
        Answer(402, {"message": "declined"}, {"X-Not-Processed": "1"}),
    )
    flow = connector_flow(
        "ConnectorOrdered",
        _source(provider, "get_balance", "create_refund", "post_entry"),
        [
            ("r1", "ledger_get_balance", {"account": "A1"}),
            ("w1", "ledger_create_refund", REFUND),
            ("w2", "ledger_create_refund", {**REFUND, "amount": 9}),
            ("w3", "ledger_post_entry", {"account": "A1", "amount": 5}),
            ("r2", "ledger_get_balance", {"account": "A2"}),
        ],
    )
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("ordered", "go")
    answer = await _answer(sessions, "ordered")

    assert answer.split(" | ") == [
        'ledger_get_balance: {"account":"A1","balance":120}',
        'ledger_create_refund: {"refundId":"re_1"}',
        "ledger_create_refund: The tool call failed: "
        "ledger createRefund returned cardDeclined: card_declined: declined",
        f"ledger_post_entry: The tool call failed: {TOOL_CALL_NOT_RUN_ERROR_PREFIX}: "
        f"{TOOL_CALL_SKIPPED_AFTER_WRITE_DETAIL}",
        'ledger_get_balance: {"account":"A2","balance":120}',
    ]
    assert [r.body["amount"] for r in provider.to("/refunds")] == [700, 9]  # in model order
    assert provider.to("/entries") == []  # skipped: never sent


async def test_an_unknown_branch_shows_the_model_only_the_constant(
    engine_factory: Any, provider: Provider
) -> None:
    provider.script("/refunds", Answer(404, {"message": "no charge ch_1"}))
    flow = connector_flow(
        "ConnectorUnknownBranch",
        _source(provider, "create_refund", "get_balance"),
        [("c1", "ledger_create_refund", REFUND), ("c2", "ledger_get_balance", {"account": "A1"})],
    )
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    held = provider.hold("/balance")  # keeps the turn open while the refund's record is final

    def refunded(snapshot: AgentSnapshot) -> bool:
        return any(r.tool_call_id == "c1" and r.is_final for r in snapshot.tool_calls)

    await sessions.start_session("unknown", "go")
    try:
        running = await snapshot_when(sessions, "unknown", refunded, timeout=120)
    finally:
        held.set()
    answer = await _answer(sessions, "unknown")

    # chargeMissing is listed unknown: the model reads exactly the constant, and the
    # branch's text is the record's error.
    [record] = [r for r in running.tool_calls if r.tool_call_id == "c1"]
    assert record.status.value == "outcome_unknown"
    assert record.error == (
        "ledger createRefund returned chargeMissing: charge_missing: no charge ch_1"
    )
    assert answer.split(" | ")[0] == f"ledger_create_refund: {OUTCOME_UNKNOWN_TOOL_RESULT}"
    assert len(provider.to("/refunds")) == 1


async def test_a_session_policy_changes_only_the_approval(
    engine_factory: Any, provider: Provider
) -> None:
    flow = connector_flow(
        "ConnectorPolicy",
        _source(provider, "create_refund"),
        [("c1", "ledger_create_refund", REFUND)],
        tool_policies={"ledger_create_refund": ToolPolicy(ToolEffect.READ, True)},
    )
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("policy", "go")
    asked = await snapshot_when(sessions, "policy", has_interrupt, timeout=120)

    [record] = asked.tool_calls
    assert (record.effect, record.requires_approval) == (ToolEffect.NON_IDEMPOTENT_WRITE, True)
    assert record.ordered and provider.requests == []
    assert await sessions.resolve_interrupt("policy", "c1", approved=True)
    answer = await _answer(sessions, "policy")
    assert answer == 'ledger_create_refund: {"amount":700,"charge":"ch_1",' + (
        '"reason":"requested","refundId":"re_1"}'
    )
    assert len(provider.to("/refunds")) == 1


async def test_a_cut_result_keeps_its_full_size_on_the_record(
    engine_factory: Any, provider: Provider
) -> None:
    flow = connector_flow(
        "ConnectorTruncated",
        _source(provider, "list_story_ids", "get_balance"),
        [
            ("c1", "ledger_list_story_ids", {"count": 8000}),
            ("c2", "ledger_get_balance", {"account": "A1"}),
        ],
    )
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    held = provider.hold("/balance")  # keeps the turn open while the first call is final
    await sessions.start_session("cut", "go")

    def listed(snapshot: AgentSnapshot) -> bool:
        return any(r.tool_call_id == "c1" and r.is_final for r in snapshot.tool_calls)

    try:
        running = await snapshot_when(sessions, "cut", listed, timeout=120)
    finally:
        held.set()
    [record] = [r for r in running.tool_calls if r.tool_call_id == "c1"]
    full = len(json.dumps({"ids": [f"story-{n:05d}" for n in range(8000)]}, separators=(",", ":")))
    assert record.truncated_output_bytes == full
    assert record.output is not None and len(record.output.encode()) > (
        DEFAULT_CONNECTOR_RESULT_MAX_BYTES
    )
    await _answer(sessions, "cut")
