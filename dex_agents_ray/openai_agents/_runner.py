"""``OpenAIAgentsRunner``: an unchanged ``agents.Agent`` under the session contract.

One ``run_model_step`` is one ``Runner.run`` on the adapter's copy of the agent
graph (``_graph``) that makes at most one model call: a response that asks for
function tools pauses the run before any tool body runs (every tool of the copy
needs approval). The next ``RunModel`` goes on from there with each call's
recorded outcome: for an agent whose run would just send the tools' outputs back
to the model (``tool_use_behavior="run_llm_again"``, no forced ``tool_choice`` to
reset, no ``AgentHooks``), by a new run of that agent from the turn's input
items and the outputs, which the run state holds (``"kind": "items"``; the
turn's model calls so far count against ``max_turns``); for any other, by
resuming the paused run's ``RunState``, the SDK's own (``"kind": "run_state"``,
several times the cost: the SDK's resume re-validates the whole state). A run that
would make a second model call (after a handoff) is stopped by a
``call_model_input_filter`` gate before it is sent; the next ``RunModel`` starts
a run of the new active agent from that exact model input (``TurnContinued``).
Nothing of a turn is stored until it completes (the spec's default): the run
state carries the turn's items.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, cast

from agents import (
    Agent,
    FunctionTool,
    InputGuardrailTripwireTriggered,
    MaxTurnsExceeded,
    OutputGuardrailTripwireTriggered,
    RunConfig,
    Runner,
    RunState,
)
from agents.run import DEFAULT_MAX_TURNS
from agents.run_config import CallModelData, ModelInputData

from dex_agents_ray.builtin_loop import (
    FrameworkCallIds,
    FrameworkRunnerBase,
    FrameworkToolSourceRouter,
    FrameworkTraveller,
    PerProcessValue,
    SourceToolListing,
    ToolSource,
)
from dex_agents_ray.errors import DexAgentsError
from dex_agents_ray.openai_agents._graph import AgentGraph, walk_agents
from dex_agents_ray.openai_agents._items import (
    framework_messages,
    jsonable,
    rebuild_history,
    user_item,
)
from dex_agents_ray.openai_agents._tools import run_function_tool
from dex_agents_ray.session import (
    CONTEXT_SUMMARY_INSTRUCTIONS,
    OUTCOME_UNKNOWN_TEXT,
    AgentTurnContext,
    AgentTurnOutcome,
    AgentUsage,
    ContextSummaryRequest,
    ContextSummaryResult,
    DeferredToolCall,
    DeferredToolExecution,
    DeferredToolOutcome,
    FrameworkMessage,
    MessageRole,
    ModelCallMetadata,
    ToolCallsRequested,
    ToolEffect,
    ToolExecutionError,
    ToolPolicy,
    TurnCompleted,
    TurnContinued,
    build_context_summary_prompt,
    built_in_tool_definitions,
    describe_tool_call_outcome,
)

__all__ = ["OpenAIAgentsRunner"]

_STATE_VERSION = 1
_BUILT_IN_POLICY = ToolPolicy(ToolEffect.READ, requires_approval=False)


class _StopBeforeModelCall(DexAgentsError):  # noqa: N818 - a control-flow signal
    """Raised by the gate instead of a second model call in one ``RunModel``."""


class _StepGate:
    """``RunConfig.call_model_input_filter``: lets one model call through, then
    records the exact next model input and its agent and stops the run."""

    def __init__(self, user_filter: Any) -> None:
        self.user_filter = user_filter
        self.calls = 0
        self.next_agent: str | None = None
        self.next_items: list[dict[str, Any]] = []

    async def __call__(self, data: CallModelData[Any]) -> ModelInputData:
        self.calls += 1
        if self.calls > 1:
            self.next_agent = data.agent.name
            self.next_items = jsonable(data.model_data.input)
            raise _StopBeforeModelCall
        if self.user_filter is None:
            return data.model_data
        filtered = self.user_filter(data)
        if inspect.isawaitable(filtered):
            filtered = await filtered
        assert isinstance(filtered, ModelInputData)
        return filtered


def _usage(result: Any) -> AgentUsage:
    responses = getattr(result, "raw_responses", None) or []
    if not responses:
        return AgentUsage()
    usage = responses[-1].usage
    return AgentUsage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cached_input_tokens=usage.input_tokens_details.cached_tokens or 0,
        reasoning_tokens=usage.output_tokens_details.reasoning_tokens or 0,
        model_calls=1,
    )


def _model_name(agent: Agent[Any]) -> str | None:
    model = agent.model
    if model is None or isinstance(model, str):
        return model
    return getattr(model, "model", None)


def _metadata(agent: Agent[Any], result: Any) -> ModelCallMetadata:
    responses = getattr(result, "raw_responses", None) or []
    response_id = responses[-1].response_id if responses else None
    return ModelCallMetadata(request_model=_model_name(agent), response_id=response_id)


def _schema_only_tool(
    name: str, description: str | None, schema: Mapping[str, Any]
) -> FunctionTool:
    async def never(_ctx: Any, _arguments: str) -> str:
        raise RuntimeError("a schema-only tool runs in its tool Step, never in the model call")

    return FunctionTool(
        name=name,
        description=description or "",
        params_json_schema=dict(schema),
        on_invoke_tool=never,
        strict_json_schema=False,
        needs_approval=True,
    )


def _check_graph(root: Agent[Any]) -> None:
    names: dict[str, int] = {}
    for agent in walk_agents(root):
        names[agent.name] = names.get(agent.name, 0) + 1
        hosted = [type(t).__name__ for t in agent.tools if not isinstance(t, FunctionTool)]
        if hosted:
            raise ValueError(
                f"agent {agent.name!r} has tools that cannot run as tool Steps: "
                f"{', '.join(sorted(set(hosted)))}; offer them as function tools"
            )
        if agent.mcp_servers:
            warnings.warn(
                f"agent {agent.name!r} has mcp_servers: the Agents SDK calls their tools "
                "inside RunModel, so a retried RunModel may call them again (at-least-once); "
                "give the session McpToolSource through tool_sources for tool Steps",
                RuntimeWarning,
                stacklevel=4,
            )
    repeated = sorted(name for name, count in names.items() if count > 1)
    if repeated:
        raise ValueError(
            f"agent names must be unique in the handoff graph (the active agent is kept "
            f"by name): {', '.join(repeated)}"
        )


class OpenAIAgentsRunner(FrameworkRunnerBase):
    """Runs an unchanged OpenAI Agents SDK ``Agent`` as durable session turns.

    Implements ``AgentFrameworkRunner[DeferredToolOutcome]``,
    ``UnfinishedTurnMessageBuilder`` and ``ContextCompactionRunner``, and routes
    ``tool_sources`` calls, task polls and Step options to their sources. The
    agent travels as ``PydanticAIRunner``'s does (by reference, or by value with
    its OpenAI clients rebuilt on arrival).

    Args:
        agent: The starting agent, unchanged; its handoffs are followed.
        tool_sources: Tool sources offered beside the agents' function tools.
        media_store: Where images live (kept for the spec's signature; this
            runner refuses images).
        context: The run context for every run and tool (must pickle).
        context_factory: Builds the context once per process instead.
        run_config: The runs' ``RunConfig``. Without one, tracing is off
            (``tracing_disabled=True``); with one, its own setting is kept.

    Raises:
        TypeError: ``agent`` is not an ``agents.Agent``, or it cannot travel.
        ValueError: A hosted tool (not a ``FunctionTool``), repeated agent names,
            both ``context`` and ``context_factory``, or server-side
            conversation state in ``run_config`` (``session_settings``).
    """

    def __init__(
        self,
        agent: Agent[Any],
        *,
        tool_sources: Iterable[ToolSource] = (),
        media_store: Any = None,
        context: Any = None,
        context_factory: Callable[[], Any] | None = None,
        run_config: RunConfig | None = None,
    ) -> None:
        if not isinstance(agent, Agent):
            raise TypeError(f"OpenAIAgentsRunner needs an agents.Agent, got {type(agent).__name__}")
        _check_graph(agent)
        if run_config is not None and not isinstance(run_config, RunConfig):
            raise TypeError("run_config must be an agents.RunConfig")
        if run_config is not None and run_config.session_settings is not None:
            raise ValueError(
                "run_config.session_settings: an agents Session keeps history on its own; "
                "the session's history lives in the Flow's store"
            )
        self._agent = FrameworkTraveller(agent, what="the agent")
        self._context = PerProcessValue(context, context_factory, what="context")
        self._run_config = FrameworkTraveller(run_config, what="run_config") if run_config else None
        self._router = FrameworkToolSourceRouter(tool_sources)
        self.media_store = media_store

    def __repr__(self) -> str:
        return f"OpenAIAgentsRunner({self.agent.name!r})"

    @property
    def agent(self) -> Agent[Any]:
        """The starting agent (in a Ray process, its copy there)."""
        agent: Agent[Any] = self._agent.value
        return agent

    def _context_value(self) -> Any:
        return self._context.get()

    def _config(self, gate: _StepGate) -> RunConfig:
        config = (
            self._run_config.value
            if self._run_config is not None
            else RunConfig(tracing_disabled=True)
        )
        return dataclasses.replace(config, call_model_input_filter=gate)

    # -- messages ----------------------------------------------------------------------

    def build_user_message(self, text: str) -> FrameworkMessage:
        """A ``user`` message holding a user input item."""
        return framework_messages([user_item(text)], [None])[0]

    def build_unfinished_turn_messages(self, turn: AgentTurnContext) -> Sequence[FrameworkMessage]:
        """The turn's items so far (from the run state) and the results of its open
        calls (from their records)."""
        state = _parse_state(turn.framework_run_state)
        if state is None:
            return []
        items = self._with_outputs(turn, SourceToolListing(), state["new"])
        ids = FrameworkCallIds.session_ids(turn.tool_calls.values())
        agents = [state.get("agent")] * len(items)
        return framework_messages(items, agents, session_ids=ids)

    def _with_outputs(
        self, turn: AgentTurnContext, listing: SourceToolListing, items: Sequence[Any]
    ) -> list[dict[str, Any]]:
        """``items`` with a ``function_call_output`` (the recorded outcome) after them
        for each ``function_call`` they leave unanswered."""
        shown: list[dict[str, Any]] = list(items)
        answered = {i.get("call_id") for i in shown if i.get("type") == "function_call_output"}
        for item in list(shown):
            if item.get("type") != "function_call" or item.get("call_id") in answered:
                continue
            call_id = str(item.get("call_id"))
            output = self._recorded(turn, listing, str(item.get("name")), call_id)
            shown.append({"call_id": call_id, "output": output, "type": "function_call_output"})
        return shown

    # -- RunModel ----------------------------------------------------------------------

    async def run_model_step(self, turn: AgentTurnContext) -> AgentTurnOutcome:
        """Make at most one model call through the Agents SDK and report what it asked."""
        listing = SourceToolListing()
        if self._router.sources:
            listing = await self._router.list_for_turn(turn)
        graph = AgentGraph(
            self.agent, lambda name, call_id: self._recorded(turn, listing, name, call_id)
        )
        self._offer_extra_tools(turn, graph, listing)
        state = _parse_state(turn.framework_run_state)
        gate = _StepGate(
            self._run_config.value.call_model_input_filter if self._run_config else None
        )
        config = self._config(gate)
        context = self._context_value()
        turns = int(state.get("turns", 0)) if state is not None else 0
        if state is None:
            history = rebuild_history(turn)
            start = graph.agent(history.agent)
            base, start_name, run_input = len(history.items), start.name, history.items
        else:
            base, start_name = int(state["base"]), str(state["start"])
        try:
            if state is None:
                result = await _streamed(turn, start, run_input, config, context)
            elif state["kind"] == "run_state":
                run_state = await RunState.from_string(
                    graph.agent(start_name), state["state"], context_override=context
                )
                for item in run_state.get_interruptions():
                    run_state.approve(item)
                result = await _streamed(turn, graph.agent(start_name), run_state, config)
            else:
                agent = graph.agent(start_name).clone(input_guardrails=[])
                items = self._with_outputs(turn, listing, _state_items(turn, state))
                result = await _streamed(
                    turn, agent, items, config, context, max_turns=DEFAULT_MAX_TURNS - turns
                )
        except _StopBeforeModelCall:
            return self._continued(gate, base, turns + 1)
        except (InputGuardrailTripwireTriggered, OutputGuardrailTripwireTriggered) as tripped:
            name = tripped.guardrail_result.guardrail.get_name()
            kind = "input" if isinstance(tripped, InputGuardrailTripwireTriggered) else "output"
            return self._failed(turn, state, f"the {kind} guardrail {name} tripped")
        except MaxTurnsExceeded:
            error = f"max_turns reached: Max turns ({DEFAULT_MAX_TURNS}) exceeded"
            return self._failed(turn, state, error)
        new = jsonable(result.to_input_list())[base:]
        last = result.last_agent
        usage = _usage(result) if gate.calls else AgentUsage()
        metadata = _metadata(last, result)
        if result.interruptions:
            envelope: dict[str, Any] = {"v": _STATE_VERSION, "agent": last.name, "base": base}
            envelope["new"] = new
            resumed_run_state = state is not None and state["kind"] == "run_state"
            if resumed_run_state or not _resumes_from_items(last, config):
                envelope["kind"] = "run_state"
                envelope["start"] = start_name
                # The context is the process's own (context_override on resume),
                # never stored with the session.
                envelope["state"] = result.to_state().to_string(context_serializer=_no_context)
            else:
                envelope["kind"] = "items"
                envelope["start"] = last.name
                envelope["turns"] = turns + result.current_turn
                if state is None or "items" not in state:
                    # The run's input was the stored history: it is rebuilt from the
                    # store (unchanged until the turn ends), the state keeps ``new``.
                    envelope["from_history"] = True
                else:
                    envelope["items"] = jsonable(result.to_input_list())
            calls = await self._deferred_calls(turn, result, listing)
            return ToolCallsRequested(
                framework_run_state=json.dumps(envelope, separators=(",", ":")),
                tool_calls=calls,
                usage=usage,
                model_call_metadata=metadata,
            )
        return TurnCompleted(
            new_messages=self._final_messages(turn, new, last.name, result.final_output),
            usage=usage,
            model_call_metadata=metadata,
        )

    def _continued(self, gate: _StepGate, base: int, turns: int) -> AgentTurnOutcome:
        envelope = {
            "v": _STATE_VERSION,
            "kind": "items",
            "start": gate.next_agent,
            "agent": gate.next_agent,
            "base": base,
            "new": gate.next_items[base:],
            "items": gate.next_items,
            "turns": turns,
        }
        return TurnContinued(
            framework_run_state=json.dumps(envelope, separators=(",", ":")), new_messages=()
        )

    def _failed(
        self, turn: AgentTurnContext, state: Mapping[str, Any] | None, error: str
    ) -> AgentTurnOutcome:
        messages = list(self.build_unfinished_turn_messages(turn)) if state else []
        return TurnCompleted(new_messages=messages, turn_error=error)

    def _final_messages(
        self, turn: AgentTurnContext, new: list[dict[str, Any]], agent: str, output: Any
    ) -> list[FrameworkMessage]:
        ids = FrameworkCallIds.session_ids(turn.tool_calls.values())
        messages = framework_messages(new, [agent] * len(new), session_ids=ids)
        text = _output_text(output)
        last = next(
            (m for m in reversed(messages) if m.role is MessageRole.ASSISTANT and m.text), None
        )
        if last is None or last.text != text:
            # A final output from a tool (tool_use_behavior) has no assistant message:
            # shown as one, but never replayed to the model (display_only).
            shown = {"role": "assistant", "content": text, "type": "message"}
            encoded = json.dumps({"agent": agent, "item": shown, "display_only": True})
            messages.append(
                FrameworkMessage(role=MessageRole.ASSISTANT, framework_item=encoded, text=text)
            )
        return messages

    def _offer_extra_tools(
        self, turn: AgentTurnContext, graph: AgentGraph, listing: SourceToolListing
    ) -> None:
        extra = [
            _schema_only_tool(tool.name, tool.description, tool.input_schema)
            for _, tool in listing.tools
        ]
        extra.extend(
            _schema_only_tool(d.name.value, d.description, d.parameters_schema)
            for d in built_in_tool_definitions(turn.enabled_built_in_tools)
        )
        for _, tool in listing.replay_only_tools:
            replay = _schema_only_tool(tool.name, tool.description, tool.input_schema)

            async def answer(ctx: Any, _arguments: str) -> str:
                return FrameworkToolSourceRouter.replay_result(turn, ctx.tool_call_id)

            extra.append(dataclasses.replace(replay, on_invoke_tool=answer, needs_approval=False))
        if extra:
            for agent in graph.by_name.values():
                agent.tools = [*agent.tools, *extra]

    def _recorded(
        self, turn: AgentTurnContext, listing: SourceToolListing, name: str, call_id: str
    ) -> str:
        record = FrameworkCallIds(turn).record(call_id)
        if record is None:
            if listing.is_replay_only(name):
                return FrameworkToolSourceRouter.replay_result(turn, call_id)
            return OUTCOME_UNKNOWN_TEXT
        return describe_tool_call_outcome(record)

    async def _deferred_calls(
        self, turn: AgentTurnContext, result: Any, listing: SourceToolListing
    ) -> list[DeferredToolCall]:
        ids = FrameworkCallIds(turn)
        originals = {agent.name: agent for agent in walk_agents(self.agent)}
        calls: list[DeferredToolCall] = []
        for item in result.interruptions:
            framework_id = str(item.call_id)
            name = str(item.tool_name or item.name)
            arguments = item.arguments or "{}"
            agent_name = item.agent.name
            session_id = ids.new_session_id(framework_id)
            state = FrameworkCallIds.state(framework_id, agent=agent_name)
            if name in turn.enabled_built_in_tools:
                calls.append(
                    DeferredToolCall(
                        tool_call_id=session_id,
                        tool_name=name,
                        arguments=arguments,
                        policy=_BUILT_IN_POLICY,
                        runner_tool_state=state,
                    )
                )
                continue
            source_call = self._router.build_call(
                turn, listing, tool_call_id=session_id, tool_name=name, arguments=arguments
            )
            if source_call is not None:
                calls.append(dataclasses.replace(source_call, runner_tool_state=state))
                continue
            policy = turn.resolve_tool_policy(name)
            tool = _function_tool(originals.get(agent_name), name)
            if name not in turn.tool_policies and tool is not None:
                if await _needs_approval(tool, result.context_wrapper, arguments, framework_id):
                    policy = ToolPolicy(policy.effect, requires_approval=True)
            calls.append(
                DeferredToolCall(
                    tool_call_id=session_id,
                    tool_name=name,
                    arguments=arguments,
                    policy=policy,
                    runner_tool_state=state,
                )
            )
        return calls

    # -- tool Steps --------------------------------------------------------------------

    async def execute_deferred_tool_call(self, call: DeferredToolExecution) -> DeferredToolOutcome:
        """Run one call once: a tool source's through its source, a function tool as
        the agent that asked for it has it (``get_current_deferred_tool_execution``
        works inside)."""
        record = call.tool_call
        if FrameworkToolSourceRouter.is_source_call(record):
            return await self._router.execute_deferred_tool_call(call)
        state = FrameworkCallIds.read_state(record)
        originals = {agent.name: agent for agent in walk_agents(self.agent)}
        agent = originals.get(str(state.get("agent"))) or self.agent
        tool = _function_tool(agent, record.tool_name)
        if tool is None:
            raise ToolExecutionError(
                f"agent {agent.name!r} has no function tool {record.tool_name}"
            )
        return await run_function_tool(
            agent, tool, call, tool_call_id=str(state["id"]), context=self._context_value()
        )

    # -- compaction (ContextCompactionRunner; the rest in FrameworkRunnerBase) ----------

    async def summarize_context(self, request: ContextSummaryRequest) -> ContextSummaryResult:
        """One summary call to the starting agent's model, with no tools."""
        from agents import ModelSettings
        from agents.models.interface import ModelTracing

        config = self._run_config.value if self._run_config is not None else RunConfig()
        model = self.agent.model
        if model is None or isinstance(model, str):
            model = config.model_provider.get_model(model)
        response = await model.get_response(
            system_instructions=CONTEXT_SUMMARY_INSTRUCTIONS,
            input=build_context_summary_prompt(request),
            model_settings=ModelSettings(),
            tools=[],
            output_schema=None,
            handoffs=[],
            tracing=ModelTracing.DISABLED,
            previous_response_id=None,
            conversation_id=None,
            prompt=None,
        )
        texts = [
            part.text
            for item in response.output
            for part in getattr(item, "content", None) or ()
            if getattr(part, "type", None) == "output_text"
        ]
        usage = response.usage
        return ContextSummaryResult(
            text="".join(texts),
            usage=AgentUsage(
                input_tokens=usage.input_tokens, output_tokens=usage.output_tokens, model_calls=1
            ),
            model_call_metadata=ModelCallMetadata(
                request_model=_model_name(self.agent), response_id=response.response_id
            ),
        )


