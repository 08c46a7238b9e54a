"""A Connector package's ``dex-connector.json``: reading it, and the rules an
operation's entry must meet before it becomes a tool.

The manifest is the JSON form of the ``connectors.dex.dev/v1alpha1`` Connector
manifest that connectorctl generates a package from, shipped as package data
next to the package's ``__init__.py``. The source reads ``metadata.name`` (the
connector ID) and, for each operation in ``spec.operations``, the fields below;
the rest of the manifest (auth, configuration, triggers, codegen) is the
Connector SDK's business and passes unread. The ``agent`` and ``inputSchema``
fields are the ones the spec adds for agents::

    {
      "apiVersion": "connectors.dex.dev/v1alpha1",
      "kind": "Connector",
      "metadata": {"name": "stripe", ...},
      "spec": {
        "operations": [
          {
            "name": "createRefund",
            "kind": "mutation",
            "description": "Refund a charge.",
            "inputType": "CreateRefundInput",
            "idempotency": "required",
            "branches": [
              {"id": "refunded"},
              {"id": "cardDeclined", "optional": true},
              {"id": "uncertain", "optional": true},
              {"id": "defect", "optional": true}
            ],
            "execution": {
              "executeMethodTimeout": "30s",
              "heartbeatTimeout": "10s",
              "retry": {"initialInterval": "1s", "backoffCoefficient": 2,
                        "maximumInterval": "30s", "maximumAttempts": 5,
                        "totalDuration": "2m"}
            },
            "inputSchema": {"type": "object", "properties": {...}},
            "agent": {"exposed": true, "approval": "recommended", "retry": "safe",
                      "branches": {"cardDeclined": "rejected"}}
          }
        ]
      }
    }

A branch without ``optional: true`` is a success branch (the spec's "required
(success) branch"); ``defect`` must be declared and ``uncertain`` may be (a
Mutation's only), and neither is ever a success branch.
"""

from __future__ import annotations

import functools
import importlib
import importlib.resources
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from typing import Any

from dex import RetryPolicy

from dex_agents_ray.connectors._durations import parse_go_duration
from dex_agents_ray.errors import DexAgentsError
from dex_agents_ray.session import ToolEffect

__all__ = [
    "API_VERSION",
    "DEFECT_BRANCH",
    "MANIFEST_FILE_NAME",
    "UNCERTAIN_BRANCH",
    "ConnectorManifestError",
    "ConnectorOperationEntry",
    "ListedBranch",
    "OperationKind",
    "check_input_schema",
    "connector_snake_case",
    "find_manifest_package",
    "load_manifest",
    "manifest_connector_id",
    "operation_entry",
]

MANIFEST_FILE_NAME = "dex-connector.json"
"""The manifest's file name inside the Connector package."""
API_VERSION = "connectors.dex.dev/v1alpha1"
"""The manifest ``apiVersion`` this source reads (the only one published)."""
_API_GROUP = "connectors.dex.dev/"
_CONNECTOR_ID = re.compile(r"[a-z][a-z0-9-]{1,62}")
_OPERATION_NAME = re.compile(r"[a-z][A-Za-z0-9]+")
_BRANCH_ID = re.compile(r"[a-z][A-Za-z0-9]+")
DEFECT_BRANCH = "defect"
"""The Connector SDK's branch for a failed attempt; every operation declares it."""
UNCERTAIN_BRANCH = "uncertain"
"""The Connector SDK's branch for an attempt whose outcome it cannot tell."""


class ConnectorManifestError(DexAgentsError, ValueError):
    """A manifest, or an operation's entry in it, breaks the rules of connector tools."""


class OperationKind(StrEnum):
    """Whether an operation reads or writes (the manifest's ``kind``)."""

    QUERY = "query"
    MUTATION = "mutation"


