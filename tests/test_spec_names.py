"""Every public name of the spec at the module path the spec gives it.

The spec (``dex-agents-0.5.0-README.md``) imports from ``dex_agents``; ours is
``dex_agents_ray``, the same tree. The table below is the spec's names, read
from its code and its text, each under the module whose section, import or
sentence places it: a name a section does not place lives at the root, as the
spec's module table puts the session, the runner contract and tracing options
there. A name dropped or moved is a failure here, not a surprise to a user
porting a spec example.
"""

from __future__ import annotations

import importlib

import pytest

SPEC_ROOT = "dex_agents"
OUR_ROOT = "dex_agents_ray"

SPEC_NAMES: dict[str, tuple[str, ...]] = {
    "dex_agents": (
        # The session Flow, its persistence names and its client.
        "AGENT_MESSAGES",
        "AGENT_MESSAGE_CHUNKS",
        "AGENT_MESSAGE_INDEX",
        "AGENT_PLAN",
        "AGENT_SESSION_ACTIVE_STEP_SEARCH_MODE",
        "AGENT_STATE",
        "AGENT_TOOL_CALLS",
        "AGENT_TRACE_CONTEXT",
        "AGENT_USAGE",
        "BUILT_IN_TOOL_DEFINITIONS",
        "CONTEXT_SUMMARY",
        "FRAMEWORK_RUN_STATE",
        "INTERRUPT_RESOLUTIONS",
        "PENDING_INTERRUPTS",
        "PENDING_PLAN_EXECUTION",
        "PLAN_EXECUTIONS",
        "QUEUED_USER_MESSAGES",
        "STEERED_USER_MESSAGES",
        "TOOL_CALL_CANCELLATIONS",
        "TOOL_CALL_RESULTS",
        "TURN_CANCELLATION_REQUEST",
        "TURN_CONTROL_REQUESTS",
        "TURN_REPLY_SEQUENCE",
        "AgentEvent",
        "AgentEventType",
        "AgentEventWriter",
        "AgentInterrupt",
        "AgentInterruptResolution",
        "AgentMessage",
        "AgentMessageChunk",
        "AgentMessageIndex",
        "AgentMessagesPage",
        "AgentPlan",
        "AgentSessionClient",
        "AgentSessionFlow",
        "AgentSessionOptions",
        "AgentSessionStartInput",
        "AgentSnapshot",
        "AgentState",
        "AgentToolCall",
        "AgentUsage",
        "AgentUserMessage",
        "AnswerQuestionRequest",
        "CancelTurnRequest",
        "CompactContextInput",
        "DeleteQueuedMessageRequest",
        "ExecutePlanRequest",
        "ListAgentMessagesRequest",
        "PlanExecutionRequest",
        "PlanStatus",
        "ResolveInterruptRequest",
        "SteerUserMessageRequest",
        "ToolCallCancellation",
        "ToolCallCompleted",
        "TurnCancellationRequest",
        "TurnControlRequest",
        "TurnReplySequence",
        "message_sequence_key",
        "plan_execution_key",
        "session_flow_definition_document",
        # The runner contract, tools and policies.
        "MISSING_TOOL_TASK_POLLER",
        "OUTCOME_UNKNOWN_TOOL_RESULT",
        "TOOL_CALL_NOT_RUN_ERROR_PREFIX",
        "TOOL_CALL_SKIPPED_AFTER_WRITE_DETAIL",
        "AgentFrameworkRunner",
        "AgentTurnContext",
        "AgentTurnOutcome",
        "BuiltInTool",
        "DeferredToolCall",
        "DeferredToolExecution",
        "DeferredToolOutcome",
        "FrameworkMessage",
        "ImageUserMessageBuilder",
        "MessageRole",
        "ModelCallMetadata",
        "PlanModeRunner",
        "QuestionAnswer",
        "QuestionResolution",
        "ToolCallStepOptionsProvider",
        "ToolCallsRequested",
        "ToolEffect",
        "ToolExecutionError",
        "ToolExecutionResult",
        "ToolInputRequested",
        "ToolOutcomeUnknownError",
        "ToolPolicy",
        "ToolTaskCancellation",
        "ToolTaskCanceller",
        "ToolTaskPending",
        "ToolTaskPoll",
        "ToolTaskPollOutcome",
        "ToolTaskPoller",
        "ToolTaskStarted",
        "TurnCompleted",
        "TurnContinued",
        "UnfinishedTurnMessageBuilder",
        "build_plan_note",
        "build_turn_failure_note",
        "describe_tool_call_outcome",
        "idempotency_key",
        "is_approval_required",
        # Compaction, settings, spend and tracing.
        "CONTEXT_SUMMARY_INSTRUCTIONS",
        "CONTEXT_SUMMARY_NOTE_HEADER",
        "CONTEXT_SUMMARY_TRANSCRIPT_HEADER",
        "INVALID_START_SESSION_SETTINGS_REASON",
        "MAX_SESSION_SETTINGS_BYTES",
        "SESSION_SETTINGS_SIZE_TOLERANCE_BYTES",
        "AgentTracingOptions",
        "CompactionPolicy",
        "ContextCompactionRunner",
        "ContextSummary",
        "ContextSummaryRequest",
        "ContextSummaryResult",
        "GenAISemanticConventionsVersion",
        "ModelSpendLimit",
        "TurnSessionSettings",
        "build_context_summary_omission_note",
        "build_context_summary_prompt",
        "estimate_stored_input_tokens",
        "estimate_text_tokens",
        "select_turn_boundary_cutoff",
        "session_settings_size",
        "validate_session_settings",
        # Images.
        "MAX_IMAGES_PER_MESSAGE",
        "MAX_IMAGE_BYTES",
        "MAX_IMAGE_URI_LENGTH",
        "AgentImageReference",
        "ImageValidationError",
        "InMemoryMediaStore",
        "LocalDirectoryMediaStore",
        "MediaStore",
        "MediaStoreError",
        "build_image_reference",
        "collect_turn_images",
        "load_images",
        "require_short_image_uris",
        "require_store_image_reference",
        "validate_image_reference",
        "validate_image_references",
        "verify_image_bytes",
    ),
    "dex_agents.builtin_loop": (
        "ESTIMATED_IMAGE_INPUT_TOKENS",
        "MAX_CONSECUTIVE_TURN_CONTINUATIONS",
        "SOURCE_TOOL_NOT_OFFERED_RESULT",
        "TURN_CONTINUATION_LIMIT_ERROR",
        "AgentDefinition",
        "BuiltinLoopAgentRunner",
        "ContinueTurn",
        "FrameworkToolSourceRouter",
        "FunctionToolResult",
        "InstructionContext",
        "ModelClient",
        "ModelOutputItem",
        "ModelOutputWriter",
        "ModelRequest",
        "ModelResponse",
        "ScriptedModelClient",
        "ScriptedModelReply",
        "ScriptedToolCall",
        "SourceToolListing",
        "ToolCallContext",
        "ToolResultItem",
        "ToolSource",
        "TurnContinuation",
        "TurnContinuationContext",
        "UserTextItem",
        "builtin_agent_session_flow",
        "builtin_agent_session_options",
        "function_tool",
    ),
    "dex_agents.litellm": (
        "TOOL_RESULT_IMAGES_OMITTED_TEXT",
        "TOOL_RESULT_IMAGES_TEXT",
        "LiteLLMModelClient",
    ),
    "dex_agents.mcp": (
        "IDEMPOTENCY_KEY_META_KEY",
        "MCP_GET_PROMPT_TOOL_NAME",
        "MCP_LIST_RESOURCES_AND_PROMPTS_TOOL_NAME",
        "MCP_READ_RESOURCE_TOOL_NAME",
        "OUTCOME_UNKNOWN_TOOL_RESULT",
        "TOOL_APPROVAL_META_KEY",
        "TOOL_EFFECT_META_KEY",
        "TOOL_OUTCOME_META_KEY",
        "McpStdioServerConfig",
        "McpStreamableHttpServerConfig",
        "McpTool",
        "McpToolCallInterruptedError",
        "McpToolSource",
    ),
    "dex_agents.connectors": (
        "CONNECTOR_NOT_SENT_RETRY_LATER",
        "CONNECTOR_RESULT_TRUNCATED_NOTE",
        "DEFAULT_CONNECTOR_RESULT_MAX_BYTES",
        "OUTCOME_UNKNOWN_TOOL_RESULT",
        "Call",
        "ConnectorStepContext",
        "ConnectorToolSource",
        "RetryError",
        "classify_connector_branch",
        "connector_tool",
        "derive_call_id",
        "raise_dex_retry",
    ),
    "dex_agents.s3": ("S3MediaStore",),
    "dex_agents.ui_stream": (
        "AGENT_EVENT_STREAM_HEADERS",
        "KEEP_ALIVE_FRAME",
        "InvalidAgentEventResumeTokenError",
        "read_agent_event_stream_snapshot",
        "read_agent_event_stream_snapshot_sync",
        "stream_agent_event_frames",
        "stream_agent_event_frames_sync",
    ),
    "dex_agents.session_graph": (
        "SESSION_FLOW_GRAPH_GENERATED_AT",
        "render_session_flow_graph",
    ),
    "dex_agents.testing": (
        "EXECUTE_COMPLETED_EVENT",
        "AgentTestStack",
        "ContextWindowSessionScenario",
        "FileGate",
        "InvocationLog",
        "ScriptedModelClient",
        "StepHistoryEntry",
        "read_step_history",
        "run_agent_worker",
        "wait_for_agent_snapshot",
        "wait_until",
    ),
}
"""The spec's public names by the spec's module path."""

