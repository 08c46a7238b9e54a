"""The manifest's format: ``dex-connector.json`` as the JSON form of the
``connectors.dex.dev/v1alpha1`` Connector manifest.

Two manifests in the structure of the public connector library's
(``manifests/payments.json``, ``manifests/chat.json``: auth, configuration,
triggers and studio sections the source leaves unread, plus the spec's
``agent`` and ``inputSchema``) are shipped by packages made per test; every
operation field the source reads is checked, and bad manifests are refused
with the field and the operation named, changing nothing."""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from dex import RetryPolicy

from dex_agents_ray import AgentToolCallStatus, ToolEffect
from dex_agents_ray.connectors import (
    OUTCOME_UNKNOWN_TOOL_RESULT,
    ConnectorManifestError,
    ConnectorToolSource,
    ListedBranch,
    classify_connector_branch,
    connector_tool,
)
from dex_agents_ray.connectors._durations import parse_go_duration
from dex_agents_ray.connectors._manifest import load_manifest, operation_entry
from dex_agents_ray.session import ToolOutcomeUnknownError
from tests.connectors.support import execution, outcome

MANIFESTS = Path(__file__).parent / "manifests"


def _manifest(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((MANIFESTS / f"{name}.json").read_text("utf-8"))
    return data


def _ship(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, manifest: object) -> str:
    """A package, new to this process, that ships ``manifest``; its name."""
    package = f"dexconn_format_{uuid.uuid4().hex[:12]}"
    directory = tmp_path / package
    directory.mkdir()
    (directory / "__init__.py").write_text("")
    (directory / "dex-connector.json").write_text(json.dumps(manifest))
    monkeypatch.syspath_prepend(str(tmp_path))
    return package


@dataclass(frozen=True)
class Selected:
    branch: str
    value: Any = None
    kind: str | None = None
    message: str | None = None


@dataclass(frozen=True)
class OpenPaymentPageInput:
    order: str
    cents: int


@dataclass(frozen=True)
class GetPaymentPageInput:
    page: str


@dataclass(frozen=True)
class ListThreadRepliesInput:
    thread: str
    limit: int = 50


@dataclass(frozen=True)
class PostThreadMessageInput:
    thread: str
    text: str


@dataclass(frozen=True)
class ArchiveThreadInput:
    thread: str


INPUTS: dict[str, type] = {
    "openPaymentPage": OpenPaymentPageInput,
    "getPaymentPage": GetPaymentPageInput,
    "listThreadReplies": ListThreadRepliesInput,
    "postThreadMessage": PostThreadMessageInput,
    "archiveThread": ArchiveThreadInput,
}


class Operation:
    """An operation with both methods, so only the manifest's ``kind`` decides
    which runs; each selects ``branch`` and says which method ran."""

    def __init__(self, package: str, connector_id: str, name: str, branch: str = "") -> None:
        self.input_type = INPUTS[name]
        self.connector_package = package
        self.connector_id = connector_id
        self.operation_name = name
        self.branch = branch

    def __repr__(self) -> str:
        return f"{self.connector_id}.{self.operation_name}()"

    def idempotency_key(self, call: Any) -> str:
        return f"key:{call.call_id}"

    async def run_query(self, call: Any, context: Any) -> Selected:
        return Selected(self.branch, {"ran": "query"}, "scripted", "from run_query")

    async def run_mutation(self, call: Any, context: Any) -> Selected:
        return Selected(self.branch, {"ran": "mutation"}, "scripted", "from run_mutation")


class QueryOnly:
    def __init__(self, package: str, connector_id: str, name: str) -> None:
        self.input_type = INPUTS[name]
        self.connector_package = package
        self.connector_id = connector_id
        self.operation_name = name

    async def run_query(self, call: Any, context: Any) -> Selected:
        return Selected("found")


# -- two manifests in the library's structure ----------------------------------------------


def test_a_payments_manifest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = _ship(tmp_path, monkeypatch, _manifest("payments"))
    opened = connector_tool(Operation(package, "payments", "openPaymentPage"), None)
    lookup = connector_tool(Operation(package, "payments", "getPaymentPage"), None)
    page, found = opened.entry, lookup.entry

    assert (opened.name, lookup.name) == ("payments_open_payment_page", "payments_get_payment_page")
    assert opened.description == "Open one hosted payment page for an order."
    assert opened.input_schema["required"] == ["order", "cents"]
    assert (opened.effect, lookup.effect) == (ToolEffect.NON_IDEMPOTENT_WRITE, ToolEffect.READ)
    assert (page.idempotency_required, found.idempotency_required) == (True, False)
    assert opened.approval_required('{"order": "o1", "cents": 100}')
    assert not lookup.approval_required('{"page": "p1"}')
    assert page.required_branches == page.success_branches == {"opened"}
    assert page.optional_branches == {"refused", "uncertain", "badResponse", "defect"}
    assert page.listed_branches == {
        "refused": ListedBranch.REJECTED,
        "badResponse": ListedBranch.UNKNOWN,
    }
    assert found.listed_branches == {
        "missing": ListedBranch.REJECTED,
        "defect": ListedBranch.REJECTED,
    }
    declared = RetryPolicy(
        initial_interval=timedelta(seconds=2),
        backoff_coefficient=1.5,
        maximum_interval=timedelta(minutes=1),
        maximum_attempts=7,
        total_duration=timedelta(minutes=10),
    )
    assert page.retry_policy == found.retry_policy == declared
    assert page.execute_method_timeout == timedelta(seconds=20) and page.heartbeat_timeout is None
    # The single-attempt write keeps the timeout, never a retry policy; the query's
    # policy is the manifest's with at most three attempts.
    assert opened.step_options is not None and opened.step_options.retry_policy is None
    assert opened.step_options.timeout == timedelta(seconds=20)
    assert lookup.step_options is not None and lookup.step_options.retry_policy == RetryPolicy(
        initial_interval=timedelta(seconds=2),
        backoff_coefficient=1.5,
        maximum_interval=timedelta(minutes=1),
        maximum_attempts=3,
        total_duration=timedelta(minutes=10),
    )

    outcomes = {
        (entry.operation_name, branch): classify_connector_branch(entry, branch)
        for entry, branch in [
            (page, "opened"),
            (page, "refused"),
            (page, "badResponse"),
            (page, "defect"),
            (found, "found"),
            (found, "defect"),
            (found, "refused"),
        ]
    }
    assert outcomes == {
        ("openPaymentPage", "opened"): AgentToolCallStatus.SUCCEEDED,
        ("openPaymentPage", "refused"): AgentToolCallStatus.FAILED,
        ("openPaymentPage", "badResponse"): AgentToolCallStatus.OUTCOME_UNKNOWN,
        ("openPaymentPage", "defect"): AgentToolCallStatus.OUTCOME_UNKNOWN,
        ("getPaymentPage", "found"): AgentToolCallStatus.SUCCEEDED,
        ("getPaymentPage", "defect"): AgentToolCallStatus.FAILED,  # a Query's follows its listing
        ("getPaymentPage", "refused"): AgentToolCallStatus.FAILED,  # a Query branch not listed
    }


def test_a_chat_manifest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = _ship(tmp_path, monkeypatch, _manifest("chat"))
    replies = connector_tool(Operation(package, "team-chat", "listThreadReplies"), None)
    post = connector_tool(Operation(package, "team-chat", "postThreadMessage"), None)

    assert replies.name == "team-chat_list_thread_replies"
    assert (replies.effect, post.effect) == (ToolEffect.READ, ToolEffect.IDEMPOTENT_WRITE)
    assert replies.step_options is not None and post.step_options is not None
    assert replies.step_options.timeout == timedelta(seconds=15)
    assert replies.step_options.heartbeat_timeout == timedelta(seconds=5)
    assert replies.step_options.retry_policy == RetryPolicy(
        initial_interval=timedelta(milliseconds=500),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=8),
        maximum_attempts=3,  # the manifest says 4
        total_duration=timedelta(minutes=1, seconds=30),
    )
    assert post.step_options.retry_policy is not None
    assert post.step_options.retry_policy.maximum_attempts == 2  # under the cap: kept
    assert post.entry.success_branches == {"posted"}
    with pytest.raises(ConnectorManifestError, match="team-chat archiveThread: not exposed"):
        connector_tool(Operation(package, "team-chat", "archiveThread"), None)


