"""Built-in tools: their definitions for the model and their argument checks.

The session routes calls of enabled built-in tools to its own Steps, so they
work under every runner. A runner offers ``BUILT_IN_TOOL_DEFINITIONS``
filtered by ``turn.enabled_built_in_tools``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from dex_agents_ray.errors import DexAgentsError
from dex_agents_ray.session._policy import BuiltInTool
from dex_agents_ray.session._values import PlanTodo, TodoStatus

__all__ = [
    "BUILT_IN_TOOL_DEFINITIONS",
    "BuiltInToolDefinition",
    "built_in_tool_definitions",
]


@dataclass(frozen=True, kw_only=True)
class BuiltInToolDefinition:
    """A built-in tool as offered to a model."""

    name: BuiltInTool
    """The tool name."""
    description: str
    """What the tool does, for the model."""
    parameters_schema: Mapping[str, Any] = field(default_factory=dict)
    """The JSON Schema of the arguments object."""


_ASK_USER = BuiltInToolDefinition(
    name=BuiltInTool.ASK_USER,
    description=(
        "Ask the user a question and wait for the answer. Use it when you need "
        "information or a decision only the user can give."
    ),
    parameters_schema={
        "type": "object",
        "properties": {
            "question": {"type": "string", "description": "The question to ask."},
            "choices": {
                "type": ["array", "null"],
                "items": {"type": "string"},
                "description": "Allowed answers, if the answer must be one of them.",
            },
            "allows_free_text": {
                "type": ["boolean", "null"],
                "description": (
                    "Whether an answer outside choices is accepted (default: false when "
                    "choices are given, true otherwise)."
                ),
            },
        },
        "required": ["question"],
        "additionalProperties": False,
    },
)
_DURABLE_WAIT = BuiltInToolDefinition(
    name=BuiltInTool.DURABLE_WAIT,
    description=(
        "Wait for a number of seconds without holding any resources, then continue. "
        "Use it to check back on something later."
    ),
    parameters_schema={
        "type": "object",
        "properties": {
            "duration_seconds": {
                "type": "integer",
                "minimum": 1,
                "description": "How long to wait, in whole seconds.",
            },
            "reason": {"type": "string", "description": "Why you wait."},
        },
        "required": ["duration_seconds", "reason"],
        "additionalProperties": False,
    },
)
_WRITE_TODOS = BuiltInToolDefinition(
    name=BuiltInTool.WRITE_TODOS,
    description=(
        "Replace the session's plan with this list of tasks. Keep the statuses current: "
        "pending, in_progress, or completed. An empty list clears the plan."
    ),
    parameters_schema={
        "type": "object",
        "properties": {
            "todos": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "content": {"type": "string"},
                        "status": {
                            "type": "string",
                            "enum": ["pending", "in_progress", "completed"],
                        },
                    },
                    "required": ["content", "status"],
                    "additionalProperties": False,
                },
            }
        },
        "required": ["todos"],
        "additionalProperties": False,
    },
)

BUILT_IN_TOOL_DEFINITIONS: Mapping[BuiltInTool, BuiltInToolDefinition] = {
    BuiltInTool.ASK_USER: _ASK_USER,
    BuiltInTool.DURABLE_WAIT: _DURABLE_WAIT,
    BuiltInTool.WRITE_TODOS: _WRITE_TODOS,
}
"""Every built-in tool's definition, by name."""


def built_in_tool_definitions(
    enabled: frozenset[BuiltInTool] | set[BuiltInTool],
) -> list[BuiltInToolDefinition]:
    """The definitions of ``enabled`` tools, in a stable order."""
    return [definition for name, definition in BUILT_IN_TOOL_DEFINITIONS.items() if name in enabled]


class BuiltInArgumentsError(DexAgentsError, ValueError):
    """A built-in call's arguments are invalid; the call records ``failed``."""


def _object(arguments: str, tool: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments or "{}")
    except ValueError as error:
        raise BuiltInArgumentsError(f"invalid {tool} arguments: not valid JSON") from error
    if not isinstance(value, dict):
        raise BuiltInArgumentsError(f"invalid {tool} arguments: expected a JSON object")
    return value


@dataclass(frozen=True, kw_only=True)
class AskUserArguments:
    question: str
    choices: tuple[str, ...]
    allows_free_text: bool


def parse_ask_user(arguments: str) -> AskUserArguments:
    """Check ``ask_user`` arguments (``null`` means absent)."""
    value = _object(arguments, "ask_user")
    question = value.get("question")
    if not isinstance(question, str) or not question.strip():
        raise BuiltInArgumentsError(
            "invalid ask_user arguments: question must be a non-empty string"
        )
    choices = value.get("choices")
    if choices is None:
        choices = []
    if not isinstance(choices, list) or not all(
        isinstance(choice, str) and choice.strip() for choice in choices
    ):
        raise BuiltInArgumentsError(
            "invalid ask_user arguments: choices must be a list of non-empty strings"
        )
    free_text = value.get("allows_free_text")
    if free_text is None:
        free_text = not choices
    if not isinstance(free_text, bool):
        raise BuiltInArgumentsError(
            "invalid ask_user arguments: allows_free_text must be a boolean"
        )
    return AskUserArguments(
        question=question, choices=tuple(choices), allows_free_text=free_text or not choices
    )


@dataclass(frozen=True, kw_only=True)
class DurableWaitArguments:
    seconds: int
    reason: str


def parse_durable_wait(arguments: str, max_wait: timedelta) -> DurableWaitArguments:
    """Check ``durable_wait`` arguments: whole seconds from 1 to ``max_wait``."""
    value = _object(arguments, "durable_wait")
    seconds = value.get("duration_seconds")
    if isinstance(seconds, float) and math.isfinite(seconds) and seconds.is_integer():
        seconds = int(seconds)
    limit = int(max_wait.total_seconds())
    if isinstance(seconds, bool) or not isinstance(seconds, int) or not 1 <= seconds <= limit:
        raise BuiltInArgumentsError(
            f"invalid durable_wait arguments: duration_seconds must be whole seconds "
            f"from 1 to {limit}"
        )
    reason = value.get("reason")
    if reason is None:
        reason = ""
    if not isinstance(reason, str):
        raise BuiltInArgumentsError("invalid durable_wait arguments: reason must be a string")
    return DurableWaitArguments(seconds=seconds, reason=reason)


def parse_write_todos(arguments: str) -> tuple[PlanTodo, ...]:
    """Check ``write_todos`` arguments; raises with ``invalid todos: <reason>``."""
    try:
        value = json.loads(arguments or "{}")
    except ValueError as error:
        raise BuiltInArgumentsError("invalid todos: arguments are not valid JSON") from error
    todos = value.get("todos") if isinstance(value, dict) else None
    if not isinstance(todos, list):
        raise BuiltInArgumentsError("invalid todos: todos must be a list")
    parsed: list[PlanTodo] = []
    for index, todo in enumerate(todos):
        if not isinstance(todo, dict):
            raise BuiltInArgumentsError(f"invalid todos: todos[{index}] must be an object")
        content = todo.get("content")
        if not isinstance(content, str) or not content.strip():
            raise BuiltInArgumentsError(
                f"invalid todos: todos[{index}].content must be a non-empty string"
            )
        try:
            status = TodoStatus(str(todo.get("status")))
        except ValueError as error:
            raise BuiltInArgumentsError(
                f"invalid todos: todos[{index}].status must be pending, in_progress or completed"
            ) from error
        parsed.append(PlanTodo(content=content, status=status))
    return tuple(parsed)
