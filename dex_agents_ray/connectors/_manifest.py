"""A Connector package's ``dex-connector.json``: reading it, and the rules an
operation's entry must meet before it becomes a tool.

The manifest is package data of the Connector package, next to its
``__init__.py``::

    {
      "manifestVersion": 1,
      "connectorId": "stripe",
      "operations": {
        "createRefund": {
          "kind": "mutation",
          "description": "Refund a charge.",
          "inputType": "CreateRefundInput",
          "inputSchema": {"type": "object", "properties": {...}},
          "branches": {"required": ["refunded"], "optional": ["cardDeclined"]},
          "agent": {"exposed": true, "approval": "recommended", "retry": "safe",
                    "branches": {"cardDeclined": "rejected"}}
        }
      }
    }

Every operation also has the Connector SDK's ``defect`` branch (required) and
may select ``uncertain``; neither needs listing.
"""

from __future__ import annotations

import functools
import importlib
import importlib.resources
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from dex_agents_ray.session import ToolEffect

__all__ = [
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
    "operation_entry",
]

MANIFEST_FILE_NAME = "dex-connector.json"
"""The manifest's file name inside the Connector package."""
_CONNECTOR_ID = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
MANIFEST_VERSION = 1
"""The newest ``manifestVersion`` this source reads."""
DEFECT_BRANCH = "defect"
"""The Connector SDK's branch for a failed attempt; every operation has it."""
UNCERTAIN_BRANCH = "uncertain"
"""The Connector SDK's branch for an attempt whose outcome it cannot tell."""


class ConnectorManifestError(ValueError):
    """A manifest, or an operation's entry in it, breaks the rules of connector tools."""


class OperationKind(StrEnum):
    """Whether an operation reads or writes."""

    QUERY = "query"
    MUTATION = "mutation"


class ListedBranch(StrEnum):
    """How ``agent.branches`` lists an optional branch."""

    REJECTED = "rejected"
    """The provider refused the call: ``failed``, which the model reads."""
    UNKNOWN = "unknown"
    """The outcome cannot be told: ``outcome_unknown`` (Mutations only)."""


@dataclass(frozen=True, kw_only=True)
class ConnectorOperationEntry:
    """One operation's entry in a manifest, checked."""

    connector_id: str
    """The manifest's ``connectorId``."""
    operation_name: str
    """The entry's key (``createRefund``)."""
    kind: OperationKind
    """Query or Mutation."""
    description: str
    """For the model; empty when the entry has none."""
    input_type: str
    """The name of the type the arguments decode into."""
    input_schema: Mapping[str, Any]
    """The arguments' JSON Schema, in the subset :func:`check_input_schema` allows."""
    required_branches: frozenset[str]
    """The success branches, with ``defect``."""
    optional_branches: frozenset[str]
    """The other declared branches."""
    listed_branches: Mapping[str, ListedBranch] = field(default_factory=dict)
    """``agent.branches``: optional branches the source maps; empty for none."""
    exposed: bool = False
    """``agent.exposed``."""
    approval_recommended: bool = False
    """``agent.approval: recommended``."""
    retry_safe: bool = False
    """``agent.retry: safe``: the provider deduplicates by the idempotency key."""

    @property
    def is_mutation(self) -> bool:
        """Whether the operation writes."""
        return self.kind is OperationKind.MUTATION

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
    """The parsed manifest of Connector package ``package`` (cached per process).

    Raises:
        ConnectorManifestError: It is missing, not JSON, of a newer version, or
            lacks ``connectorId`` or ``operations``.
    """
    try:
        text = (importlib.resources.files(package) / MANIFEST_FILE_NAME).read_text("utf-8")
        data = json.loads(text)
    except (OSError, ValueError, ModuleNotFoundError) as error:
        raise ConnectorManifestError(
            f"cannot read {MANIFEST_FILE_NAME} of {package}: {error}"
        ) from error
    if not isinstance(data, dict):
        raise ConnectorManifestError(f"{package}'s {MANIFEST_FILE_NAME} is not a JSON object")
    version = data.get("manifestVersion", 1)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ConnectorManifestError(f"{package}: manifestVersion must be a positive integer")
    if version > MANIFEST_VERSION:
        raise ConnectorManifestError(
            f"{package}: manifestVersion {version} is newer than this source reads "
            f"({MANIFEST_VERSION}); upgrade dex-agents-ray"
        )
    connector_id = data.get("connectorId")
    if not isinstance(connector_id, str) or not _CONNECTOR_ID.fullmatch(connector_id):
        raise ConnectorManifestError(f"{package}: connectorId must be a plain identifier")
    if not isinstance(data.get("operations"), dict):
        raise ConnectorManifestError(f"{package}: operations must be an object")
    return data


