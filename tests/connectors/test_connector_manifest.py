"""The package's names, and what connector_tool reads from a manifest: the rules,
the default names, the effect table, the Step options."""

from __future__ import annotations

import pickle
from datetime import timedelta
from pathlib import Path

import dexconn_lab
import dexconn_ledger
import pytest
from dex import RetryPolicy

import dex_agents_ray.connectors as package
import dex_agents_ray.session as session
from dex_agents_ray import ToolEffect
from dex_agents_ray.builtin_loop import AgentDefinition, ScriptedModelClient
from dex_agents_ray.connectors import (
    ConnectorManifestError,
    ConnectorStepContext,
    ConnectorToolSource,
    connector_snake_case,
    connector_tool,
)
from dex_agents_ray.connectors._manifest import check_input_schema
from tests.connectors.provider import Provider
from tests.connectors.support import CONFORMANCE, lab_tool, ledger, ledger_tool

EXPORTS = [
    "CONNECTOR_NOT_SENT_RETRY_LATER",
    "CONNECTOR_RESULT_TRUNCATED_NOTE",
    "DEFAULT_CONNECTOR_RESULT_MAX_BYTES",
    "DEFECT_BRANCH",
    "FENCE_MARKER_KEY",
    "FENCE_MARKER_VERSION",
    "MANIFEST_FILE_NAME",
    "MAX_CONNECTOR_ATTEMPTS",
    "OUTCOME_UNKNOWN_TOOL_RESULT",
    "UNCERTAIN_BRANCH",
    "ApprovalPredicate",
    "Call",
    "ConnectorBranch",
    "ConnectorManifestError",
    "ConnectorMutation",
    "ConnectorOperation",
    "ConnectorOperationEntry",
    "ConnectorQuery",
    "ConnectorStepContext",
    "ConnectorTool",
    "ConnectorToolSource",
    "FenceMarker",
    "FenceState",
    "ListedBranch",
    "MalformedFenceMarkerError",
    "OperationKind",
    "RetryError",
    "SelectedBranch",
    "classify_connector_branch",
    "connector_snake_case",
    "connector_tool",
    "derive_call_id",
    "is_retry_error",
    "raise_dex_retry",
    "read_fence_marker",
]


def test_exports() -> None:
    assert package.__all__ == EXPORTS
    assert all(getattr(package, name) is not None for name in EXPORTS)
    assert package.DEFAULT_CONNECTOR_RESULT_MAX_BYTES == 64 * 1024
    assert package.OUTCOME_UNKNOWN_TOOL_RESULT is session.OUTCOME_UNKNOWN_TOOL_RESULT


def test_the_step_context_exposes_only_what_the_fence_uses() -> None:
    public = {name for name in dir(ConnectorStepContext) if not name.startswith("_")}
    assert public == {
        "attempt",
        "heartbeat",
        "has_last_heartbeat_value",
        "get_last_heartbeat_value",
    }


def test_the_test_packages_are_installed_with_their_manifests() -> None:
    for module in (dexconn_ledger, dexconn_lab):
        assert "site-packages" not in module.__file__
        assert (Path(module.__file__).parent / "dex-connector.json").is_file()
        assert Path(module.__file__).parent.parent.name.startswith("dex-connector-packages-")


@pytest.mark.parametrize("case", CONFORMANCE["snakeCase"], ids=lambda case: f"{case['operation']}")
def test_default_tool_names_use_connectorctls_snake_case(case: dict[str, str]) -> None:
    assert f"{case['connectorId']}_{connector_snake_case(case['operation'])}" == case["toolName"]


def test_tools_take_their_name_description_and_schema_from_the_manifest(
    provider: Provider,
) -> None:
    refund = ledger_tool(provider, "create_refund")
    stories = ledger_tool(provider, "list_story_ids")
    renamed = ledger_tool(provider, "get_balance", name="balance")

    assert (refund.name, stories.name, renamed.name) == (
        "ledger_create_refund",
        "ledger_list_story_ids",
        "balance",
    )
    assert refund.description == "Refund part of a charge. Runs once."
    assert refund.input_schema["required"] == ["charge", "amount", "reason"]
    assert refund.input_type is dexconn_ledger.CreateRefundInput
    with pytest.raises(ValueError, match="1 to 64 letters"):
        ledger_tool(provider, "get_balance", name="has spaces")


def test_the_effect_comes_from_the_manifest(provider: Provider) -> None:
    effects = {
        factory: ledger_tool(provider, factory).effect
        for factory in ("get_balance", "post_entry", "create_refund", "send_receipt")
    }
    assert effects == {
        "get_balance": ToolEffect.READ,
        "post_entry": ToolEffect.IDEMPOTENT_WRITE,
        "create_refund": ToolEffect.NON_IDEMPOTENT_WRITE,
        "send_receipt": ToolEffect.NON_IDEMPOTENT_WRITE,
    }


def test_step_options_are_the_manifests_execution_with_at_most_three_attempts(
    provider: Provider,
) -> None:
    query = ledger_tool(provider, "get_balance").step_options
    safe = ledger_tool(provider, "post_entry").step_options
    once = ledger_tool(provider, "create_refund").step_options
    lab = ConnectorToolSource([lab_tool("pickBranch", mutation=False)]).tools[0].step_options

    assert query is not None and safe is not None and once is not None and lab is not None
    assert query.timeout == timedelta(seconds=45)
    assert query.heartbeat_timeout == timedelta(minutes=1, seconds=30)
    assert query.retry_policy == RetryPolicy(
        initial_interval=timedelta(seconds=1),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=30),
        maximum_attempts=3,  # the manifest says 5
        total_duration=timedelta(hours=1),
    )
    assert safe.retry_policy == query.retry_policy and safe.heartbeat_timeout is None
    assert once.timeout == timedelta(seconds=45) and once.retry_policy is None
    assert lab.timeout == timedelta(seconds=30) and lab.retry_policy is not None
    assert lab.retry_policy.maximum_interval == timedelta(seconds=10)
    assert lab.retry_policy.maximum_attempts == 3


