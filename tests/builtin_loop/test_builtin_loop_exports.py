"""The built-in loop's public names, and the testing package's ScriptedModelClient."""

from __future__ import annotations

import dex_agents_ray.builtin_loop as builtin_loop
import dex_agents_ray.testing

LOOP_NAMES = {
    "DEFAULT_MAX_MODEL_CALLS_PER_TURN",
    "DEFAULT_TOOL_SOURCE_LISTING_TIMEOUT",
    "MAX_CONSECUTIVE_TURN_CONTINUATIONS",
    "TURN_CONTINUATION_LIMIT_ERROR",
    "AgentDefinition",
    "BuiltinLoopAgentRunner",
    "ContinueTurn",
    "FunctionTool",
    "FunctionToolResult",
    "InstructionContext",
    "Instructions",
    "ListedTool",
    "ModelResolver",
    "PlanningToolChoice",
    "SourceTool",
    "ToolCallContext",
    "ToolSource",
    "TurnContinuation",
    "TurnContinuationContext",
    "TurnContinuationDecider",
    "builtin_agent_session_flow",
    "builtin_agent_session_options",
    "function_tool",
}


def test_loop_names_are_exported_and_resolve() -> None:
    assert LOOP_NAMES <= set(builtin_loop.__all__)
    for name in builtin_loop.__all__:
        assert getattr(builtin_loop, name) is not None
    assert set(builtin_loop.__all__) <= set(dir(builtin_loop))


def test_testing_exports_the_same_scripted_model_client() -> None:
    assert "ScriptedModelClient" in dex_agents_ray.testing.__all__
    assert dex_agents_ray.testing.ScriptedModelClient is builtin_loop.ScriptedModelClient