class ListedBranch(StrEnum):
    """How ``agent.branches`` lists a branch that is not a success branch."""

    REJECTED = "rejected"
    """The provider refused the call: ``failed``, which the model reads."""
    UNKNOWN = "unknown"
    """The outcome cannot be told: ``outcome_unknown`` (Mutations only)."""


@dataclass(frozen=True, kw_only=True)
class ConnectorOperationEntry:
    """One operation's entry in a manifest, checked."""

    connector_id: str
    """The manifest's ``metadata.name``."""
    operation_name: str
    """The operation's ``name`` (``createRefund``)."""
    kind: OperationKind
    """Query or Mutation: the manifest's ``kind``."""
    description: str
    """For the model."""
    input_type: str
    """The name of the type the arguments decode into."""
    input_schema: Mapping[str, Any]
    """The arguments' JSON Schema, in the subset :func:`check_input_schema` allows."""
    required_branches: frozenset[str]
    """The branches without ``optional: true``: the success branches, with ``defect``
    or ``uncertain`` when declared so (neither is ever a success branch)."""
    optional_branches: frozenset[str]
    """The branches with ``optional: true``."""
    listed_branches: Mapping[str, ListedBranch] = field(default_factory=dict)
    """``agent.branches``: branches the source maps; empty for none."""
    exposed: bool = False
    """``agent.exposed``."""
    approval_recommended: bool = False
    """``agent.approval: recommended``."""
    retry_safe: bool = False
    """``agent.retry: safe``: the provider deduplicates by the idempotency key."""
    idempotency_required: bool = False
    """``idempotency: required``, as every Mutation declares; ``False`` for ``none``."""
    execute_method_timeout: timedelta | None = None
    """``execution.executeMethodTimeout``: each attempt's timeout; ``None`` only on an
    entry built by hand, and keeps the session's."""
    heartbeat_timeout: timedelta | None = None
    """``execution.heartbeatTimeout``; ``None`` when the manifest gives none."""
    retry_policy: RetryPolicy | None = None
    """``execution.retry`` as the manifest declares it (``maximumAttempts`` not yet
    capped); ``None`` only on an entry built by hand."""

    @property
    def is_mutation(self) -> bool:
        """Whether the operation writes."""
        return self.kind is OperationKind.MUTATION

    @property
    def success_branches(self) -> frozenset[str]:
        """The branches that record ``succeeded``."""
        return self.required_branches - {DEFECT_BRANCH, UNCERTAIN_BRANCH}

    @property
    def effect(self) -> ToolEffect:
        """``READ`` for a Query, ``IDEMPOTENT_WRITE`` for a safe-retry Mutation,
        ``NON_IDEMPOTENT_WRITE`` for any other Mutation."""
        if not self.is_mutation:
            return ToolEffect.READ
        return ToolEffect.IDEMPOTENT_WRITE if self.retry_safe else ToolEffect.NON_IDEMPOTENT_WRITE


# -- reading ---------------------------------------------------------------------------


def find_manifest_package(module_name: str) -> str:
    """The innermost package of ``module_name`` (or above it) that ships a manifest.

    Raises:
        ConnectorManifestError: No package on the way up ships one.
    """
    parts = module_name.split(".")
    for end in range(len(parts), 0, -1):
        package = ".".join(parts[:end])
        try:
            resource = importlib.resources.files(package) / MANIFEST_FILE_NAME
        except (ModuleNotFoundError, TypeError, ValueError):
            continue  # a module, not a package, or nothing importable
        if resource.is_file():
            return package
    raise ConnectorManifestError(
        f"no {MANIFEST_FILE_NAME} found in the package of {module_name} or above it"
    )


