"""``connector_tool``: one reviewed Connector operation as an agent tool."""

from __future__ import annotations

import dataclasses
import importlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dex import CodecRegistry, Value, WireKind

from dex_agents_ray.builtin_loop import SchemaViolation, validate_json_value
from dex_agents_ray.connectors._manifest import (
    ConnectorManifestError,
    ConnectorOperationEntry,
    connector_snake_case,
    find_manifest_package,
    load_manifest,
    manifest_connector_id,
    operation_entry,
)
from dex_agents_ray.connectors._protocol import ConnectorOperation
from dex_agents_ray.connectors._values import compact_json
from dex_agents_ray.session import ToolCallStepOptions, ToolEffect, ToolExecutionError

__all__ = [
    "MAX_CONNECTOR_ATTEMPTS",
    "ApprovalPredicate",
    "ConnectorTool",
    "connector_tool",
]

MAX_CONNECTOR_ATTEMPTS = 3
"""A Query's or safe Mutation's tool Step makes at most this many attempts."""

ApprovalPredicate = Callable[[Any], object]
"""Decides per call from the decoded JSON arguments; truthy asks for approval."""

_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_CODECS = CodecRegistry()


def _check_operation(operation: object) -> None:
    """Refuse an object that is no Connector operation at all, before reading anything.

    Raises:
        TypeError: It has neither ``run_query`` nor ``run_mutation``.
    """
    if not callable(getattr(operation, "run_query", None)) and not callable(
        getattr(operation, "run_mutation", None)
    ):
        raise TypeError(
            f"{operation!r} is not a Connector operation (no run_query or run_mutation)"
        )


def _check_methods(operation: object, entry: ConnectorOperationEntry) -> None:
    """The manifest's ``kind`` decides Query or Mutation; the operation must have
    what that kind runs with.

    Raises:
        ConnectorManifestError: It lacks ``run_query`` (Query) or ``run_mutation``
            (Mutation).
        TypeError: A Mutation without ``idempotency_key``.
    """
    method = "run_mutation" if entry.is_mutation else "run_query"
    if not callable(getattr(operation, method, None)):
        raise ConnectorManifestError(
            f"{entry.connector_id} {entry.operation_name}: the manifest's kind is "
            f"{entry.kind.value}, but {operation!r} has no {method}"
        )
    if entry.is_mutation and not callable(getattr(operation, "idempotency_key", None)):
        raise TypeError(f"connector mutation {operation!r} has no idempotency_key method")


