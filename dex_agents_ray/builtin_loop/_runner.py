"""``BuiltinLoopAgentRunner``: the built-in loop as a runner of the session contract.

Each ``run_model_step`` makes at most one model call from committed state
only, and stores the turn's items as they appear
(``ToolCallsRequested.new_messages``): the previous round's tool results and
the new model output. ``FrameworkRunState`` therefore holds only
``{"model_calls": <n>}``, plus ``"consecutive_continuations": <n>`` after a
continued answer.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dex_agents_ray.builtin_loop._definition import (
    MAX_CONSECUTIVE_TURN_CONTINUATIONS,
    TURN_CONTINUATION_LIMIT_ERROR,
    AgentDefinition,
    ContinueTurn,
    InstructionContext,
    TurnContinuation,
    TurnContinuationContext,
    built_in_name_collision,
    model_call_limit_result,
)
from dex_agents_ray.builtin_loop._function_tool import (
    FunctionTool,
    FunctionToolResult,
    ToolCallContext,
)
from dex_agents_ray.builtin_loop._items import decode_item, item_message
from dex_agents_ray.builtin_loop._model import (
    ModelClient,
    ModelOutputItem,
    ModelRequest,
    ModelResponse,
    ModelToolCall,
    ModelToolDefinition,
    ModelUsage,
    ToolChoice,
    ToolResultItem,
    UserTextItem,
)
from dex_agents_ray.builtin_loop._tool_source import SourceToolListing, ToolSourceRouter
from dex_agents_ray.builtin_loop._transcript import Transcript, build_transcript, without_images
from dex_agents_ray.media import (
    AgentImageReference,
    MediaStore,
    load_images,
    validate_image_references,
)
from dex_agents_ray.session import (
    CONTEXT_SUMMARY_INSTRUCTIONS,
    CONTEXT_SUMMARY_NOTE_HEADER,
    AgentMessage,
    AgentToolCall,
    AgentTurnContext,
    AgentTurnOutcome,
    AgentUsage,
    BuiltInTool,
    ContextSummaryRequest,
    ContextSummaryResult,
    DeferredToolCall,
    DeferredToolExecution,
    DeferredToolOutcome,
    FrameworkMessage,
    InteractionMode,
    PlanStatus,
    ToolCallsRequested,
    ToolCallStepOptions,
    ToolEffect,
    ToolExecutionError,
    ToolExecutionResult,
    ToolInputRequested,
    ToolPolicy,
    ToolTaskCancellation,
    ToolTaskPoll,
    ToolTaskPollOutcome,
    TurnCompleted,
    TurnContinued,
    build_context_summary_prompt,
    build_plan_note,
    built_in_tool_definitions,
    estimate_text_tokens,
)

__all__ = ["BuiltinLoopAgentRunner"]

_BUILT_IN_POLICY = ToolPolicy(ToolEffect.READ, requires_approval=False)
_UNKNOWN_TOOL_POLICY = ToolPolicy(ToolEffect.UNCLASSIFIED, requires_approval=False)


@dataclass(frozen=True)
class _RunState:
    model_calls: int = 0
    consecutive_continuations: int = 0

    @staticmethod
    def parse(text: str | None) -> _RunState:
        if text is None:
            return _RunState()
        try:
            value = json.loads(text)
            calls = value["model_calls"]
            continuations = value.get("consecutive_continuations", 0)
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise ValueError(f"unreadable built-in loop run state {text!r}") from error
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in (calls, continuations)):
            raise ValueError(f"unreadable built-in loop run state {text!r}")
        return _RunState(calls, continuations)

    def dump(self) -> str:
        value = {"model_calls": self.model_calls}
        if self.consecutive_continuations:
            value["consecutive_continuations"] = self.consecutive_continuations
        return json.dumps(value, separators=(",", ":"))


@dataclass
class _Offer:
    tools: list[ModelToolDefinition]
    listing: SourceToolListing
    tool_choice: ToolChoice = ToolChoice.AUTO


def _built_in_definitions(turn: AgentTurnContext) -> list[ModelToolDefinition]:
    """The turn's enabled built-in tools as model tool definitions."""
    return [
        ModelToolDefinition(
            name=definition.name.value,
            description=definition.description,
            parameters_schema=definition.parameters_schema,
        )
        for definition in built_in_tool_definitions(turn.enabled_built_in_tools)
    ]