@functools.lru_cache(maxsize=64)
def load_manifest(package: str) -> Mapping[str, Any]:
    """The parsed manifest of Connector package ``package`` (cached per process; a
    refused one is not cached).

    Only the parts every tool needs are checked here: ``apiVersion``, ``kind``,
    ``metadata.name`` and ``spec.operations`` as a list of uniquely named
    operations. An operation's own fields are checked when a tool is built from it.

    Raises:
        ConnectorManifestError: It is missing, not JSON, of another or newer
            ``apiVersion``, or one of those parts is missing or malformed (named).
    """
    try:
        text = (importlib.resources.files(package) / MANIFEST_FILE_NAME).read_text("utf-8")
        data = json.loads(text)
    except (OSError, ValueError, ModuleNotFoundError) as error:
        raise ConnectorManifestError(
            f"cannot read {MANIFEST_FILE_NAME} of {package}: {error}"
        ) from error
    where = f"{package}'s {MANIFEST_FILE_NAME}"
    if not isinstance(data, dict):
        raise ConnectorManifestError(f"{where} is not a JSON object")
    _check_api_version(data.get("apiVersion"), where)
    if data.get("kind") != "Connector":
        raise ConnectorManifestError(f"{where}: kind must be Connector, got {data.get('kind')!r}")
    metadata = data.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if not isinstance(name, str) or not _CONNECTOR_ID.fullmatch(name):
        raise ConnectorManifestError(
            f"{where}: metadata.name must be the connector ID (lowercase letters, digits "
            f"and -, 2 to 63 characters, starting with a letter), got {name!r}"
        )
    spec = data.get("spec")
    operations = spec.get("operations") if isinstance(spec, dict) else None
    if not isinstance(operations, list) or not operations:
        raise ConnectorManifestError(f"{where}: spec.operations must be a non-empty list")
    seen: set[str] = set()
    for index, operation in enumerate(operations):
        op_name = operation.get("name") if isinstance(operation, dict) else None
        if not isinstance(op_name, str) or not _OPERATION_NAME.fullmatch(op_name):
            raise ConnectorManifestError(
                f"{where}: spec.operations[{index}].name must be a lower camel case "
                f"operation name, got {op_name!r}"
            )
        if op_name in seen:
            raise ConnectorManifestError(f"{where}: two operations are named {op_name}")
        seen.add(op_name)
    return data


def _check_api_version(version: object, where: str) -> None:
    if version == API_VERSION:
        return
    if isinstance(version, str) and version.startswith(_API_GROUP):
        raise ConnectorManifestError(
            f"{where}: apiVersion {version} is not one this source reads ({API_VERSION}); "
            "a newer manifest needs a newer dex-agents-ray"
        )
    raise ConnectorManifestError(
        f"{where}: apiVersion must be {API_VERSION}, got {version!r} (not a Connector manifest)"
    )


def manifest_connector_id(manifest: Mapping[str, Any]) -> str:
    """The connector ID (``metadata.name``) of a manifest from :func:`load_manifest`."""
    return str(manifest["metadata"]["name"])


# -- an operation's entry --------------------------------------------------------------

# The v1alpha1 operation's fields, and the two the spec adds for agents.
_ENTRY_KEYS = frozenset(
    {
        "name",
        "goName",
        "inputType",
        "outputType",
        "kind",
        "description",
        "idempotency",
        "branches",
        "progress",
        "authorization",
        "execution",
        "agent",
        "inputSchema",
    }
)
_AGENT_KEYS = frozenset({"exposed", "approval", "retry", "branches"})
_BRANCH_KEYS = frozenset({"id", "goName", "description", "optional"})
_EXECUTION_KEYS = frozenset({"executeMethodTimeout", "heartbeatTimeout", "durability", "retry"})
_RETRY_KEYS = frozenset(
    {"initialInterval", "backoffCoefficient", "maximumInterval", "maximumAttempts", "totalDuration"}
)