_TEXT_DELTA = "response.output_text.delta"
_REASONING_DELTAS = ("response.reasoning_summary_text.delta", "response.reasoning_text.delta")


async def _streamed(
    turn: AgentTurnContext,
    agent: Agent[Any],
    run_input: Any,
    config: RunConfig,
    context: Any = None,
    *,
    max_turns: int = DEFAULT_MAX_TURNS,
) -> Any:
    """``Runner.run_streamed``, its text and reasoning deltas written to the turn's
    events; the finished result (the run's exceptions are raised here)."""
    if isinstance(run_input, RunState):
        streamed = Runner.run_streamed(agent, run_input, run_config=config)
    else:
        streamed = Runner.run_streamed(
            agent, cast(Any, run_input), run_config=config, context=context, max_turns=max_turns
        )
    async for event in streamed.stream_events():
        if event.type != "raw_response_event":
            continue
        data: Any = event.data
        kind = getattr(data, "type", None)
        if kind == _TEXT_DELTA:
            turn.events.write_text_delta(str(data.delta))
        elif kind in _REASONING_DELTAS:
            turn.events.write_reasoning_delta(str(data.delta))
    return streamed


def _state_items(turn: AgentTurnContext, state: Mapping[str, Any]) -> list[Any]:
    """The input items an ``"items"`` run state goes on from: its own, or the
    turn's stored history followed by the turn's new items (``from_history``)."""
    if state.get("from_history"):
        return [*rebuild_history(turn).items, *state["new"]]
    return list(state["items"])