CASES = [(module, name) for module, names in SPEC_NAMES.items() for name in names]


def _ours(spec_module: str) -> str:
    return OUR_ROOT + spec_module.removeprefix(SPEC_ROOT)


@pytest.mark.parametrize(("spec_module", "name"), CASES, ids=[f"{m}.{n}" for m, n in CASES])
def test_the_spec_name_imports_at_its_spec_path(spec_module: str, name: str) -> None:
    module = _ours(spec_module)
    namespace: dict[str, object] = {}
    exec(f"from {module} import {name}", namespace)  # the spec's own import form
    assert namespace[name] is not None
    assert name in importlib.import_module(module).__all__, f"{module}.__all__ lacks {name}"


def test_the_table_has_no_repeats_and_the_shared_names_are_one_object() -> None:
    for module, names in SPEC_NAMES.items():
        assert len(names) == len(set(names)), module
    builtin_loop = importlib.import_module(_ours("dex_agents.builtin_loop"))
    testing = importlib.import_module(_ours("dex_agents.testing"))
    # "ScriptedModelClient (the same class as dex_agents.builtin_loop's)".
    assert testing.ScriptedModelClient is builtin_loop.ScriptedModelClient
    texts = {
        getattr(importlib.import_module(_ours(module)), "OUTCOME_UNKNOWN_TOOL_RESULT", None)
        for module in ("dex_agents", "dex_agents.mcp", "dex_agents.connectors")
    }
    assert len(texts) == 1 and None not in texts