@dataclass(frozen=True, kw_only=True)
class ConnectorTool:
    """One Connector operation offered as a tool (a ``ListedTool``); build it with
    :func:`connector_tool`."""

    name: str
    """The tool name the model calls (``<connector ID>_<operation in snake case>``)."""
    description: str
    """The manifest's description."""
    input_schema: Mapping[str, Any]
    """The manifest's ``inputSchema``."""
    operation: ConnectorOperation
    """The Connector SDK's operation (its Step factory's result)."""
    reference: Any
    """The connection reference the operation runs against."""
    entry: ConnectorOperationEntry
    """The operation's checked manifest entry."""
    input_type: Any
    """The type the arguments decode into (the manifest's ``inputType``)."""
    requires_approval: bool | ApprovalPredicate | None = None
    """``True``/``False`` overrides the manifest; a predicate decides per call; ``None``
    follows ``agent.approval``."""
    max_result_bytes: int | None = None
    """This tool's result limit; ``None`` uses the source's."""
    step_options: ToolCallStepOptions | None = None
    """The manifest's ``execution`` for the tool Step (timeout, heartbeat timeout, retry
    policy of at most three attempts); ``None`` keeps the session's."""

    @property
    def effect(self) -> ToolEffect:
        """The effect class from the manifest (see the effect table)."""
        return self.entry.effect

    @property
    def single_attempt(self) -> bool:
        """Whether calls run in ``CallSingleAttemptTool`` (a Mutation without safe retry)."""
        return self.effect is ToolEffect.NON_IDEMPOTENT_WRITE

    def check_arguments(self, text: str) -> dict[str, Any]:
        """The arguments JSON as an object that meets ``inputSchema``.

        Raises:
            ToolExecutionError: It is not a JSON object, or it breaks the schema.
        """
        try:
            value = json.loads(text) if text.strip() else {}
        except ValueError as error:
            raise ToolExecutionError(f"the tool arguments are not valid JSON: {error}") from error
        if not isinstance(value, dict):
            raise ToolExecutionError("the tool arguments must be a JSON object")
        try:
            validate_json_value(value, self.input_schema)
        except SchemaViolation as violation:
            raise ToolExecutionError(
                f"the arguments do not match {self.name}'s input schema: {violation}"
            ) from violation
        return value

    def decode_arguments(self, arguments: Mapping[str, Any]) -> Any:
        """``arguments`` decoded into ``inputType`` with the Dex codec.

        Raises:
            ToolExecutionError: They do not decode.
        """
        try:
            codec = _CODECS.resolve(self.input_type)
            text = compact_json(dict(arguments))
            if codec.wire_kind is WireKind.JSON:
                return codec.decode(Value(WireKind.JSON, text))
            return codec.decode(Value(codec.wire_kind, json.loads(text)))
        except (TypeError, ValueError, KeyError) as error:
            detail = f"missing {error}" if isinstance(error, KeyError) else str(error)
            raise ToolExecutionError(
                f"the arguments do not decode into {self.entry.input_type}: {detail}"
            ) from error

    def arguments_valid(self, text: str) -> bool:
        """Whether arguments ``text`` are a JSON object that meets ``inputSchema``."""
        try:
            self.check_arguments(text)
        except ToolExecutionError:
            return False
        return True

    def approval_required(self, text: str) -> bool:
        """Whether a call with arguments ``text`` waits for approval (before any session
        policy): never for arguments that break the schema, since those never run."""
        try:
            arguments = self.check_arguments(text)
        except ToolExecutionError:
            return False
        decide = self.requires_approval
        if isinstance(decide, bool):
            return decide
        if decide is None:
            return self.entry.approval_recommended
        try:
            return bool(decide(arguments))
        except Exception:
            return True  # a predicate that raises asks


def _step_options(entry: ConnectorOperationEntry) -> ToolCallStepOptions | None:
    """The manifest's ``execution`` as the tool Step's options: its timeout, heartbeat
    timeout and retry policy with at most ``MAX_CONNECTOR_ATTEMPTS`` attempts (none
    for a single-attempt write, whose Step never retries)."""
    retry = entry.retry_policy
    if retry is not None:
        attempts = retry.maximum_attempts
        capped = MAX_CONNECTOR_ATTEMPTS if attempts <= 0 else min(attempts, MAX_CONNECTOR_ATTEMPTS)
        retry = dataclasses.replace(retry, maximum_attempts=capped)
    if entry.effect is ToolEffect.NON_IDEMPOTENT_WRITE:
        retry = None
    if entry.execute_method_timeout is None and entry.heartbeat_timeout is None and retry is None:
        return None
    return ToolCallStepOptions(
        timeout=entry.execute_method_timeout,
        retry_policy=retry,
        heartbeat_timeout=entry.heartbeat_timeout,
    )


def _input_type(operation: object, package: str, entry: ConnectorOperationEntry) -> Any:
    input_type = getattr(operation, "input_type", None)
    if input_type is None:
        input_type = getattr(importlib.import_module(package), entry.input_type, None)
    if input_type is None:
        raise ConnectorManifestError(
            f"{entry.connector_id} {entry.operation_name}: {package} has no input type "
            f"{entry.input_type}"
        )
    if getattr(input_type, "__name__", None) != entry.input_type:
        raise ConnectorManifestError(
            f"{entry.connector_id} {entry.operation_name}: the operation's input type is "
            f"{getattr(input_type, '__name__', input_type)!r}, the manifest's {entry.input_type!r}"
        )
    try:
        _CODECS.resolve(input_type)
    except TypeError as error:
        raise ConnectorManifestError(
            f"{entry.connector_id} {entry.operation_name}: {error}"
        ) from error
    return input_type