def operation_entry(manifest: Mapping[str, Any], operation_name: str) -> ConnectorOperationEntry:
    """The checked entry of ``operation_name``: exposed, with known ``agent`` values,
    well-formed branches and execution, and an ``inputSchema`` the source can check.

    Raises:
        ConnectorManifestError: The entry is missing or breaks a rule (naming the
            connector, the operation and the field).
    """
    connector_id = manifest_connector_id(manifest)
    where = f"{connector_id} {operation_name}"
    entry = next(
        (op for op in manifest["spec"]["operations"] if op.get("name") == operation_name), None
    )
    if entry is None:
        raise ConnectorManifestError(f"{where}: the manifest has no such operation")
    unknown = sorted(set(entry) - _ENTRY_KEYS)
    if unknown:
        raise ConnectorManifestError(f"{where}: unknown operation fields {unknown}")
    agent = _agent(entry.get("agent"), where)
    kind = _kind(entry, where)
    required, optional = _branches(entry.get("branches"), kind, where)
    listed = _listed_branches(agent.get("branches", {}), required, optional, kind, where)
    schema = entry.get("inputSchema")
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise ConnectorManifestError(f"{where}: inputSchema must be an object schema")
    check_input_schema(schema, where)
    timeout, heartbeat, retry = _execution(entry.get("execution"), where)
    return ConnectorOperationEntry(
        connector_id=connector_id,
        operation_name=operation_name,
        kind=kind,
        description=_text(entry, "description", where),
        input_type=_text(entry, "inputType", where),
        input_schema=schema,
        required_branches=required,
        optional_branches=optional,
        listed_branches=listed,
        exposed=True,
        approval_recommended=agent.get("approval") == "recommended",
        retry_safe=agent.get("retry") == "safe",
        idempotency_required=kind is OperationKind.MUTATION,
        execute_method_timeout=timeout,
        heartbeat_timeout=heartbeat,
        retry_policy=retry,
    )


def _text(entry: Mapping[str, Any], name: str, where: str) -> str:
    value = entry.get(name)
    if not isinstance(value, str) or not value.strip():
        raise ConnectorManifestError(f"{where}: {name} must be a non-empty string")
    return value


def _kind(entry: Mapping[str, Any], where: str) -> OperationKind:
    try:
        kind = OperationKind(str(entry.get("kind")))
    except ValueError:
        raise ConnectorManifestError(
            f"{where}: kind must be query or mutation, got {entry.get('kind')!r}"
        ) from None
    expected = "required" if kind is OperationKind.MUTATION else "none"
    idempotency = entry.get("idempotency")
    if idempotency not in ("none", "required"):
        raise ConnectorManifestError(
            f"{where}: idempotency must be none or required, got {idempotency!r}"
        )
    if idempotency != expected:
        raise ConnectorManifestError(
            f"{where}: idempotency must be {expected} for a {kind.value}, got {idempotency}"
        )
    return kind


def _agent(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict) or value.get("exposed") is not True:
        raise ConnectorManifestError(f"{where}: not exposed to agents (agent.exposed: true)")
    unknown = sorted(set(value) - _AGENT_KEYS)
    if unknown:
        raise ConnectorManifestError(f"{where}: unknown agent keys {unknown}")
    if "approval" in value and value["approval"] != "recommended":
        raise ConnectorManifestError(
            f"{where}: unknown agent.approval {value['approval']!r} (only 'recommended')"
        )
    if "retry" in value and value["retry"] != "safe":
        raise ConnectorManifestError(
            f"{where}: unknown agent.retry {value['retry']!r} (only 'safe')"
        )
    return value