def _planning_tools(built_ins: list[ModelToolDefinition]) -> list[ModelToolDefinition]:
    """A planning turn offers only ``write_todos``."""
    return [tool for tool in built_ins if tool.name == BuiltInTool.WRITE_TODOS]


def _agent_usage(usage: ModelUsage, model_calls: int = 1) -> AgentUsage:
    return AgentUsage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cached_input_tokens=usage.cached_input_tokens,
        reasoning_tokens=usage.reasoning_tokens,
        model_calls=model_calls,
    )


def _json_default(value: object) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, enum.Enum):
        return value.value
    raise TypeError(f"a tool result of type {type(value).__name__} is not JSON serializable")


class BuiltinLoopAgentRunner:
    """Runs an :class:`AgentDefinition` under the session's runner contract.

    Implements ``AgentFrameworkRunner[DeferredToolOutcome]``,
    ``UnfinishedTurnMessageBuilder``, ``ToolTaskPoller``,
    ``ToolTaskCanceller`` and ``ToolCallStepOptionsProvider``; with a
    ``media_store`` also ``ImageUserMessageBuilder`` (without one, the
    session refuses images). Stateless between calls apart from the last
    listing of each tool source, which only token estimates read.

    Example::

        runner = BuiltinLoopAgentRunner(support_agent, media_store=store)
        flow = AgentSessionFlow(runner, flow_type="SupportAgent",
                                options=builtin_agent_session_options(support_agent))

    Args:
        definition: The agent.
        media_store: Where images live; ``None`` shows the model text only and
            fails function tools that return images.
    """

    def __init__(
        self, definition: AgentDefinition, *, media_store: MediaStore | None = None
    ) -> None:
        if not isinstance(definition, AgentDefinition):
            raise TypeError("BuiltinLoopAgentRunner needs an AgentDefinition")
        self.definition = definition
        self.media_store = media_store
        self._function_tools = dict(definition.function_tools)
        self._router = ToolSourceRouter(definition.tool_sources)
        if media_store is not None:
            # Only a runner with a store is an ImageUserMessageBuilder: the session
            # checks for the method, and refuses images without it.
            self.build_user_message_with_images = self._build_user_message_with_images

    build_user_message_with_images: Callable[[str, Sequence[AgentImageReference]], FrameworkMessage]
    """A ``user`` message with images (``ImageUserMessageBuilder``); only a runner
    with a media store has it."""

    def __repr__(self) -> str:
        return f"BuiltinLoopAgentRunner({self.definition.name!r})"

    @property
    def supports_plan_mode(self) -> bool:
        """The built-in loop offers only ``write_todos`` in a planning turn."""
        return True

    # -- messages -------------------------------------------------------------------------

    def build_user_message(self, text: str) -> FrameworkMessage:
        """A ``user`` message storing a ``user_text`` item."""
        return item_message(UserTextItem(text=text))

    def _build_user_message_with_images(
        self, text: str, images: Sequence[AgentImageReference]
    ) -> FrameworkMessage:
        return item_message(UserTextItem(text=text, images=images))

    def build_unfinished_turn_messages(self, turn: AgentTurnContext) -> Sequence[FrameworkMessage]:
        """The results of the turn's last tool calls that are not stored yet."""
        if not turn.is_resuming:
            return []
        return [item_message(result) for result in build_transcript(turn).new_results]

    # -- compaction (ContextCompactionRunner) -------------------------------------------

    async def estimate_input_tokens(self, turn: AgentTurnContext) -> int:
        """The model client's estimate of the turn's next request: the instructions,
        the summary and plan notes, every stored item and the tools it offers.
        Tool sources are not listed for it (no I/O): each counts its
        ``cached_tools()``, or else the runner's last listing of it."""
        transcript = build_transcript(turn)
        if turn.interaction_mode is InteractionMode.PLANNING:
            tools = _planning_tools(_built_in_definitions(turn))
        else:
            functions = [tool.definition() for tool in self._function_tools.values()]
            sources = self._router.cached_tool_definitions()
            tools = functions + sources + _built_in_definitions(turn)
        request = ModelRequest(
            instructions=await self._instructions(turn),
            input=without_images(_model_input(turn, transcript)),
            tools=tools,
            settings=self.definition.model_settings,
        )
        estimate = self._model(turn).estimate_input_tokens(request)
        if isinstance(estimate, bool) or not isinstance(estimate, int):
            raise TypeError("ModelClient.estimate_input_tokens must return an int")
        return estimate

    def select_compaction_cutoff(
        self, turn: AgentTurnContext, retained_token_budget: int
    ) -> int | None:
        """The earliest cut whose later messages fit ``retained_token_budget``
        (``estimate_text_tokens`` of each stored item), cutting only between model
        responses whose tool calls all have stored results; ``None`` without one."""
        return select_whole_group_cutoff(turn.messages, retained_token_budget)

    async def summarize_context(self, request: ContextSummaryRequest) -> ContextSummaryResult:
        """One summary call: ``CONTEXT_SUMMARY_INSTRUCTIONS``, no tools, the previous
        summary and the messages as one prompt that fits the budget (less the
        definition's ``max_output_tokens`` and the instructions, so the whole
        request and its answer fit the window)."""
        settings = self.definition.model_settings
        budget = (
            request.input_token_budget
            - (settings.max_output_tokens or 0)
            - estimate_text_tokens(CONTEXT_SUMMARY_INSTRUCTIONS + "\n")
        )
        try:
            prompt = build_context_summary_prompt(
                dataclasses.replace(request, input_token_budget=max(budget, 1))
            )
        except ValueError as error:
            raise ValueError(
                f"a context window of {request.input_token_budget} tokens leaves {budget} "
                "for the summary prompt after max_output_tokens and the summary "
                f"instructions: {error}"
            ) from error
        model = self._model_for(request.session_settings)
        summary_request = ModelRequest(
            instructions=CONTEXT_SUMMARY_INSTRUCTIONS,
            input=[UserTextItem(text=prompt)],
            settings=settings,
        )
        events: Any = request.events if request.events is not None else _SilentOutput()
        response = await model.call_model(summary_request, events)
        if not isinstance(response, ModelResponse):
            raise TypeError(f"the model client returned {type(response).__name__}")
        return ContextSummaryResult(
            text=response.text,
            usage=_agent_usage(response.usage),
            model_call_metadata=response.model_call_metadata,
        )

    # -- RunModel -------------------------------------------------------------------------

    async def run_model_step(self, turn: AgentTurnContext) -> AgentTurnOutcome:
        """Make at most one model call and report what it asked for."""
        self._check_built_in_names(turn)
        state = _RunState.parse(turn.framework_run_state)
        transcript = build_transcript(turn)
        new_messages = [item_message(result) for result in transcript.new_results]
        continuations = state.consecutive_continuations
        if transcript.new_results:
            continuations = 0
            decision = await self._decide(turn, transcript.previous_output, transcript.new_results)
            if decision == "end":
                return TurnCompleted(new_messages=new_messages, usage=AgentUsage())
            if isinstance(decision, ContinueTurn):
                note = UserTextItem(text=decision.message)
                transcript.items.append(note)
                new_messages.append(item_message(note))
        limit = self.definition.max_model_calls_per_turn
        limit_reached = state.model_calls >= limit
        offer = await self._offer(turn, state, limit_reached)
        response = await self._call_model(turn, _model_input(turn, transcript), offer)
        model_calls = state.model_calls + 1
        usage = _agent_usage(response.usage)
        metadata = response.model_call_metadata
        new_messages.extend(item_message(item) for item in response.output)
        calls = response.tool_calls
        if calls and limit_reached:
            new_messages.extend(
                item_message(
                    ToolResultItem(
                        tool_call_id=call.tool_call_id,
                        tool_name=call.tool_name,
                        output=model_call_limit_result(limit),
                    )
                )
                for call in calls
            )
            return TurnCompleted(
                new_messages=new_messages, usage=usage, model_call_metadata=metadata
            )
        if calls:
            return ToolCallsRequested(
                framework_run_state=_RunState(model_calls).dump(),
                tool_calls=[self._defer(turn, call, offer.listing) for call in calls],
                usage=usage,
                new_messages=new_messages,
                model_call_metadata=metadata,
            )
        decision = await self._decide(turn, response.output, ())
        if not isinstance(decision, ContinueTurn):
            return TurnCompleted(
                new_messages=new_messages, usage=usage, model_call_metadata=metadata
            )
        if continuations >= MAX_CONSECUTIVE_TURN_CONTINUATIONS:
            return TurnCompleted(
                new_messages=new_messages,
                usage=usage,
                turn_error=TURN_CONTINUATION_LIMIT_ERROR,
                model_call_metadata=metadata,
            )
        new_messages.append(item_message(UserTextItem(text=decision.message)))
        return TurnContinued(
            framework_run_state=_RunState(model_calls, continuations + 1).dump(),
            new_messages=new_messages,
            usage=usage,
            model_call_metadata=metadata,
        )

    def _check_built_in_names(self, turn: AgentTurnContext) -> None:
        for name in self._function_tools:
            if name in turn.enabled_built_in_tools:
                raise ValueError(built_in_name_collision(name))

    def _model(self, turn: AgentTurnContext) -> ModelClient:
        return self._model_for(turn.session_settings)

    def _model_for(self, session_settings: Mapping[str, Any]) -> ModelClient:
        resolve = self.definition.resolve_model
        if resolve is None:
            return self.definition.model
        model = resolve(session_settings)
        if not callable(getattr(model, "call_model", None)):
            raise TypeError(f"AgentDefinition.resolve_model returned {type(model).__name__}")
        return model

    async def _instructions(self, turn: AgentTurnContext) -> str:
        instructions = self.definition.instructions
        if isinstance(instructions, str):
            return instructions
        context = InstructionContext(
            flow_id=turn.flow_id,
            turn_id=turn.turn_id,
            attempt=turn.attempt,
            session_settings=turn.session_settings,
            interaction_mode=turn.interaction_mode,
            plan=turn.plan,
        )
        result = instructions(context)
        text = await result if inspect.isawaitable(result) else result
        if not isinstance(text, str):
            raise TypeError(f"AgentDefinition.instructions returned {type(text).__name__}, not str")
        return text

    async def _offer(self, turn: AgentTurnContext, state: _RunState, limit_reached: bool) -> _Offer:
        if limit_reached:
            return _Offer(tools=[], listing=SourceToolListing())
        built_ins = _built_in_definitions(turn)
        if turn.interaction_mode is InteractionMode.PLANNING:
            todos = _planning_tools(built_ins)
            forced = (
                bool(todos)
                and self.definition.planning_tool_choice == "required"
                and state.model_calls == 0
                and (turn.plan is None or turn.plan.status is not PlanStatus.DRAFT)
            )
            choice = ToolChoice.REQUIRED if forced else ToolChoice.AUTO
            return _Offer(tools=todos, listing=SourceToolListing(), tool_choice=choice)
        listing = SourceToolListing()
        if self._router.sources:
            listing = await self._router.list_tools(self.definition.tool_source_listing_timeout)
        for _, tool in listing.tools:
            if tool.name in turn.enabled_built_in_tools:
                raise ValueError(built_in_name_collision(tool.name))
            if tool.name in self._function_tools:
                raise ValueError(
                    f"tool {tool.name} of a tool source uses the name of a function tool"
                )
        functions = [tool.definition() for tool in self._function_tools.values()]
        return _Offer(tools=functions + listing.definitions() + built_ins, listing=listing)

    async def _call_model(
        self, turn: AgentTurnContext, items: list[Any], offer: _Offer
    ) -> ModelResponse:
        model = self._model(turn)
        if self.media_store is None:
            items = without_images(items)
        request = ModelRequest(
            instructions=await self._instructions(turn),
            input=items,
            tools=offer.tools,
            tool_choice=offer.tool_choice,
            settings=self.definition.model_settings,
        )
        if self.media_store is not None and request.images():
            image_bytes = await load_images(self.media_store, request.images())
            request = dataclasses.replace(request, image_bytes=image_bytes)
        response = await model.call_model(request, turn.events)
        if not isinstance(response, ModelResponse):
            raise TypeError(f"the model client returned {type(response).__name__}")
        return response

    async def _decide(
        self,
        turn: AgentTurnContext,
        model_output: Sequence[ModelOutputItem],
        tool_results: Sequence[ToolResultItem],
    ) -> TurnContinuation:
        decide = self.definition.decide_turn_continuation
        if decide is None:
            return "default"
        context = TurnContinuationContext(
            flow_id=turn.flow_id,
            turn_id=turn.turn_id,
            session_settings=turn.session_settings,
            model_output=tuple(model_output),
            tool_results=tuple(tool_results),
        )
        result = decide(context)
        decision = await result if inspect.isawaitable(result) else result
        if isinstance(decision, ContinueTurn):
            if not decision.message.strip():
                raise ValueError("decide_turn_continuation returned a blank ContinueTurn")
            return decision
        if isinstance(decision, str) and decision in ("end", "default"):
            return "end" if decision == "end" else "default"
        raise TypeError(
            f"decide_turn_continuation returned {decision!r}; "
            "expected 'end', 'default' or ContinueTurn"
        )

    def _defer(
        self, turn: AgentTurnContext, call: ModelToolCall, listing: SourceToolListing
    ) -> DeferredToolCall:
        name = call.tool_name
        policy = _UNKNOWN_TOOL_POLICY
        if name in turn.enabled_built_in_tools:
            policy = _BUILT_IN_POLICY
        elif name in self._function_tools:
            policy = (
                turn.tool_policies.get(name)
                or self.definition.tool_policies.get(name)
                or self._function_tools[name].policy
            )
        elif (offered := listing.find(name)) is not None:
            source, tool = offered
            return self._router.deferred_tool_call(
                turn, source, tool, tool_call_id=call.tool_call_id, arguments=call.arguments
            )
        return DeferredToolCall(
            tool_call_id=call.tool_call_id, tool_name=name, arguments=call.arguments, policy=policy
        )

    # -- tool Steps -----------------------------------------------------------------------

    async def execute_deferred_tool_call(self, call: DeferredToolExecution) -> DeferredToolOutcome:
        """Run one function tool or tool source call once.

        Raises:
            ToolExecutionError: The tool is unknown, its arguments are invalid,
                it raised one, or it returned images without a media store.
            LookupError: The call's tool source is not in this agent.
            ImageValidationError: It returned more than ``MAX_IMAGES_PER_MESSAGE``
                images or an invalid reference.
        """
        record = call.tool_call
        if ToolSourceRouter.is_source_call(record):
            return await self._router.execute_deferred_tool_call(call)
        tool = self._function_tools.get(record.tool_name)
        if tool is None:
            raise ToolExecutionError(f"unknown tool {record.tool_name}")
        context = ToolCallContext(
            flow_id=call.flow_id,
            turn_id=record.turn_id,
            tool_call_id=record.tool_call_id,
            tool_name=record.tool_name,
            idempotency_key=call.idempotency_key,
            attempt=call.attempt,
            effect=record.effect,
            events=call.events,
            heartbeat=call.heartbeat,
            input_answers=tuple(call.input_answers),
            input_continuation=record.input_continuation,
            media_store=self.media_store,
        )
        return self._function_outcome(tool, await tool.invoke(record.arguments, context))

    def _function_outcome(
        self, tool: FunctionTool[..., Any], result: object
    ) -> DeferredToolOutcome:
        if isinstance(result, ToolInputRequested):
            return result
        if isinstance(result, FunctionToolResult):
            if result.images:
                if self.media_store is None:
                    raise ToolExecutionError(
                        f"tool {tool.name} returned images, but the agent's runner has no "
                        "media store to show them"
                    )
                validate_image_references(list(result.images))
            return ToolExecutionResult(output=result.output, images=tuple(result.images))
        if isinstance(result, str):
            return ToolExecutionResult(output=result)
        return ToolExecutionResult(output=json.dumps(result, default=_json_default))

    async def poll_tool_task(self, poll: ToolTaskPoll) -> ToolTaskPollOutcome:
        """Poll a tool source call's task through its source.

        Raises:
            LookupError: The call was not made by a tool source of this agent.
        """
        return await self._router.poll_tool_task(poll)

    async def cancel_tool_task(self, cancellation: ToolTaskCancellation) -> None:
        """Ask the call's tool source to stop its task, when the source can."""
        if ToolSourceRouter.is_source_call(cancellation.tool_call):
            await self._router.cancel_tool_task(cancellation)

    def tool_call_step_options(self, tool_call: AgentToolCall) -> ToolCallStepOptions | None:
        """A function tool's ``step_options``, or a source call's from its source."""
        if not ToolSourceRouter.is_source_call(tool_call):
            tool = self._function_tools.get(tool_call.tool_name)
            return tool.step_options if tool is not None else None
        try:
            return self._router.tool_call_step_options(tool_call)
        except LookupError:
            return None