def _resumes_from_items(agent: Agent[Any], config: RunConfig) -> bool:
    """Whether a new run of ``agent`` from the turn's items and the tools' outputs
    makes the model call the paused run would make next (see the module)."""
    settings = agent.model_settings
    if config.model_settings is not None:
        settings = settings.resolve(config.model_settings)
    return (
        agent.tool_use_behavior == "run_llm_again"
        and agent.hooks is None
        and (settings.tool_choice is None or not agent.reset_tool_choice)
    )


def _no_context(_context: Any) -> dict[str, Any]:
    return {}


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    if hasattr(output, "model_dump_json"):
        return str(output.model_dump_json())
    try:
        return json.dumps(output)
    except TypeError:
        return str(output)


def _function_tool(agent: Agent[Any] | None, name: str) -> FunctionTool | None:
    if agent is None:
        return None
    return next((t for t in agent.tools if isinstance(t, FunctionTool) and t.name == name), None)


async def _needs_approval(tool: FunctionTool, context: Any, arguments: str, call_id: str) -> bool:
    """The tool's own ``needs_approval`` for this call (a callable is evaluated here,
    in ``RunModel``, once per call)."""
    rule = tool.needs_approval
    if isinstance(rule, bool):
        return rule
    try:
        params = json.loads(arguments or "{}")
    except ValueError:
        params = {}
    decided: Any = rule(context, params, call_id)
    if inspect.isawaitable(decided):
        decided = await decided
    return bool(decided)


def _parse_state(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as error:
        raise ValueError("unreadable OpenAI Agents run state") from error
    if not isinstance(value, dict) or value.get("v") != _STATE_VERSION:
        raise ValueError(f"unsupported OpenAI Agents run state version {value.get('v')!r}")
    return value