def _branches(
    value: object, kind: OperationKind, where: str
) -> tuple[frozenset[str], frozenset[str]]:
    """``(required, optional)`` branch IDs of a ``branches`` list."""
    if not isinstance(value, list) or not value:
        raise ConnectorManifestError(f"{where}: branches must be a non-empty list of {{id, ...}}")
    required: set[str] = set()
    optional: set[str] = set()
    for index, branch in enumerate(value):
        path = f"branches[{index}]"
        if not isinstance(branch, dict):
            raise ConnectorManifestError(f"{where}: {path} must be an object with an id")
        unknown = sorted(set(branch) - _BRANCH_KEYS)
        if unknown:
            raise ConnectorManifestError(f"{where}: {path}: unknown branch fields {unknown}")
        branch_id = branch.get("id")
        if not isinstance(branch_id, str) or not _BRANCH_ID.fullmatch(branch_id):
            raise ConnectorManifestError(
                f"{where}: {path}.id must be a lower camel case branch ID, got {branch_id!r}"
            )
        if branch_id in required | optional:
            raise ConnectorManifestError(f"{where}: branch {branch_id} is declared twice")
        is_optional = branch.get("optional", False)
        if not isinstance(is_optional, bool):
            raise ConnectorManifestError(f"{where}: {path}.optional must be true or false")
        (optional if is_optional else required).add(branch_id)
    declared = required | optional
    if DEFECT_BRANCH not in declared:
        raise ConnectorManifestError(f"{where}: branches must declare {DEFECT_BRANCH}")
    if kind is OperationKind.QUERY and UNCERTAIN_BRANCH in declared:
        raise ConnectorManifestError(f"{where}: a query cannot declare {UNCERTAIN_BRANCH}")
    if not required - {DEFECT_BRANCH, UNCERTAIN_BRANCH}:
        raise ConnectorManifestError(
            f"{where}: branches need a success branch (one without optional: true, "
            f"other than {DEFECT_BRANCH} and {UNCERTAIN_BRANCH})"
        )
    return frozenset(required), frozenset(optional)


def _listed_branches(
    value: object,
    required: frozenset[str],
    optional: frozenset[str],
    kind: OperationKind,
    where: str,
) -> dict[str, ListedBranch]:
    if not isinstance(value, dict):
        raise ConnectorManifestError(f"{where}: agent.branches must be an object")
    success = required - {DEFECT_BRANCH, UNCERTAIN_BRANCH}
    listed: dict[str, ListedBranch] = {}
    for name, mapping in value.items():
        if name not in (required | optional) - success:
            raise ConnectorManifestError(
                f"{where}: agent.branches lists {name!r}, which is not a declared branch "
                "other than a success branch"
            )
        try:
            listed[name] = ListedBranch(mapping)
        except ValueError:
            raise ConnectorManifestError(
                f"{where}: agent.branches.{name} must be rejected or unknown"
            ) from None
        if listed[name] is ListedBranch.UNKNOWN and kind is OperationKind.QUERY:
            raise ConnectorManifestError(
                f"{where}: agent.branches.{name} is unknown, but a Query changes nothing"
            )
        always_unknown = name == UNCERTAIN_BRANCH or (
            name == DEFECT_BRANCH and kind is OperationKind.MUTATION
        )
        if listed[name] is ListedBranch.REJECTED and always_unknown:
            raise ConnectorManifestError(
                f"{where}: agent.branches.{name} is rejected, but this branch always "
                "records outcome_unknown"
            )
    return listed


# -- execution -------------------------------------------------------------------------


def _execution(value: object, where: str) -> tuple[timedelta, timedelta | None, RetryPolicy]:
    """``execution``'s timeout, heartbeat timeout and retry policy, as declared."""
    if not isinstance(value, dict):
        raise ConnectorManifestError(f"{where}: execution must be an object")
    unknown = sorted(set(value) - _EXECUTION_KEYS)
    if unknown:
        raise ConnectorManifestError(f"{where}: unknown execution fields {unknown}")
    if "durability" in value and value["durability"] not in ("sync", "async"):
        raise ConnectorManifestError(
            f"{where}: execution.durability must be sync or async, got {value['durability']!r}"
        )
    timeout = _duration(value.get("executeMethodTimeout"), "execution.executeMethodTimeout", where)
    heartbeat = None
    if "heartbeatTimeout" in value:
        heartbeat = _duration(value["heartbeatTimeout"], "execution.heartbeatTimeout", where)
    return timeout, heartbeat, _retry(value.get("retry"), where)