# -- an operation's entry --------------------------------------------------------------

_ENTRY_KEYS = frozenset(
    {"kind", "description", "inputType", "inputSchema", "branches", "agent", "title"}
)
_AGENT_KEYS = frozenset({"exposed", "approval", "retry", "branches"})


def operation_entry(manifest: Mapping[str, Any], operation_name: str) -> ConnectorOperationEntry:
    """The checked entry of ``operation_name``: exposed, with known ``agent`` values
    and an ``inputSchema`` the source can check.

    Raises:
        ConnectorManifestError: The entry is missing or breaks a rule (named).
    """
    connector_id = str(manifest["connectorId"])
    where = f"{connector_id} {operation_name}"
    entry = manifest["operations"].get(operation_name)
    if not isinstance(entry, dict):
        raise ConnectorManifestError(f"{where}: the manifest has no such operation")
    unknown = sorted(set(entry) - _ENTRY_KEYS)
    if unknown:
        raise ConnectorManifestError(f"{where}: unknown operation keys {unknown}")
    try:
        kind = OperationKind(str(entry.get("kind")))
    except ValueError:
        raise ConnectorManifestError(f"{where}: kind must be query or mutation") from None
    agent = _agent(entry.get("agent"), where)
    required, optional = _branches(entry.get("branches"), where)
    listed = _listed_branches(agent.get("branches", {}), optional, kind, where)
    schema = entry.get("inputSchema")
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise ConnectorManifestError(f"{where}: inputSchema must be an object schema")
    check_input_schema(schema, where)
    input_type = entry.get("inputType")
    if not isinstance(input_type, str) or not input_type:
        raise ConnectorManifestError(f"{where}: inputType must name the input type")
    description = entry.get("description", "")
    if not isinstance(description, str):
        raise ConnectorManifestError(f"{where}: description must be a string")
    return ConnectorOperationEntry(
        connector_id=connector_id,
        operation_name=operation_name,
        kind=kind,
        description=description,
        input_type=input_type,
        input_schema=schema,
        required_branches=required,
        optional_branches=optional,
        listed_branches=listed,
        exposed=True,
        approval_recommended=agent.get("approval") == "recommended",
        retry_safe=agent.get("retry") == "safe",
    )


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


def _names(value: object, where: str, field_name: str) -> frozenset[str]:
    if value is None:
        return frozenset()
    if not isinstance(value, list) or not all(isinstance(n, str) and n for n in value):
        raise ConnectorManifestError(f"{where}: branches.{field_name} must list branch names")
    return frozenset(value)


def _branches(value: object, where: str) -> tuple[frozenset[str], frozenset[str]]:
    if not isinstance(value, dict) or set(value) - {"required", "optional"}:
        raise ConnectorManifestError(f"{where}: branches must have required and optional lists")
    required = _names(value.get("required"), where, "required")
    optional = _names(value.get("optional"), where, "optional")
    if not required - {DEFECT_BRANCH}:
        raise ConnectorManifestError(f"{where}: branches.required needs a success branch")
    both = required & optional
    if both:
        raise ConnectorManifestError(f"{where}: branches {sorted(both)} are required and optional")
    if UNCERTAIN_BRANCH in required:
        raise ConnectorManifestError(f"{where}: {UNCERTAIN_BRANCH} is never a success branch")
    return required | {DEFECT_BRANCH}, optional - {DEFECT_BRANCH}


def _listed_branches(
    value: object, optional: frozenset[str], kind: OperationKind, where: str
) -> dict[str, ListedBranch]:
    if not isinstance(value, dict):
        raise ConnectorManifestError(f"{where}: agent.branches must be an object")
    listed: dict[str, ListedBranch] = {}
    for name, mapping in value.items():
        if name not in optional:
            raise ConnectorManifestError(
                f"{where}: agent.branches lists {name!r}, which is not an optional branch"
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
    return listed


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