async def test_the_manifests_kind_decides_which_method_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = _ship(tmp_path, monkeypatch, _manifest("payments"))
    source = ConnectorToolSource(
        [
            connector_tool(Operation(package, "payments", "getPaymentPage", "found"), None),
            connector_tool(Operation(package, "payments", "openPaymentPage", "opened"), None),
        ]
    )
    read = await outcome(source, execution(source, "payments_get_payment_page", {"page": "p"}))
    write = await outcome(
        source, execution(source, "payments_open_payment_page", {"order": "o", "cents": 60})
    )

    assert read == ("succeeded", '{"ran":"query"}')
    assert write == ("succeeded", '{"ran":"mutation"}')
    with pytest.raises(
        ConnectorManifestError, match="kind is mutation, but .* has no run_mutation"
    ):
        connector_tool(QueryOnly(package, "payments", "openPaymentPage"), None)


async def test_an_unknown_branch_leaves_the_model_the_constant_and_the_detail_in_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = _ship(tmp_path, monkeypatch, _manifest("payments"))
    tool = connector_tool(Operation(package, "payments", "openPaymentPage", "badResponse"), None)
    source = ConnectorToolSource([tool])
    call = execution(source, tool.name, {"order": "o", "cents": 60})

    with pytest.raises(ToolOutcomeUnknownError) as raised:
        await source.execute_deferred_tool_call(call)
    assert raised.value.show_detail is False
    assert raised.value.message == (
        "payments openPaymentPage returned badResponse: scripted: from run_mutation"
    )
    assert OUTCOME_UNKNOWN_TOOL_RESULT not in raised.value.message


