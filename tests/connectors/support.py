"""Helpers for the connector tests: tools of the test packages, hand-built calls."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import dexconn_lab
import dexconn_ledger

from dex_agents_ray import (
    DeferredToolExecution,
    ToolExecutionError,
    ToolOutcomeUnknownError,
    ToolPolicy,
)
from dex_agents_ray.connectors import ConnectorTool, ConnectorToolSource, connector_tool
from tests.connectors.provider import Provider
from tests.mcp.support import Recorded, deferred

CONFORMANCE = json.loads(
    (Path(__file__).parent / "conformance" / "connector_tools.json").read_text("utf-8")
)
STEP_EXECUTION_ID = "CallTool-1"
"""The Step execution every hand-built call runs in (``Recorded.writer``'s)."""


def ledger(provider: Provider) -> dexconn_ledger.LedgerConnection:
    return dexconn_ledger.new_project_connection(provider.url, "test-ledger")


def ledger_tool(provider: Provider, factory: str, **kwargs: Any) -> ConnectorTool:
    connection = ledger(provider)
    return connector_tool(getattr(connection.operations, factory)(), connection.reference, **kwargs)


def lab_tool(operation_name: str, *, mutation: bool, **kwargs: Any) -> ConnectorTool:
    make = dexconn_lab.mutation if mutation else dexconn_lab.query
    return connector_tool(make(operation_name), dexconn_lab.reference, **kwargs)


def execution(
    source: ConnectorToolSource,
    name: str,
    arguments: Mapping[str, Any] | str,
    *,
    attempt: int = 1,
    checkpoint: str | None = None,
    recorded: Recorded | None = None,
    policies: dict[str, ToolPolicy] | None = None,
) -> DeferredToolExecution:
    """The execution of one call of ``name``, as its tool Step builds it."""
    text = arguments if isinstance(arguments, str) else json.dumps(dict(arguments))
    return deferred(
        source,  # any source will do: it only calls deferred_tool_call
        name,
        text,
        recorded=recorded,
        checkpoint=checkpoint,
        supports_tool_tasks=False,
        attempt=attempt,
        policies=policies,
    )


async def outcome(source: ConnectorToolSource, call: DeferredToolExecution) -> tuple[str, str]:
    """``(status, text)`` the session would record; a Step failure propagates.

    For ``outcome_unknown`` the text is the record's ``error``: every such branch
    row leaves the model exactly ``OUTCOME_UNKNOWN_TOOL_RESULT``, checked here.
    """
    try:
        result = await source.execute_deferred_tool_call(call)
    except ToolExecutionError as error:
        return "failed", error.message
    except ToolOutcomeUnknownError as error:
        assert error.show_detail is False, "a connector branch's detail goes to error only"
        return "outcome_unknown", error.message
    return "succeeded", result.output
