"""One connector call in its tool Step, built by hand: argument checks, approval,
the Call ID, the heartbeat-checkpoint context, retries, the branch table, the
fence observation cases and result limits. Real operations of the installed test
packages, against the loopback provider."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import dexconn_lab
import pytest
from dex import RetryAfterError

from dex_agents_ray import AgentToolCallStatus, ToolEffect, ToolPolicy
from dex_agents_ray.connectors import (
    CONNECTOR_NOT_SENT_RETRY_LATER,
    CONNECTOR_RESULT_TRUNCATED_NOTE,
    DEFAULT_CONNECTOR_RESULT_MAX_BYTES,
    ConnectorOperationEntry,
    ConnectorToolSource,
    ListedBranch,
    OperationKind,
    RetryError,
    classify_connector_branch,
    derive_call_id,
    is_retry_error,
    raise_dex_retry,
)
from dex_agents_ray.connectors._outcomes import truncate_result
from tests.connectors.provider import Answer, Provider
from tests.connectors.support import (
    CONFORMANCE,
    STEP_EXECUTION_ID,
    execution,
    lab_tool,
    ledger_tool,
    outcome,
)
from tests.mcp.support import Recorded, turn

REFUND = {"charge": "ch_1", "amount": 700, "reason": "requested"}
NOT_PROCESSED = {"X-Not-Processed": "1"}


def _source(provider: Provider, *factories: str, **kwargs: Any) -> ConnectorToolSource:
    return ConnectorToolSource([ledger_tool(provider, factory) for factory in factories], **kwargs)


# -- arguments ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"charge": "ch_1", "amount": "ten", "reason": "requested"}, "amount: expected integer"),
        ({"charge": "ch_1", "amount": 0, "reason": "requested"}, "expected at least 1"),
        ({"charge": "ch_1", "amount": 5, "reason": "bored"}, "is not one of"),
        ({"charge": "ch_1", "amount": 5}, "missing required property 'reason'"),
        ({**REFUND, "note": "x"}, "unexpected property 'note'"),
        ("[1, 2]", "must be a JSON object"),
        ("{not json", "not valid JSON"),
    ],
)
async def test_arguments_that_break_the_schema_never_reach_the_provider(
    provider: Provider, arguments: dict[str, Any] | str, error: str
) -> None:
    source = _source(provider, "create_refund")
    status, text = await outcome(source, execution(source, "ledger_create_refund", arguments))

    assert status == "failed" and error in text
    assert provider.requests == []


async def test_arguments_that_do_not_decode_never_reach_the_provider(provider: Provider) -> None:
    source = _source(provider, "list_story_ids")
    # 2.0 meets {"type": "integer"}, but the Dex codec decodes an int field from an int only.
    status, text = await outcome(
        source, execution(source, "ledger_list_story_ids", '{"count": 2.0}')
    )

    assert status == "failed"
    assert text.startswith("the arguments do not decode into ListStoryIdsInput: ")
    assert provider.requests == []


# -- approval, effects, order ------------------------------------------------------------


def _policy(source: ConnectorToolSource, name: str, arguments: Any, **kwargs: Any) -> ToolPolicy:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    call = source.deferred_tool_call(
        turn(kwargs.get("policies")), tool_call_id="c1", tool_name=name, arguments=text
    )
    return call.policy


def test_approval_follows_the_manifest_the_override_or_the_predicate(provider: Provider) -> None:
    source = ConnectorToolSource(
        [
            ledger_tool(provider, "get_balance"),
            ledger_tool(provider, "create_refund"),
            ledger_tool(provider, "send_receipt"),
            ledger_tool(provider, "send_receipt", name="receipt_unasked", requires_approval=False),
            ledger_tool(provider, "get_balance", name="balance_asked", requires_approval=True),
            ledger_tool(
                provider,
                "create_refund",
                name="big_refund",
                requires_approval=lambda arguments: arguments["amount"] > 5000,
            ),
            ledger_tool(
                provider,
                "create_refund",
                name="broken_predicate",
                requires_approval=lambda arguments: arguments["missing"] > 1,
            ),
        ]
    )
    receipt = {"email": "a@example.com"}

    assert not _policy(source, "ledger_get_balance", {"account": "A"}).approval_required
    # A Mutation without agent.approval runs unasked, though NON_IDEMPOTENT_WRITE asks elsewhere.
    unasked = _policy(source, "ledger_create_refund", REFUND)
    assert unasked.effect is ToolEffect.NON_IDEMPOTENT_WRITE and not unasked.approval_required
    assert _policy(source, "ledger_send_receipt", receipt).approval_required  # recommended
    assert not _policy(source, "receipt_unasked", receipt).approval_required
    assert _policy(source, "balance_asked", {"account": "A"}).approval_required
    assert _policy(source, "big_refund", {**REFUND, "amount": 6000}).approval_required
    assert not _policy(source, "big_refund", REFUND).approval_required
    assert _policy(source, "broken_predicate", REFUND).approval_required  # it raised: ask


def test_arguments_that_break_the_schema_never_wait(provider: Provider) -> None:
    asked = ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE, requires_approval=True)
    source = ConnectorToolSource(
        [
            ledger_tool(provider, "send_receipt"),
            ledger_tool(provider, "create_refund", requires_approval=lambda arguments: True),
        ]
    )
    policies = {"ledger_create_refund": asked, "ledger_send_receipt": asked}

    assert not _policy(source, "ledger_send_receipt", {"email": 7}).approval_required
    assert not _policy(source, "ledger_create_refund", "{oops").approval_required
    assert not _policy(source, "ledger_send_receipt", {}, policies=policies).approval_required


def test_a_session_policy_changes_only_the_approval(provider: Provider) -> None:
    source = _source(provider, "create_refund", "send_receipt", "get_balance")
    policies = {
        "ledger_create_refund": ToolPolicy(ToolEffect.READ, requires_approval=True),
        "ledger_send_receipt": ToolPolicy(ToolEffect.READ, requires_approval=False),
        "ledger_get_balance": ToolPolicy(ToolEffect.UNCLASSIFIED),
    }

    refund = _policy(source, "ledger_create_refund", REFUND, policies=policies)
    receipt = _policy(source, "ledger_send_receipt", {"email": "a@b"}, policies=policies)
    balance = _policy(source, "ledger_get_balance", {"account": "A"}, policies=policies)

    assert (refund.effect, refund.requires_approval) == (ToolEffect.NON_IDEMPOTENT_WRITE, True)
    assert (receipt.effect, receipt.requires_approval) == (ToolEffect.NON_IDEMPOTENT_WRITE, False)
    assert (balance.effect, balance.requires_approval) == (ToolEffect.READ, False)


def test_every_write_is_ordered_and_names_its_tool(provider: Provider) -> None:
    source = _source(provider, "get_balance", "post_entry", "create_refund")
    calls = {
        name: source.deferred_tool_call(turn(), tool_call_id="c1", tool_name=name, arguments="{}")
        for name in ("ledger_get_balance", "ledger_post_entry", "ledger_create_refund", "other")
    }

    assert {name: call.ordered for name, call in calls.items()} == {
        "ledger_get_balance": False,
        "ledger_post_entry": True,
        "ledger_create_refund": True,
        "other": False,
    }
    assert calls["ledger_post_entry"].tool_source_reference == '{"tool":"ledger_post_entry"}'
    assert calls["other"].tool_source_reference is None


async def test_an_unknown_tool_fails_without_running(provider: Provider) -> None:
    source = _source(provider, "get_balance")
    status, text = await outcome(source, execution(source, "ledger_gone", {}))

    assert (status, text) == ("failed", "unknown tool ledger_gone")
    with pytest.raises(LookupError, match="no connector task"):
        from tests.mcp.support import poll_of

        await source.poll_tool_task(poll_of(execution(source, "x", {}), "t", recorded=Recorded()))


def test_the_tool_step_gets_the_operations_options(provider: Provider) -> None:
    source = _source(provider, "get_balance")
    record = execution(source, "ledger_get_balance", {"account": "A"}).tool_call
    options = source.tool_call_step_options(record)

    assert options is not None and options.timeout == timedelta(seconds=45)
    assert options.retry_policy is not None and options.retry_policy.maximum_attempts == 3


# -- the Call, the context, retries ------------------------------------------------------


async def test_a_query_result_is_compact_sorted_json(provider: Provider) -> None:
    source = _source(provider, "get_balance")
    result = await source.execute_deferred_tool_call(
        execution(source, "ledger_get_balance", {"account": "A1"})
    )

    assert result.output == '{"account":"A1","balance":120}'
    assert result.truncated_output_bytes is None


async def test_a_retry_keeps_the_call_id_and_the_idempotency_key(provider: Provider) -> None:
    source = _source(provider, "post_entry")
    provider.script("/entries", Answer(503, {"message": "busy"}))
    arguments = {"account": "A1", "amount": 5}

    with pytest.raises(RetryAfterError) as raised:
        await source.execute_deferred_tool_call(
            execution(source, "ledger_post_entry", arguments, attempt=1)
        )
    result = await source.execute_deferred_tool_call(
        execution(source, "ledger_post_entry", arguments, attempt=2)
    )

    assert raised.value.after_seconds == 1 and is_retry_error(raised.value.cause)
    assert json.loads(result.output)["entryId"] == "en_1"
    first, second = provider.to("/entries")
    expected = derive_call_id("flow-1", STEP_EXECUTION_ID, source.tools[0].operation)
    assert first.call_id == second.call_id == expected
    assert first.idempotency_key == second.idempotency_key == f"ledger:{expected}"
    assert [r.headers["x-attempt"] for r in (first, second)] == ["1", "2"]


def test_derive_call_id() -> None:
    operation = dexconn_lab.mutation("pickWrite")
    one = derive_call_id("flow-1", "CallTool-1", operation)

    assert one == derive_call_id("flow-1", "CallTool-1", dexconn_lab.mutation("pickWrite"))
    assert one.startswith("call_") and len(one) == 37
    assert (
        len(
            {
                one,
                derive_call_id("flow-2", "CallTool-1", operation),
                derive_call_id("flow-1", "CallTool-2", operation),
                derive_call_id("flow-1", "CallTool-1", dexconn_lab.mutation("replayFence")),
            }
        )
        == 4
    )
    with pytest.raises(ValueError):
        derive_call_id("flow-1", "", operation)


async def test_heartbeat_values_become_the_steps_checkpoint(provider: Provider) -> None:
    source = _source(provider, "create_refund")
    recorded = Recorded()
    result = await source.execute_deferred_tool_call(
        execution(source, "ledger_create_refund", REFUND, recorded=recorded)
    )
    call_id = provider.to("/refunds")[0].call_id

    assert json.loads(result.output) == {"refundId": "re_1", **REFUND}
    states = [json.loads(text)["state"] for text in recorded.checkpoints]
    assert states == ["notSent", "claimed", "providerId"]
    assert recorded.checkpoints[-1] == json.dumps(
        {
            "attempt": 1,
            "callId": call_id,
            "dexConnectorFence": 1,
            "providerId": "re_1",
            "state": "providerId",
        },
        separators=(",", ":"),
    )

    # A later attempt reads it back; its fence refuses to send again.
    again = execution(
        source, "ledger_create_refund", REFUND, attempt=2, checkpoint=recorded.checkpoints[-1]
    )
    status, text = await outcome(source, again)
    assert status == "outcome_unknown" and "returned uncertain" in text
    assert len(provider.to("/refunds")) == 1


async def test_the_context_decodes_the_last_value_with_the_dex_codec() -> None:
    from dex_agents_ray.connectors._context import ConnectorStepContext, FenceObservation

    async def nothing(*_: object) -> None:
        return None

    def context(previous: str | None) -> ConnectorStepContext:
        observation = FenceObservation(call_id="c", attempt=2, previous=previous)
        return ConnectorStepContext(
            attempt=2,
            previous_checkpoint=previous,
            save_checkpoint=nothing,
            beat=nothing,
            observation=observation,
        )

    assert context('{"branch":"ok","retry":false}').get_last_heartbeat_value(
        dexconn_lab.PickInput
    ) == dexconn_lab.PickInput(branch="ok", retry=False)
    assert context('"job-1"').get_last_heartbeat_value(str) == "job-1"
    assert context("raw text").get_last_heartbeat_value() == "raw text"
    assert context(None).get_last_heartbeat_value() is None
    assert not context(None).has_last_heartbeat_value()


def test_raise_dex_retry() -> None:
    later = RetryError("busy", retry_after=timedelta(milliseconds=1500))
    with pytest.raises(RetryAfterError) as raised:
        raise_dex_retry(later)
    assert raised.value.after_seconds == 2 and raised.value.cause is later

    plain = dexconn_lab.RetryError("no delay")  # the package's own class, by its name
    assert is_retry_error(plain) and not is_retry_error(ValueError("x"))
    with pytest.raises(dexconn_lab.RetryError):
        raise_dex_retry(plain)


async def test_a_query_asking_to_retry_is_a_step_failure(provider: Provider) -> None:
    source = _source(provider, "get_balance")
    provider.script("/balance", Answer(503, {"message": "busy"}))

    with pytest.raises(RetryAfterError):
        await source.execute_deferred_tool_call(
            execution(source, "ledger_get_balance", {"account": "A"})
        )


async def test_a_single_attempt_write_proven_not_sent_fails_retry_later(
    provider: Provider,
) -> None:
    source = _source(provider, "create_refund")
    provider.script(
        "/refunds",
        Answer(503, {"message": "busy"}, NOT_PROCESSED),
        Answer(503, {"message": "busy"}),
    )

    status, text = await outcome(source, execution(source, "ledger_create_refund", REFUND))
    assert (status, text) == ("failed", CONNECTOR_NOT_SENT_RETRY_LATER)
    # Without the provider's word, a retry is no proof: a Step failure (outcome unknown).
    with pytest.raises(RetryAfterError):
        await source.execute_deferred_tool_call(execution(source, "ledger_create_refund", REFUND))


async def test_a_safe_write_asking_to_retry_always_retries(provider: Provider) -> None:
    source = ConnectorToolSource([lab_tool("replayFenceSafe", mutation=True)])
    arguments = {"actions": [{"save": _marker("notSent")}], "branch": "done", "retry": True}

    with pytest.raises(dexconn_lab.RetryError):
        await source.execute_deferred_tool_call(
            execution(source, "lab_replay_fence_safe", arguments)
        )


# -- the branch table --------------------------------------------------------------------


def _marker(state: str, **fields: Any) -> dict[str, Any]:
    marker = {
        "dexConnectorFence": 1,
        "callId": "$callId",
        "attempt": "$attempt",
        "state": state,
        "providerId": None,
    }
    return {**marker, **fields}


@pytest.mark.parametrize(
    "case",
    CONFORMANCE["branchTable"],
    ids=lambda c: f"{c['kind']}-{c['branch']}-{'sent' if c['mayHaveSent'] else 'unsent'}",
)
async def test_the_branch_table(case: dict[str, Any]) -> None:
    mutation = case["kind"] == "mutation"
    if mutation and case["mayHaveSent"]:
        tool = lab_tool("replayFence", mutation=True)
        branch = "done" if case["branch"] == "ok" else case["branch"]
        arguments = {"actions": [{"save": _marker("claimed")}], "branch": branch, "retry": False}
    else:
        tool = lab_tool("pickWrite" if mutation else "pickBranch", mutation=mutation)
        arguments = {"branch": case["branch"], "retry": False}
    source = ConnectorToolSource([tool])
    status, text = await outcome(source, execution(source, tool.name, arguments))

    assert status == case["record"], case["row"]
    if status == "failed":
        assert text == f"lab {tool.entry.operation_name} returned {case['branch']}: scripted: " + (
            f"picked {case['branch']}"
        )


def test_the_first_matching_row_wins() -> None:
    entry = ConnectorOperationEntry(
        connector_id="x",
        operation_name="op",
        kind=OperationKind.MUTATION,
        description="",
        input_type="In",
        input_schema={"type": "object"},
        required_branches=frozenset({"ok", "defect"}),
        optional_branches=frozenset({"uncertain", "refused"}),
        listed_branches={"uncertain": ListedBranch.REJECTED, "refused": ListedBranch.REJECTED},
    )
    query = ConnectorOperationEntry(**{**entry.__dict__, "kind": OperationKind.QUERY})

    assert classify_connector_branch(entry, "uncertain") is AgentToolCallStatus.OUTCOME_UNKNOWN
    assert classify_connector_branch(query, "uncertain") is AgentToolCallStatus.OUTCOME_UNKNOWN
    assert classify_connector_branch(entry, "defect") is AgentToolCallStatus.OUTCOME_UNKNOWN
    assert classify_connector_branch(query, "defect") is AgentToolCallStatus.FAILED
    assert (
        classify_connector_branch(entry, "ok", may_have_sent=True) is AgentToolCallStatus.SUCCEEDED
    )
    assert (
        classify_connector_branch(entry, "refused", may_have_sent=True)
        is AgentToolCallStatus.OUTCOME_UNKNOWN
    )
    assert classify_connector_branch(entry, "refused") is AgentToolCallStatus.FAILED
    assert (
        classify_connector_branch(query, "refused", may_have_sent=True)
        is AgentToolCallStatus.FAILED
    )


# -- the fence observation cases ---------------------------------------------------------


def _previous(value: Any, call_id: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    filled = {key: call_id if item == "$callId" else item for key, item in value.items()}
    return json.dumps(filled, separators=(",", ":"), sort_keys=True)


@pytest.mark.parametrize(
    "case", CONFORMANCE["fenceObservationCases"], ids=lambda case: case["name"]
)
async def test_the_fence_observation_cases(case: dict[str, Any]) -> None:
    tool = lab_tool("replayFence", mutation=True)
    source = ConnectorToolSource([tool])
    call_id = derive_call_id("flow-1", STEP_EXECUTION_ID, tool.operation)
    previous = _previous(case["previous"], call_id)

    def run(**arguments: Any) -> Any:
        call = execution(
            source,
            tool.name,
            {"actions": case["actions"], **arguments},
            attempt=case["attempt"],
            checkpoint=previous,
        )
        return outcome(source, call)

    # A listed rejected branch: failed unless the request may have been sent.
    status, _ = await run(branch="refused", retry=False)
    assert status == ("outcome_unknown" if case["mayHaveSent"] else "failed")
    # A retry: only a proof that nothing was sent makes it failed, not a Step failure.
    if case["provesNotSent"]:
        assert await run(branch="refused", retry=True) == (
            "failed",
            CONNECTOR_NOT_SENT_RETRY_LATER,
        )
    else:
        with pytest.raises(dexconn_lab.RetryError):
            await run(branch="refused", retry=True)


# -- result limits -----------------------------------------------------------------------


async def test_a_result_over_the_limit_is_cut(provider: Provider) -> None:
    source = _source(provider, "list_story_ids")
    result = await source.execute_deferred_tool_call(
        execution(source, "ledger_list_story_ids", {"count": 8000})
    )
    full = json.dumps({"ids": [f"story-{n:05d}" for n in range(8000)]}, separators=(",", ":"))

    assert result.truncated_output_bytes == len(full) > DEFAULT_CONNECTOR_RESULT_MAX_BYTES
    assert result.output == full[:DEFAULT_CONNECTOR_RESULT_MAX_BYTES] + (
        CONNECTOR_RESULT_TRUNCATED_NOTE
    )


async def test_the_limit_is_set_per_source_or_per_tool(provider: Provider) -> None:
    source = ConnectorToolSource(
        [
            ledger_tool(provider, "list_story_ids"),
            ledger_tool(provider, "list_story_ids", name="few_stories", max_result_bytes=20),
        ],
        max_result_bytes=30,
    )
    by_source = await source.execute_deferred_tool_call(
        execution(source, "ledger_list_story_ids", {"count": 3})
    )
    by_tool = await source.execute_deferred_tool_call(
        execution(source, "few_stories", {"count": 3})
    )
    small = await source.execute_deferred_tool_call(
        execution(source, "ledger_list_story_ids", {"count": 1})
    )

    full = '{"ids":["story-00000","story-00001","story-00002"]}'
    assert by_source.output == full[:30] + CONNECTOR_RESULT_TRUNCATED_NOTE
    assert by_tool.output == full[:20] + CONNECTOR_RESULT_TRUNCATED_NOTE
    assert by_source.truncated_output_bytes == by_tool.truncated_output_bytes == len(full)
    assert (small.output, small.truncated_output_bytes) == ('{"ids":["story-00000"]}', None)


def test_a_cut_never_splits_a_character() -> None:
    assert truncate_result("ééé", 3) == ("é" + CONNECTOR_RESULT_TRUNCATED_NOTE, 6)
    assert truncate_result("ééé", 6) == ("ééé", None)