def _identity(operation: object) -> tuple[str, str]:
    connector_id = getattr(operation, "connector_id", None)
    operation_name = getattr(operation, "operation_name", None)
    if not isinstance(connector_id, str) or not isinstance(operation_name, str):
        raise TypeError(f"{operation!r} needs str connector_id and operation_name attributes")
    return connector_id, operation_name


def connector_tool(
    operation: ConnectorOperation,
    reference: Any,
    *,
    requires_approval: bool | ApprovalPredicate | None = None,
    name: str | None = None,
    max_result_bytes: int | None = None,
) -> ConnectorTool:
    """Offer one reviewed Connector operation as a tool.

    Reads the operation's entry in its package's ``dex-connector.json`` (the JSON
    form of the ``connectors.dex.dev/v1alpha1`` manifest) and refuses one that
    lacks ``agent.exposed: true``, has an ``agent`` value it does not know, an
    ``inputSchema`` keyword it cannot check, or a malformed ``kind``,
    ``idempotency``, ``branches`` or ``execution``. The manifest's ``kind``
    decides Query or Mutation, and its ``execution`` the tool Step's timeout,
    heartbeat timeout and retry policy (at most ``MAX_CONNECTOR_ATTEMPTS``
    attempts).

    Example::

        connector_tool(stripe.operations.create_refund(), stripe.reference,
                       requires_approval=lambda arguments: arguments["amount"] > 5000)

    Args:
        operation: The operation (a Query or a Mutation).
        reference: The connection reference it runs against (opaque data).
        requires_approval: ``True``/``False`` overrides the manifest's
            ``agent.approval``; a predicate over the decoded JSON arguments decides
            per call, and one that raises asks.
        name: The tool name; ``None`` for ``<metadata.name>_<operation in snake case>``.
        max_result_bytes: This tool's result limit in UTF-8 bytes; ``None`` uses
            the source's.

    Raises:
        ConnectorManifestError: The manifest or the entry breaks a rule (named).
        TypeError: ``operation`` is not a Connector operation, or an option has the
            wrong type.
        ValueError: ``name`` or ``max_result_bytes`` is out of range.
    """
    _check_operation(operation)
    connector_id, operation_name = _identity(operation)
    package = getattr(operation, "connector_package", None) or find_manifest_package(
        type(operation).__module__
    )
    manifest = load_manifest(package)
    if manifest_connector_id(manifest) != connector_id:
        raise ConnectorManifestError(
            f"{operation!r} belongs to connector {connector_id}, but {package}'s manifest "
            f"is {manifest_connector_id(manifest)}'s"
        )
    entry = operation_entry(manifest, operation_name)
    _check_methods(operation, entry)
    tool_name = f"{connector_id}_{connector_snake_case(operation_name)}" if name is None else name
    if not isinstance(tool_name, str) or not _TOOL_NAME.fullmatch(tool_name):
        raise ValueError(
            f"connector tool name {tool_name!r} must be 1 to 64 letters, digits, _ or -"
        )
    if max_result_bytes is not None and (
        isinstance(max_result_bytes, bool)
        or not isinstance(max_result_bytes, int)
        or max_result_bytes < 1
    ):
        raise ValueError(f"max_result_bytes must be a positive int, got {max_result_bytes!r}")
    if requires_approval is not None and not (
        isinstance(requires_approval, bool) or callable(requires_approval)
    ):
        raise TypeError("requires_approval must be a bool, a predicate or None")
    return ConnectorTool(
        name=tool_name,
        description=entry.description,
        input_schema=entry.input_schema,
        operation=operation,
        reference=reference,
        entry=entry,
        input_type=_input_type(operation, package, entry),
        requires_approval=requires_approval,
        max_result_bytes=max_result_bytes,
        step_options=_step_options(entry),
    )