def _retry(value: object, where: str) -> RetryPolicy:
    if not isinstance(value, dict):
        raise ConnectorManifestError(f"{where}: execution.retry must be an object")
    unknown = sorted(set(value) - _RETRY_KEYS)
    missing = sorted(_RETRY_KEYS - set(value))
    if unknown or missing:
        wrong = f"unknown fields {unknown}" if unknown else f"missing fields {missing}"
        raise ConnectorManifestError(f"{where}: execution.retry has {wrong}")
    attempts = value["maximumAttempts"]
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
        raise ConnectorManifestError(
            f"{where}: execution.retry.maximumAttempts must be an integer of at least 1, "
            f"got {attempts!r}"
        )
    coefficient = value["backoffCoefficient"]
    if isinstance(coefficient, bool) or not isinstance(coefficient, int | float) or coefficient < 1:
        raise ConnectorManifestError(
            f"{where}: execution.retry.backoffCoefficient must be a number of at least 1, "
            f"got {coefficient!r}"
        )
    initial = _duration(value["initialInterval"], "execution.retry.initialInterval", where)
    maximum = _duration(value["maximumInterval"], "execution.retry.maximumInterval", where)
    if maximum < initial:
        raise ConnectorManifestError(
            f"{where}: execution.retry.maximumInterval ({value['maximumInterval']}) is "
            f"shorter than initialInterval ({value['initialInterval']})"
        )
    return RetryPolicy(
        initial_interval=initial,
        backoff_coefficient=float(coefficient),
        maximum_interval=maximum,
        maximum_attempts=attempts,
        total_duration=_duration(value["totalDuration"], "execution.retry.totalDuration", where),
    )


def _duration(value: object, path: str, where: str) -> timedelta:
    """A positive Go duration string (``30s``, ``2m``, ``1h30m``)."""
    if not isinstance(value, str):
        raise ConnectorManifestError(
            f"{where}: {path} must be a Go duration string such as 30s, got {value!r}"
        )
    try:
        duration = parse_go_duration(value)
    except ValueError as error:
        raise ConnectorManifestError(f"{where}: {path}: {error}") from None
    if duration <= timedelta(0):
        raise ConnectorManifestError(
            f"{where}: {path} must be positive (at least 1us), got {value!r}"
        )
    return duration


# -- the closed JSON Schema subset -----------------------------------------------------

_ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "deprecated",
        "readOnly",
        "writeOnly",
        "format",
        "$comment",
        "$schema",
    }
)
_CHECKED = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "enum",
        "anyOf",
        "$ref",
        "$defs",
        "minimum",
        "maximum",
    }
)
_JSON_TYPES = frozenset({"null", "boolean", "integer", "number", "string", "array", "object"})


def check_input_schema(schema: Mapping[str, Any], where: str = "inputSchema") -> None:
    """Refuse a schema outside the subset the source checks: ``type``,
    ``properties``, ``required``, ``additionalProperties``, ``items``, ``enum``,
    ``anyOf``, ``$ref`` into ``$defs``, ``minimum``, ``maximum``, and annotations.

    Raises:
        ConnectorManifestError: A keyword or value outside it, named with its path.
    """
    _SchemaCheck(schema, where).check(schema, "inputSchema")