# -- Go durations ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30s", timedelta(seconds=30)),
        ("2m", timedelta(minutes=2)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("500ms", timedelta(milliseconds=500)),
        ("1.5h", timedelta(minutes=90)),
        (".5s", timedelta(milliseconds=500)),
        ("1m0.25s", timedelta(minutes=1, milliseconds=250)),
        ("250us", timedelta(microseconds=250)),
        ("3\u00b5s", timedelta(microseconds=3)),
        ("3\u03bcs", timedelta(microseconds=3)),
        ("1500ns", timedelta(microseconds=1)),
        ("0", timedelta(0)),
        ("+5s", timedelta(seconds=5)),
        ("-5s", timedelta(seconds=-5)),
    ],
)
def test_go_durations(text: str, expected: timedelta) -> None:
    assert parse_go_duration(text) == expected


@pytest.mark.parametrize("text", ["", "30", "1d", "s", "1h 30m", "-", "1e3s", "5 s", "1.2.3s"])
def test_not_go_durations(text: str) -> None:
    with pytest.raises(ValueError, match="not a Go duration"):
        parse_go_duration(text)


def test_a_duration_longer_than_go_allows() -> None:
    with pytest.raises(ValueError, match="longer than Go allows"):
        parse_go_duration("2562048h")  # Go's int64 nanoseconds end before 2562048h


# -- bad entries -------------------------------------------------------------------------

Change = Callable[[dict[str, Any]], object]
_DROP = object()


