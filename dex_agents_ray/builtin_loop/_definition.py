"""``AgentDefinition``: an agent in Dex terms, and the turn-continuation hook's types.

Errors::

    TypeError / ValueError   a field has the wrong type or value, or two tools
                             share a name; raised when the definition is built
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal, TypeAlias

from dex_agents_ray.builtin_loop._function_tool import FunctionTool
from dex_agents_ray.builtin_loop._model import (
    ForcedToolChoiceSupport,
    ModelClient,
    ModelOutputItem,
    ModelSettings,
    ToolResultItem,
)
from dex_agents_ray.builtin_loop._tool_source import (
    DEFAULT_TOOL_SOURCE_LISTING_TIMEOUT,
    ToolSource,
    ToolSourceRouter,
)
from dex_agents_ray.session import (
    DEFAULT_EVENT_STREAM_CAPACITY_BYTES,
    AgentPlan,
    BuiltInTool,
    CompactionPolicy,
    InteractionMode,
    ToolEffect,
    ToolPolicy,
)

__all__ = [
    "DEFAULT_MAX_MODEL_CALLS_PER_TURN",
    "MAX_CONSECUTIVE_TURN_CONTINUATIONS",
    "TURN_CONTINUATION_LIMIT_ERROR",
    "AgentDefinition",
    "ContinueTurn",
    "InstructionContext",
    "Instructions",
    "ModelResolver",
    "PlanningToolChoice",
    "TurnContinuation",
    "TurnContinuationContext",
    "TurnContinuationDecider",
    "built_in_name_collision",
    "function_name_collision",
    "model_call_limit_result",
]

DEFAULT_MAX_MODEL_CALLS_PER_TURN = 100
"""``AgentDefinition.max_model_calls_per_turn`` unless set."""
MAX_CONSECUTIVE_TURN_CONTINUATIONS = 8
"""How many ``ContinueTurn`` results may follow answers without tools in a row."""
TURN_CONTINUATION_LIMIT_ERROR = (
    f"the turn reached its limit of {MAX_CONSECUTIVE_TURN_CONTINUATIONS} "
    "consecutive continuations without a tool call"
)
"""``last_turn_error`` of a turn that ended at that limit."""


def model_call_limit_result(limit: int) -> str:
    """The result of a tool call made after the turn's model call limit."""
    return f"The tool call was not run: this turn reached its limit of {limit} model calls."


def built_in_name_collision(name: str) -> str:
    """The ``ValueError`` text for a tool that uses an enabled built-in tool's name."""
    return f"tool {name} uses the name of an enabled built-in tool"


def function_name_collision(name: str) -> str:
    """The ``ValueError`` text for a source tool that uses a function tool's name."""
    return f"tool {name} of a tool source uses the name of a function tool"


@dataclass(frozen=True, kw_only=True)
class InstructionContext:
    """What an instructions function sees, in every ``RunModel``."""

    flow_id: str
    """The session ID."""
    turn_id: str
    """The turn (``"turn-<n>"``)."""
    attempt: int = 1
    """The one-based ``RunModel`` attempt."""
    session_settings: Mapping[str, Any] = field(default_factory=dict)
    """The turn's session settings; empty for none."""
    interaction_mode: InteractionMode = InteractionMode.CHAT
    """The turn's mode."""
    plan: AgentPlan | None = None
    """The session's plan; ``None`` until ``write_todos`` first succeeds."""


Instructions: TypeAlias = str | Callable[[InstructionContext], str | Awaitable[str]]
"""Instructions: a string, or a sync or async function of :class:`InstructionContext`."""

ModelResolver: TypeAlias = Callable[[Mapping[str, Any]], ModelClient]
"""Maps a turn's session settings to the model client of its model calls."""


@dataclass(frozen=True)
class ContinueTurn:
    """Continue the turn: the model is called again with ``message`` as user text."""

    message: str
    """The user text; must not be blank."""

    def __post_init__(self) -> None:
        if not isinstance(self.message, str) or not self.message.strip():
            raise ValueError("ContinueTurn.message must be a non-blank str")


