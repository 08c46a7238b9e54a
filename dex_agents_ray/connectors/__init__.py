"""Reviewed Connector operations as durable agent tools (the ``connectors`` extra).

:class:`ConnectorToolSource` offers operations built with :func:`connector_tool`
to a built-in loop agent (or any runner) as a ``ToolSource``. Each call runs one
operation in its own tool Step through its ``run_query`` or ``run_mutation``,
with the connector's Call ID (:func:`derive_call_id`), idempotency key and
single-dispatch fence, and every write is an ordered write.

The Connector SDK (``dex-connectors-sdk``) is not a dependency: the operation,
its ``Call``, the selected branch, ``RetryError`` and the fence markers are
described structurally (``_protocol``), so the SDK's own objects fit when it is
installed. That fit is unverified until the SDK can be installed; see
``docs/connectors.md``.

Errors::

    ValueError
    ├── ConnectorManifestError      a manifest or an entry breaks a rule (at connector_tool)
    └── MalformedFenceMarkerError   a value has the fence key but is no readable marker
    Exception
    └── RetryError                  a connector asks to run again later (a Step failure)

A call records ``failed`` through ``ToolExecutionError`` and ``outcome_unknown``
through ``ToolOutcomeUnknownError``, the session's own control-flow errors; for
an ``outcome_unknown`` branch the model reads exactly
``OUTCOME_UNKNOWN_TOOL_RESULT`` (re-exported here from ``dex_agents_ray.session``).
"""

from dex_agents_ray.connectors._calls import derive_call_id
from dex_agents_ray.connectors._context import ConnectorStepContext
from dex_agents_ray.connectors._manifest import (
    DEFECT_BRANCH,
    MANIFEST_FILE_NAME,
    UNCERTAIN_BRANCH,
    ConnectorManifestError,
    ConnectorOperationEntry,
    ListedBranch,
    OperationKind,
    connector_snake_case,
)
from dex_agents_ray.connectors._outcomes import (
    CONNECTOR_NOT_SENT_RETRY_LATER,
    CONNECTOR_RESULT_TRUNCATED_NOTE,
    DEFAULT_CONNECTOR_RESULT_MAX_BYTES,
    classify_connector_branch,
)
from dex_agents_ray.connectors._protocol import (
    FENCE_MARKER_KEY,
    FENCE_MARKER_VERSION,
    Call,
    ConnectorBranch,
    ConnectorMutation,
    ConnectorOperation,
    ConnectorQuery,
    FenceMarker,
    FenceState,
    MalformedFenceMarkerError,
    RetryError,
    SelectedBranch,
    is_retry_error,
    raise_dex_retry,
    read_fence_marker,
)
from dex_agents_ray.connectors._source import ConnectorToolSource
from dex_agents_ray.connectors._tool import (
    MAX_CONNECTOR_ATTEMPTS,
    ApprovalPredicate,
    ConnectorTool,
    connector_tool,
)
from dex_agents_ray.session import OUTCOME_UNKNOWN_TOOL_RESULT

__all__ = [
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