def _set(path: str, value: object = _DROP) -> Change:
    """A change that sets (or, with no value, drops) the field at dotted ``path``;
    a number steps into a list."""

    def change(document: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = document
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        key: Any = int(last) if isinstance(node, list) else last
        if value is _DROP:
            del node[key]
        else:
            node[key] = value

    return change


def _drop(path: str) -> Change:
    return _set(path)


def _branches(*branches: object) -> Change:
    return _set("branches", list(branches))


_OK = {"id": "opened"}
_DEFECT = {"id": "defect", "optional": True}


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (_set("kind", "action"), "kind must be query or mutation, got 'action'"),
        (_drop("kind"), "kind must be query or mutation, got None"),
        (_set("idempotency", "none"), "idempotency must be required for a mutation"),
        (_set("idempotency", "maybe"), "idempotency must be none or required, got 'maybe'"),
        (_set("description", ""), "description must be a non-empty string"),
        (_drop("inputType"), "inputType must be a non-empty string"),
        (_set("colour", "blue"), r"unknown operation fields \['colour'\]"),
        (_set("branches", {"required": ["opened"]}), "branches must be a non-empty list"),
        (_branches(), "branches must be a non-empty list"),
        (_branches(_OK, "defect"), r"branches\[1\] must be an object"),
        (_branches(_OK, {"id": "Bad", "optional": True}, _DEFECT), r"branches\[1\].id must be"),
        (_branches(_OK, {"name": "defect"}), r"branches\[1\]: unknown branch fields \['name'\]"),
        (_branches(_OK, {"id": "defect", "optional": "yes"}), r"branches\[1\].optional must be"),
        (_branches(_OK, _DEFECT, _DEFECT), "branch defect is declared twice"),
        (_branches(_OK), "branches must declare defect"),
        (_branches({"id": "opened", "optional": True}, _DEFECT), "need a success branch"),
        (_branches({"id": "uncertain"}, _DEFECT), "need a success branch"),
        (_set("agent.branches", {"opened": "rejected"}), "lists 'opened', which is not a declared"),
        (
            _set("agent.branches", {"nowhere": "unknown"}),
            "lists 'nowhere', which is not a declared",
        ),
        (_set("agent.branches", {"defect": "rejected"}), "always records outcome_unknown"),
        (_set("agent.branches", {"uncertain": "rejected"}), "always records outcome_unknown"),
        (_set("agent.branches", []), "agent.branches must be an object"),
        (_drop("execution"), "execution must be an object"),
        (_set("execution.timeout", "5s"), r"unknown execution fields \['timeout'\]"),
        (_set("execution.durability", "eventual"), "execution.durability must be sync or async"),
        (_drop("execution.executeMethodTimeout"), "execution.executeMethodTimeout must be a Go"),
        (_set("execution.executeMethodTimeout", 30), "executeMethodTimeout must be a Go duration"),
        (_set("execution.executeMethodTimeout", "30"), "executeMethodTimeout: '30' is not a Go"),
        (_set("execution.executeMethodTimeout", "0s"), "executeMethodTimeout must be positive"),
        (_set("execution.heartbeatTimeout", "-1s"), "heartbeatTimeout must be positive"),
        (_set("execution.heartbeatTimeout", "1 week"), "heartbeatTimeout: '1 week' is not a Go"),
        (_set("execution.retry", "default"), "execution.retry must be an object"),
        (_drop("execution.retry.totalDuration"), r"missing fields \['totalDuration'\]"),
        (_set("execution.retry.jitter", 0.1), r"unknown fields \['jitter'\]"),
        (_set("execution.retry.maximumAttempts", 0), "maximumAttempts must be an integer of at"),
        (_set("execution.retry.maximumAttempts", 2.5), "maximumAttempts must be an integer of at"),
        (_set("execution.retry.maximumAttempts", True), "maximumAttempts must be an integer of at"),
        (_set("execution.retry.backoffCoefficient", 0.5), "backoffCoefficient must be a number"),
        (_set("execution.retry.backoffCoefficient", "2"), "backoffCoefficient must be a number"),
        (_set("execution.retry.initialInterval", "1d"), "initialInterval: '1d' is not a Go"),
        (_set("execution.retry.maximumInterval", "1s"), "maximumInterval .1s. is shorter than"),
        (_set("execution.retry.totalDuration", "0"), "totalDuration must be positive"),
        (_drop("inputSchema"), "inputSchema must be an object schema"),
        (_set("inputSchema.not", {}), r"unsupported keywords \['not'\]"),
    ],
)
def test_a_bad_entry_is_refused_naming_the_field_and_the_operation(
    change: Change, error: str
) -> None:
    manifest = _manifest("payments")
    change(manifest["spec"]["operations"][0])
    before = copy.deepcopy(manifest)

    with pytest.raises(ConnectorManifestError, match=error) as raised:
        operation_entry(manifest, "openPaymentPage")
    assert str(raised.value).startswith("payments openPaymentPage: ")
    assert manifest == before  # reading changed nothing