def _model_input(turn: AgentTurnContext, transcript: Transcript) -> list[Any]:
    """The model input: the summary note first once the session has a summary, and
    the plan note (``build_plan_note``) as user text before the turn's own items
    while a plan exists or the turn plans; neither is stored."""
    items = list(transcript.items)
    note = build_plan_note(turn.plan, turn.interaction_mode)
    if note is not None:
        start = len(items) if transcript.turn_start is None else transcript.turn_start
        items.insert(start, UserTextItem(text=note))
    summary = turn.context_summary
    if summary is not None:
        items.insert(0, UserTextItem(text=f"{CONTEXT_SUMMARY_NOTE_HEADER}\n{summary.text}"))
    return items


class _SilentOutput:
    """A ``ModelOutputWriter`` that drops live output (a summary call without events)."""

    def write_text_delta(self, text: str) -> None:
        pass

    def write_reasoning_delta(self, text: str) -> None:
        pass


def select_whole_group_cutoff(messages: Sequence[AgentMessage], budget: int) -> int | None:
    """The sequence of the earliest message after which the rest fits ``budget``
    tokens, where a cut never separates a tool call from its stored result nor
    splits one model response; the last such cut when none fits; ``None`` when
    there is no cut at all."""
    items = [(m, _decoded(m)) for m in messages]
    remaining = sum(estimate_text_tokens(m.framework_item) for m in messages)
    pending: set[str] = set()
    last_cut: int | None = None
    for index, (message, item) in enumerate(items):
        remaining -= estimate_text_tokens(message.framework_item)
        if isinstance(item, ModelOutputItem):
            pending.update(call.tool_call_id for call in item.tool_calls)
        elif isinstance(item, ToolResultItem):
            pending.discard(item.tool_call_id)
        following = items[index + 1][1] if index + 1 < len(items) else None
        splits_response = isinstance(item, ModelOutputItem) and isinstance(
            following, ModelOutputItem
        )
        if pending or splits_response or following is None:
            continue
        last_cut = message.sequence
        if remaining <= budget:
            return last_cut
    return last_cut


def _decoded(message: AgentMessage) -> Any:
    try:
        return decode_item(message.framework_item)
    except ValueError:
        return None
