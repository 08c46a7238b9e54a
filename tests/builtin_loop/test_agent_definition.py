"""AgentDefinition: defaults, construction-time checks, and the session options it derives."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest

from dex_agents_ray.builtin_loop import (
    DEFAULT_MAX_MODEL_CALLS_PER_TURN,
    MAX_CONSECUTIVE_TURN_CONTINUATIONS,
    TURN_CONTINUATION_LIMIT_ERROR,
    AgentDefinition,
    ContinueTurn,
    ModelRequest,
    ModelSettings,
    ScriptedModelClient,
    ScriptedModelReply,
    SourceTool,
    builtin_agent_session_options,
    function_tool,
)
from dex_agents_ray.session import (
    DEFAULT_EVENT_STREAM_CAPACITY_BYTES,
    AgentSessionOptions,
    BuiltInTool,
    ToolEffect,
    ToolPolicy,
)


def reply(request: ModelRequest) -> ScriptedModelReply:
    return ScriptedModelReply(text="ok")


MODEL = ScriptedModelClient(reply)


@function_tool(effect=ToolEffect.READ)
def lookup_order(order_id: str) -> str:
    """Look up an order."""
    return order_id


@function_tool(effect=ToolEffect.READ, name="ask_user")
def ask_user_tool(question: str) -> str:
    """A tool that happens to be called ask_user."""
    return question


class DeclaringSource:
    def __init__(self, source_name: str, names: Sequence[str]) -> None:
        self.source_name = source_name
        self._names = list(names)

    def declared_tool_names(self) -> list[str]:
        return self._names

    async def list_tools(self) -> list[SourceTool]:
        return [SourceTool(name=name) for name in self._names]

    def deferred_tool_call(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def execute_deferred_tool_call(self, call: Any) -> Any:
        raise NotImplementedError

    async def poll_tool_task(self, poll: Any) -> Any:
        raise NotImplementedError


class ForcedRefusingModel(ScriptedModelClient):
    def supports_forced_tool_choice(self, settings: ModelSettings) -> bool:
        return False


def define(**fields: Any) -> AgentDefinition:
    fields.setdefault("name", "support")
    fields.setdefault("instructions", "Help.")
    fields.setdefault("model", MODEL)
    return AgentDefinition(**fields)


def test_defaults_and_constants() -> None:
    agent = define(tools=[lookup_order])
    assert agent.max_model_calls_per_turn == DEFAULT_MAX_MODEL_CALLS_PER_TURN == 100
    assert agent.default_tool_effect is ToolEffect.UNCLASSIFIED
    assert agent.built_in_tools == frozenset()
    assert agent.event_stream_capacity_bytes == DEFAULT_EVENT_STREAM_CAPACITY_BYTES
    assert agent.tool_source_listing_timeout == timedelta(seconds=10)
    assert agent.planning_tool_choice == "auto" and agent.plan_mode_enabled is False
    assert agent.function_tools == {"lookup_order": lookup_order}
    assert MAX_CONSECUTIVE_TURN_CONTINUATIONS == 8
    assert TURN_CONTINUATION_LIMIT_ERROR == (
        "the turn reached its limit of 8 consecutive continuations without a tool call"
    )
    assert ContinueTurn("More.").message == "More."
    with pytest.raises(ValueError, match="non-blank"):
        ContinueTurn("  ")


def test_session_options_come_from_the_definition() -> None:
    agent = define(
        tool_policies={"lookup_order": ToolPolicy(ToolEffect.READ, requires_approval=True)},
        default_tool_effect=ToolEffect.IDEMPOTENT_WRITE,
        built_in_tools=frozenset({"ask_user"}),
        interrupt_deadline=timedelta(minutes=5),
        event_stream_capacity_bytes=4096,
    )
    options = builtin_agent_session_options(agent)
    assert isinstance(options, AgentSessionOptions)
    assert options.tool_policies == agent.tool_policies
    assert options.default_tool_effect is ToolEffect.IDEMPOTENT_WRITE
    assert options.built_in_tools == frozenset({BuiltInTool.ASK_USER})
    assert options.interrupt_deadline == timedelta(minutes=5)
    assert options.event_stream_capacity_bytes == 4096


@pytest.mark.parametrize(
    ("fields", "error", "message"),
    [
        ({"name": " "}, ValueError, "name must be a non-blank str"),
        ({"instructions": 3}, TypeError, "instructions must be a str or a function"),
        ({"model": object()}, TypeError, "must be a ModelClient"),
        ({"model_settings": {}}, TypeError, "model_settings must be a ModelSettings"),
        ({"tools": [lambda: ""]}, TypeError, "only function tools"),
        ({"tools": [lookup_order, lookup_order]}, ValueError, "two function tools are named"),
        ({"tool_policies": {"x": "read"}}, TypeError, r"tool_policies\['x'\]"),
        ({"max_model_calls_per_turn": 0}, ValueError, "max_model_calls_per_turn must be"),
        ({"event_stream_capacity_bytes": -1}, ValueError, "event_stream_capacity_bytes"),
        ({"interrupt_deadline": timedelta(0)}, ValueError, "interrupt_deadline must be positive"),
        (
            {"tool_source_listing_timeout": timedelta(0)},
            ValueError,
            "tool_source_listing_timeout must be positive",
        ),
        ({"decide_turn_continuation": "end"}, TypeError, "decide_turn_continuation must be"),
        ({"resolve_model": 1}, TypeError, "resolve_model must be"),
        (
            {"tools": [ask_user_tool], "built_in_tools": frozenset({BuiltInTool.ASK_USER})},
            ValueError,
            "tool ask_user uses the name of an enabled built-in tool",
        ),
        (
            {"tool_sources": [DeclaringSource("a", []), DeclaringSource("a", [])]},
            ValueError,
            "two tool sources are named a",
        ),
        (
            {"tool_sources": [DeclaringSource("a", ["x"]), DeclaringSource("b", ["x"])]},
            ValueError,
            "two tool sources list a tool named x",
        ),
        (
            {"tools": [lookup_order], "tool_sources": [DeclaringSource("a", ["lookup_order"])]},
            ValueError,
            "tool lookup_order of a tool source uses the name of a function tool",
        ),
        (
            {
                "tool_sources": [DeclaringSource("a", ["durable_wait"])],
                "built_in_tools": frozenset({BuiltInTool.DURABLE_WAIT}),
            },
            ValueError,
            "tool durable_wait uses the name of an enabled built-in tool",
        ),
        ({"tool_sources": [object()]}, TypeError, "needs a non-empty str source_name"),
        ({"plan_mode_enabled": True}, ValueError, "needs write_todos"),
        ({"planning_tool_choice": "always"}, ValueError, "'auto' or 'required'"),
        (
            {"planning_tool_choice": "required", "model": ForcedRefusingModel(reply)},
            ValueError,
            "refuses a forced tool choice",
        ),
    ],
)
def test_construction_checks(fields: dict[str, Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        define(**fields)


def test_a_disabled_built_in_name_is_an_ordinary_tool_name() -> None:
    agent = define(tools=[ask_user_tool], built_in_tools=frozenset({BuiltInTool.DURABLE_WAIT}))
    assert "ask_user" in agent.function_tools