TurnContinuation: TypeAlias = Literal["end", "default"] | ContinueTurn
"""What ``decide_turn_continuation`` returns."""


@dataclass(frozen=True, kw_only=True)
class TurnContinuationContext:
    """One loop iteration (a model call and the tool calls it requested)."""

    flow_id: str
    """The session ID."""
    turn_id: str
    """The turn."""
    session_settings: Mapping[str, Any] = field(default_factory=dict)
    """The turn's session settings; empty for none."""
    model_output: Sequence[ModelOutputItem] = ()
    """The iteration's model output items."""
    tool_results: Sequence[ToolResultItem] = ()
    """The results of its tool calls; empty when the model answered without tools."""


TurnContinuationDecider: TypeAlias = Callable[
    [TurnContinuationContext], TurnContinuation | Awaitable[TurnContinuation]
]
"""``decide_turn_continuation``: sync or async; keep it free of side effects."""

PlanningToolChoice: TypeAlias = Literal["auto", "required"]
"""Whether a planning turn's first model call must call ``write_todos``."""


def _positive(value: object, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"AgentDefinition.{name} must be an int >= 1, not {value!r}")


@dataclass(frozen=True, kw_only=True, eq=False)
class AgentDefinition:
    """An agent defined in Dex terms, run by ``BuiltinLoopAgentRunner``.

    Live objects (the model client, tools, sources) stay in the worker: the
    definition is part of the registered Flow, never Flow state.

    Example::

        support_agent = AgentDefinition(
            name="support",
            instructions="You help customers with their orders.",
            model=ScriptedModelClient(reply),
            tools=[lookup_order, refund_order],
            built_in_tools=frozenset({BuiltInTool.ASK_USER}),
        )

    Raises:
        TypeError: A field has the wrong type.
        ValueError: A field has a bad value; two function tools share a name;
            a function tool or a source's declared tool uses the name of an
            enabled built-in tool; a source declares a function tool's name;
            two sources share a name or declare the same tool name;
            ``plan_mode_enabled`` without ``write_todos``; or
            ``planning_tool_choice="required"`` for a model that refuses a
            forced tool choice.
    """

    name: str
    """The agent's name."""
    instructions: Instructions
    """A string, or a function of :class:`InstructionContext` evaluated in every ``RunModel``."""
    model: ModelClient
    """The model client; ``resolve_model`` may choose another per turn."""
    model_settings: ModelSettings = field(default_factory=ModelSettings)
    """Sampling and reasoning options of every model call."""
    tools: Sequence[FunctionTool[..., Any]] = ()
    """Function tools, offered first."""
    tool_sources: Sequence[ToolSource] = ()
    """Tools listed at run time, offered after the function tools."""
    tool_policies: Mapping[str, ToolPolicy] = field(default_factory=dict)
    """Per tool name; wins over a function tool's own effect and approval."""
    default_tool_effect: ToolEffect = ToolEffect.UNCLASSIFIED
    """The effect of a tool without a policy or its own effect."""
    built_in_tools: frozenset[BuiltInTool] = frozenset()
    """The session's built-in tools to enable, offered after the source tools."""
    max_model_calls_per_turn: int = DEFAULT_MAX_MODEL_CALLS_PER_TURN
    """After this many model calls in one turn, the next call offers no tools, and a
    tool call the model makes anyway is not run while the turn ends."""
    interrupt_deadline: timedelta | None = None
    """How long an approval or question waits; ``None`` waits forever."""
    event_stream_capacity_bytes: int = DEFAULT_EVENT_STREAM_CAPACITY_BYTES
    """The ``AgentEvents`` Stream capacity."""
    plan_mode_enabled: bool = False
    """Accept plan-mode messages; needs ``write_todos`` in ``built_in_tools``."""
    planning_tool_choice: PlanningToolChoice = "auto"
    """``"required"`` forces ``write_todos`` on a planning turn's first model call
    while no draft exists."""
    decide_turn_continuation: TurnContinuationDecider | None = None
    """Ends or continues the turn after each loop iteration; ``None`` keeps the default."""
    resolve_model: ModelResolver | None = None
    """Maps the turn's session settings to a model client; ``None`` always uses ``model``."""
    tool_source_listing_timeout: timedelta = DEFAULT_TOOL_SOURCE_LISTING_TIMEOUT
    """How long each model call waits for one source's listing (10 seconds)."""
    compaction: CompactionPolicy | None = None
    """Summarize older messages to stay under the context window; ``None`` never does."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError("AgentDefinition.name must be a non-blank str")
        if not isinstance(self.instructions, str) and not callable(self.instructions):
            raise TypeError("AgentDefinition.instructions must be a str or a function")
        for method in ("call_model", "estimate_input_tokens"):
            if not callable(getattr(self.model, method, None)):
                raise TypeError(f"AgentDefinition.model must be a ModelClient (no {method})")
        if not isinstance(self.model_settings, ModelSettings):
            raise TypeError("AgentDefinition.model_settings must be a ModelSettings")
        object.__setattr__(self, "tools", tuple(self.tools))
        object.__setattr__(self, "tool_sources", tuple(self.tool_sources))
        object.__setattr__(self, "tool_policies", dict(self.tool_policies))
        object.__setattr__(self, "default_tool_effect", ToolEffect(self.default_tool_effect))
        object.__setattr__(
            self, "built_in_tools", frozenset(BuiltInTool(tool) for tool in self.built_in_tools)
        )
        for name, policy in self.tool_policies.items():
            if not isinstance(policy, ToolPolicy):
                raise TypeError(f"AgentDefinition.tool_policies[{name!r}] must be a ToolPolicy")
        _positive(self.max_model_calls_per_turn, "max_model_calls_per_turn")
        _positive(self.event_stream_capacity_bytes, "event_stream_capacity_bytes")
        if self.interrupt_deadline is not None and self.interrupt_deadline <= timedelta(0):
            raise ValueError("AgentDefinition.interrupt_deadline must be positive")
        if self.tool_source_listing_timeout <= timedelta(0):
            raise ValueError("AgentDefinition.tool_source_listing_timeout must be positive")
        for name in ("decide_turn_continuation", "resolve_model"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise TypeError(f"AgentDefinition.{name} must be a function or None")
        if self.compaction is not None and not isinstance(self.compaction, CompactionPolicy):
            raise TypeError("AgentDefinition.compaction must be a CompactionPolicy or None")
        self._check_tool_names()
        self._check_plan_mode()

    def _check_tool_names(self) -> None:
        names: set[str] = set()
        for tool in self.tools:
            if not isinstance(tool, FunctionTool):
                raise TypeError(
                    f"AgentDefinition.tools holds only function tools (@function_tool), "
                    f"not {type(tool).__name__}"
                )
            if tool.name in names:
                raise ValueError(f"two function tools are named {tool.name}")
            names.add(tool.name)
            if tool.name in self.built_in_tools:
                raise ValueError(built_in_name_collision(tool.name))
        for _, tool_name in ToolSourceRouter(self.tool_sources).declared_tool_names():
            if tool_name in self.built_in_tools:
                raise ValueError(built_in_name_collision(tool_name))
            if tool_name in names:
                raise ValueError(
                    f"tool {tool_name} of a tool source uses the name of a function tool"
                )

    def _check_plan_mode(self) -> None:
        if self.planning_tool_choice not in ("auto", "required"):
            raise ValueError("AgentDefinition.planning_tool_choice must be 'auto' or 'required'")
        if self.plan_mode_enabled and BuiltInTool.WRITE_TODOS not in self.built_in_tools:
            raise ValueError(
                "AgentDefinition.plan_mode_enabled needs write_todos in built_in_tools"
            )
        if (
            self.planning_tool_choice == "required"
            and isinstance(self.model, ForcedToolChoiceSupport)
            and not self.model.supports_forced_tool_choice(self.model_settings)
        ):
            raise ValueError(
                "AgentDefinition.planning_tool_choice 'required': the model refuses a forced "
                "tool choice with these settings"
            )

    @property
    def function_tools(self) -> Mapping[str, FunctionTool[..., Any]]:
        """The function tools by name."""
        return {tool.name: tool for tool in self.tools}
