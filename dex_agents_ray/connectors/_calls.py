"""One connector call in its tool Step: check, decode, run once, classify."""

from __future__ import annotations

import hashlib
import inspect
from typing import Any

from dex_agents_ray.connectors._context import ConnectorStepContext, FenceObservation
from dex_agents_ray.connectors._outcomes import (
    CONNECTOR_NOT_SENT_RETRY_LATER,
    branch_message,
    classify_connector_branch,
    truncate_result,
)
from dex_agents_ray.connectors._protocol import Call, is_retry_error, raise_dex_retry
from dex_agents_ray.connectors._tool import ConnectorTool
from dex_agents_ray.connectors._values import compact_json
from dex_agents_ray.session import (
    AgentToolCallStatus,
    DeferredToolExecution,
    ToolExecutionError,
    ToolExecutionResult,
    ToolOutcomeUnknownError,
)

__all__ = ["derive_call_id", "run_connector_call"]


def derive_call_id(flow_id: str, step_execution_id: str, operation: object) -> str:
    """The Connector Call ID of one tool call: ``call_`` and 32 hex digits of a SHA-256
    over the session, the tool Step execution and the operation.

    The Step execution ID is the same on every attempt, so a retry keeps the Call ID,
    and with it the idempotency key the operation derives from it.

    Raises:
        ValueError: ``flow_id`` or ``step_execution_id`` is empty.
        TypeError: ``operation`` lacks ``connector_id`` or ``operation_name``.
    """
    if not flow_id or not step_execution_id:
        raise ValueError("derive_call_id needs a flow ID and a Step execution ID")
    connector_id = getattr(operation, "connector_id", None)
    operation_name = getattr(operation, "operation_name", None)
    if not isinstance(connector_id, str) or not isinstance(operation_name, str):
        raise TypeError(f"{operation!r} needs str connector_id and operation_name attributes")
    seed = "\n".join((flow_id, step_execution_id, connector_id, operation_name))
    return "call_" + hashlib.sha256(seed.encode("utf-8")).hexdigest()[:32]


def _step_execution_id(call: DeferredToolExecution) -> str:
    # The session's tool Step hands its live context; the event writer is bound to
    # the same Step execution (hand-built calls in tests may carry only that).
    if call.context is not None:
        return call.context.step_execution_id
    return call.events.step_execution_id


async def _run(tool: ConnectorTool, connector_call: Call, context: ConnectorStepContext) -> Any:
    operation: Any = tool.operation
    run = operation.run_mutation if tool.entry.is_mutation else operation.run_query
    selected = run(connector_call, context)
    return await selected if inspect.isawaitable(selected) else selected


def _branch_fields(selected: object) -> tuple[str, Any, str | None, str | None]:
    branch = getattr(selected, "branch", None)
    if not isinstance(branch, str) or not branch:
        raise TypeError(f"the connector operation selected {selected!r}, not a branch")
    kind, message = getattr(selected, "kind", None), getattr(selected, "message", None)
    return (
        branch,
        getattr(selected, "value", None),
        kind if isinstance(kind, str) else None,
        message if isinstance(message, str) else None,
    )


async def run_connector_call(
    tool: ConnectorTool, call: DeferredToolExecution, *, max_result_bytes: int
) -> ToolExecutionResult:
    """Run ``call`` of ``tool`` once, as the spec's "What a call does" lists.

    Raises:
        ToolExecutionError: The arguments break the schema or do not decode, a
            branch records ``failed``, or a single-attempt write's fence proves a
            retry-later request was never sent.
        ToolOutcomeUnknownError: A branch records ``outcome_unknown`` (the model reads
            ``OUTCOME_UNKNOWN_TOOL_RESULT``; the branch's text is the record's ``error``).
        RetryAfterError: The connector asked to retry after a delay (a Step failure).
        Exception: The operation's own failures (Step failures) and ``RetryError``.
    """
    arguments = tool.check_arguments(call.tool_call.arguments)
    decoded = tool.decode_arguments(arguments)
    call_id = derive_call_id(call.flow_id, _step_execution_id(call), tool.operation)
    observation = FenceObservation(
        call_id=call_id, attempt=call.attempt, previous=call.heartbeat_checkpoint
    )
    context = ConnectorStepContext(
        attempt=call.attempt,
        previous_checkpoint=call.heartbeat_checkpoint,
        save_checkpoint=call.save_heartbeat_checkpoint,
        beat=call.heartbeat,
        observation=observation,
    )
    connector_call = Call(call_id=call_id, reference=tool.reference, input=decoded)
    try:
        selected = await _run(tool, connector_call, context)
    except Exception as error:
        if not is_retry_error(error):
            raise
        if tool.single_attempt and observation.proves_not_sent:
            raise ToolExecutionError(CONNECTOR_NOT_SENT_RETRY_LATER) from error
        raise_dex_retry(error)
    branch, value, kind, message = _branch_fields(selected)
    checked = tool.entry.is_mutation and observation.used
    status = classify_connector_branch(
        tool.entry, branch, may_have_sent=checked and observation.may_have_sent
    )
    if status is AgentToolCallStatus.SUCCEEDED:
        output, full_size = truncate_result(compact_json(value, lenient=True), max_result_bytes)
        return ToolExecutionResult(output=output, truncated_output_bytes=full_size)
    text = branch_message(tool.entry, branch, kind, message)
    if status is AgentToolCallStatus.FAILED:
        raise ToolExecutionError(text)
    # Every outcome-unknown row of the branch table: the model reads exactly
    # OUTCOME_UNKNOWN_TOOL_RESULT, and the branch's text goes to the record's error.
    raise ToolOutcomeUnknownError(text, show_detail=False)