def test_a_query_cannot_declare_uncertain_nor_list_unknown() -> None:
    manifest = _manifest("payments")
    lookup = manifest["spec"]["operations"][1]
    lookup["branches"].append({"id": "uncertain", "optional": True})
    with pytest.raises(ConnectorManifestError, match="getPaymentPage: a query cannot declare"):
        operation_entry(manifest, "getPaymentPage")
    lookup["branches"].pop()
    lookup["agent"]["branches"] = {"missing": "unknown"}
    with pytest.raises(ConnectorManifestError, match="but a Query changes nothing"):
        operation_entry(manifest, "getPaymentPage")
    lookup["idempotency"] = "required"
    with pytest.raises(ConnectorManifestError, match="idempotency must be none for a query"):
        operation_entry(manifest, "getPaymentPage")


# -- bad manifests -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (_set("apiVersion", "connectors.dex.dev/v1beta1"), "v1beta1 is not one this source reads"),
        (_set("apiVersion", "v1"), "apiVersion must be connectors.dex.dev/v1alpha1, got 'v1'"),
        (_set("apiVersion"), "apiVersion must be connectors.dex.dev/v1alpha1, got None"),
        (_set("kind", "Trigger"), "kind must be Connector, got 'Trigger'"),
        (_set("metadata.name", "Payments"), "metadata.name must be the connector ID"),
        (_set("metadata"), "metadata.name must be the connector ID"),
        (_set("spec.operations", {}), "spec.operations must be a non-empty list"),
        (_set("spec.operations", []), "spec.operations must be a non-empty list"),
        (_set("spec"), "spec.operations must be a non-empty list"),
        (_set("spec.operations.0", "openPaymentPage"), r"spec.operations\[0\].name must be"),
        (_set("spec.operations.1.name", "openPaymentPage"), "two operations are named"),
        (_set("spec.operations.1.name", "get-page"), r"spec.operations\[1\].name must be"),
    ],
)
def test_a_bad_manifest_is_refused_and_nothing_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: Change, error: str
) -> None:
    manifest = _manifest("payments")
    change(manifest)
    package = _ship(tmp_path, monkeypatch, manifest)

    with pytest.raises(ConnectorManifestError, match=error) as raised:
        load_manifest(package)
    assert f"{package}'s dex-connector.json" in str(raised.value)
    # The refusal was not cached: the package's fixed manifest loads.
    (tmp_path / package / "dex-connector.json").write_text(json.dumps(_manifest("payments")))
    assert load_manifest(package)["metadata"]["name"] == "payments"


def test_a_manifest_that_is_not_json_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = _ship(tmp_path, monkeypatch, {})
    (tmp_path / package / "dex-connector.json").write_text("apiVersion: connectors.dex.dev")
    with pytest.raises(
        ConnectorManifestError, match=f"cannot read dex-connector.json of {package}"
    ):
        load_manifest(package)
    (tmp_path / package / "dex-connector.json").write_text("[]")
    with pytest.raises(ConnectorManifestError, match="is not a JSON object"):
        load_manifest(package)