@pytest.mark.parametrize(
    ("operation", "mutation", "error"),
    [
        ("hidden", False, "not exposed to agents"),
        ("notExposed", False, "not exposed to agents"),
        ("oddAgentKey", False, r"unknown agent keys \['color'\]"),
        ("oddApproval", True, "unknown agent.approval 'required'"),
        ("oddRetry", True, "unknown agent.retry 'always'"),
        ("oddSchema", False, r"properties.branch: unsupported keywords \['pattern'\]"),
        ("oddNestedSchema", False, r"unsupported keywords \['oneOf'\]"),
        ("oddRef", False, r"unsupported keywords \['definitions'\]"),
        ("oddBranchKey", False, "'ok', which is not a declared branch other than a success"),
        ("unknownOnQuery", False, "is unknown, but a Query changes nothing"),
        ("oddBranchValue", True, "must be rejected or unknown"),
        (
            "kindMismatch",
            True,
            "the manifest's kind is query, but lab.kindMismatch.. has no run_query",
        ),
        ("badInputType", False, "has no input type NoSuchInput"),
        ("noSuchOperation", False, "the manifest has no such operation"),
    ],
)
def test_the_manifest_rules_refuse_an_operation(operation: str, mutation: bool, error: str) -> None:
    with pytest.raises(ConnectorManifestError, match=error):
        lab_tool(operation, mutation=mutation)


def test_nothing_is_exposed_by_default(provider: Provider) -> None:
    connection = ledger(provider)
    with pytest.raises(ConnectorManifestError, match="closeAccount: not exposed"):
        connector_tool(connection.operations.close_account(), connection.reference)


def test_only_connector_operations_are_tools() -> None:
    with pytest.raises(TypeError, match="not a Connector operation"):
        connector_tool(object(), None)  # type: ignore[arg-type]

    class WriteWithoutKey:
        connector_id, operation_name = "lab", "pickWrite"
        connector_package = "dexconn_lab"

        async def run_mutation(self, call: object, context: object) -> None:
            return None

    with pytest.raises(TypeError, match="no idempotency_key"):
        connector_tool(WriteWithoutKey(), None)  # type: ignore[arg-type]

    class OtherConnector:
        connector_id, operation_name = "stripe", "pickBranch"
        connector_package = "dexconn_lab"

        async def run_query(self, call: object, context: object) -> None:
            return None

    with pytest.raises(ConnectorManifestError, match="belongs to connector stripe"):
        connector_tool(OtherConnector(), None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("schema", "error"),
    [
        ({"type": "object", "properties": {"a": {"type": "integer", "minimum": 0}}}, None),
        ({"type": "object", "properties": {"a": {"anyOf": [{"type": "string"}, True]}}}, None),
        ({"type": "object", "properties": {"a": {"$ref": "#/$defs/a"}}, "$defs": {"a": {}}}, None),
        ({"type": "object", "title": "T", "examples": [{}], "$comment": "c"}, None),
        ({"type": "object", "properties": {"a": {"$ref": "#/$defs/b"}}, "$defs": {}}, "resolve"),
        ({"type": "object", "properties": {"a": {"$ref": "other.json"}}}, "into #/\\$defs/"),
        ({"type": "object", "properties": {"a": {"minLength": 1}}}, "minLength"),
        ({"type": "object", "properties": {"a": {"type": "date"}}}, "not a JSON type"),
        ({"type": "object", "properties": {"a": {"items": [{}]}}}, "items must be one schema"),
        ({"type": "object", "properties": {"a": {"anyOf": []}}}, "non-empty"),
        ({"type": "object", "properties": {"a": {"maximum": "9"}}}, "maximum must be a number"),
        ({"type": "object", "properties": {"a": {"$defs": {}}}}, "top of inputSchema"),
        ({"type": "object", "allOf": [{}]}, "allOf"),
    ],
)
def test_the_input_schema_subset(schema: dict[str, object], error: str | None) -> None:
    if error is None:
        check_input_schema(schema)
    else:
        with pytest.raises(ConnectorManifestError, match=error):
            check_input_schema(schema)


def test_tool_names_are_unique_and_the_source_declares_them(provider: Provider) -> None:
    balance = ledger_tool(provider, "get_balance")
    with pytest.raises(ValueError, match="two connector tools are named ledger_get_balance"):
        ConnectorToolSource([balance, ledger_tool(provider, "get_balance")])
    source = ConnectorToolSource([balance, lab_tool("pickBranch", mutation=False)])

    assert source.declared_tool_names() == ["ledger_get_balance", "lab_pick_branch"]
    with pytest.raises(ValueError, match="two tool sources list a tool named ledger_get_balance"):
        AgentDefinition(
            name="clash",
            instructions="",
            model=ScriptedModelClient(lambda request: "hi"),
            tool_sources=[source, ConnectorToolSource([balance], source_name="again")],
        )


def test_a_source_pickles_with_its_tools(provider: Provider) -> None:
    source = ConnectorToolSource(
        [ledger_tool(provider, "create_refund", requires_approval=True)], max_result_bytes=10
    )
    copy = pickle.loads(pickle.dumps(source))
    assert copy.tools[0].name == "ledger_create_refund" and copy.tools[0].requires_approval