class _SchemaCheck:
    def __init__(self, root: Mapping[str, Any], where: str) -> None:
        self.root = root
        self.where = where

    def fail(self, path: str, reason: str) -> ConnectorManifestError:
        return ConnectorManifestError(f"{self.where}: {path}: {reason}")

    def check(self, schema: object, path: str) -> None:
        if isinstance(schema, bool):
            return
        if not isinstance(schema, Mapping):
            raise self.fail(path, "a schema must be an object or a boolean")
        unknown = sorted(set(schema) - _CHECKED - _ANNOTATIONS)
        if unknown:
            raise self.fail(path, f"unsupported keywords {unknown}")
        if "$defs" in schema and path != "inputSchema":
            raise self.fail(path, "$defs belongs at the top of inputSchema")
        self._type(schema.get("type"), path)
        for name, sub in self._mapping(schema, "properties", path).items():
            self.check(sub, f"{path}.properties.{name}")
        for name, sub in self._mapping(schema, "$defs", path).items():
            self.check(sub, f"{path}.$defs.{name}")
        self._required(schema.get("required"), path)
        if "additionalProperties" in schema:
            self.check(schema["additionalProperties"], f"{path}.additionalProperties")
        if "items" in schema:
            if not isinstance(schema["items"], Mapping | bool):
                raise self.fail(path, "items must be one schema")
            self.check(schema["items"], f"{path}.items")
        self._rest(schema, path)

    def _rest(self, schema: Mapping[str, Any], path: str) -> None:
        if "enum" in schema and not isinstance(schema["enum"], list):
            raise self.fail(path, "enum must be a list")
        if "anyOf" in schema:
            options = schema["anyOf"]
            if not isinstance(options, list) or not options:
                raise self.fail(path, "anyOf must be a non-empty list")
            for index, option in enumerate(options):
                self.check(option, f"{path}.anyOf[{index}]")
        for bound in ("minimum", "maximum"):
            limit = schema.get(bound)
            if bound in schema and (isinstance(limit, bool) or not isinstance(limit, int | float)):
                raise self.fail(path, f"{bound} must be a number")
        if "$ref" in schema:
            self._ref(schema["$ref"], path)

    def _type(self, kinds: object, path: str) -> None:
        if kinds is None:
            return
        listed = [kinds] if isinstance(kinds, str) else kinds
        if not isinstance(listed, list) or not listed or not all(k in _JSON_TYPES for k in listed):
            raise self.fail(path, f"type {kinds!r} is not a JSON type")

    def _mapping(self, schema: Mapping[str, Any], keyword: str, path: str) -> Mapping[str, Any]:
        value = schema.get(keyword, {})
        if not isinstance(value, Mapping):
            raise self.fail(path, f"{keyword} must be an object")
        return value

    def _required(self, value: object, path: str) -> None:
        if value is not None and (
            not isinstance(value, list) or not all(isinstance(n, str) for n in value)
        ):
            raise self.fail(path, "required must list property names")

    def _ref(self, reference: object, path: str) -> None:
        prefix = "#/$defs/"
        if not isinstance(reference, str) or not reference.startswith(prefix):
            raise self.fail(path, f"$ref {reference!r} must point into #/$defs/")
        name = reference[len(prefix) :]
        defs = self.root.get("$defs")
        if not isinstance(defs, Mapping) or name not in defs:
            raise self.fail(path, f"$ref {reference} does not resolve")


# -- names -----------------------------------------------------------------------------


def connector_snake_case(name: str) -> str:
    """connectorctl's snake case: ``createRefund`` -> ``create_refund``; an acronym run
    stays one word, a plural ``s`` with it (``listStoryIDs`` -> ``list_story_ids``,
    ``HTTPServer`` -> ``http_server``); characters other than letters and digits
    separate words."""
    words: list[str] = []
    current = ""
    for index, char in enumerate(name):
        if not char.isascii() or not char.isalnum():
            if current:
                words.append(current)
            current = ""
            continue
        if current and char.isupper() and _starts_word(name, index):
            words.append(current)
            current = ""
        current += char
    if current:
        words.append(current)
    return "_".join(word.lower() for word in words)


def _starts_word(name: str, index: int) -> bool:
    """Whether the capital at ``index`` starts a word."""
    before = name[index - 1]
    if before.islower() or before.isdigit():
        return True
    if not before.isupper():
        return False
    # Inside a run of capitals: the last capital starts a word when a lowercase
    # word follows it, except a lone plural "s" (IDs, URLs).
    after = name[index + 1] if index + 1 < len(name) else ""
    if not after.islower():
        return False
    rest = name[index + 2] if index + 2 < len(name) else ""
    plural = after == "s" and not rest.islower()
    return not plural
