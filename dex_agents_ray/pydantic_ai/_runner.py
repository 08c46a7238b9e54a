"""``PydanticAIRunner``: an unchanged ``pydantic_ai.Agent`` under the session contract.

One ``run_model_step`` is one Pydantic AI run that makes one model request
with the framework's own machinery (messages, instructions, output
validation) and stops: with ``DeferredToolRequests`` when the model asked for
tools (every tool call becomes a tool Step), with the output when it answered,
or before a second request the framework would make (``TurnContinued``).
Messages are stored as they appear (``ToolCallsRequested.new_messages``); the
run state is Pydantic AI's serialized history of what the next call continues
from.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
from pydantic_ai import messages as pai
from pydantic_ai.models.function import FunctionModel
from pydantic_core import to_json

from dex_agents_ray.builtin_loop import (
    MAX_CONSECUTIVE_TURN_CONTINUATIONS,
    TURN_CONTINUATION_LIMIT_ERROR,
    FrameworkCallIds,
    FrameworkRunnerBase,
    FrameworkToolSourceRouter,
    FrameworkTraveller,
    PerProcessValue,
    SourceToolListing,
    ToolSource,
)
from dex_agents_ray.media import AgentImageReference, MediaStore, load_images
from dex_agents_ray.pydantic_ai._messages import (
    encode_messages,
    framework_messages,
    rebuild_history,
    record_result,
    user_message,
)
from dex_agents_ray.pydantic_ai._tools import (
    DeferToolSteps,
    ToolStepsRequested,
    framework_effect,
    run_tool_call,
    schema_only_toolset,
)
from dex_agents_ray.session import (
    CONTEXT_SUMMARY_INSTRUCTIONS,
    AgentTurnContext,
    AgentTurnOutcome,
    AgentUsage,
    ContextSummaryRequest,
    ContextSummaryResult,
    DeferredToolCall,
    DeferredToolExecution,
    DeferredToolOutcome,
    FrameworkMessage,
    ModelCallMetadata,
    ToolCallsRequested,
    ToolEffect,
    ToolPolicy,
    TurnCompleted,
    TurnContinued,
    build_context_summary_prompt,
    built_in_tool_definitions,
)

__all__ = ["PydanticAIRunner"]

_BUILT_IN_POLICY = ToolPolicy(ToolEffect.READ, requires_approval=False)
_CONTINUATIONS_KEY = "dex_consecutive_continuations"


def _usage(usage: Any) -> AgentUsage:
    details = getattr(usage, "details", None) or {}
    return AgentUsage(
        input_tokens=usage.input_tokens or 0,
        output_tokens=usage.output_tokens or 0,
        cached_input_tokens=getattr(usage, "cache_read_tokens", 0) or 0,
        reasoning_tokens=int(details.get("reasoning_tokens", 0) or 0),
        model_calls=getattr(usage, "requests", 1) or 1,
    )


def _metadata(response: pai.ModelResponse | None, request_model: str | None) -> ModelCallMetadata:
    if response is None:
        return ModelCallMetadata(request_model=request_model)
    return ModelCallMetadata(
        request_model=request_model,
        response_model=response.model_name,
        provider_name=response.provider_name,
        response_id=response.provider_response_id,
        finish_reasons=[response.finish_reason] if response.finish_reason else None,
    )


class PydanticAIRunner(FrameworkRunnerBase):
    """Runs an unchanged ``pydantic_ai.Agent`` as durable session turns.

    Implements ``AgentFrameworkRunner[DeferredToolOutcome]``,
    ``UnfinishedTurnMessageBuilder``, ``ContextCompactionRunner``,
    ``ToolTaskPoller``, ``ToolTaskCanceller`` and ``ToolCallStepOptionsProvider``
    (the last three for ``tool_sources``); with a ``media_store`` also
    ``ImageUserMessageBuilder``.

    The agent travels to the Ray processes that run the Steps: by reference when
    an importable module holds it, else by value without its process-local state
    (see ``dex_agents_ray.pydantic_ai``).

    Example::

        agent = Agent("openai:gpt-5-mini", instructions="Help with orders.")

        @agent.tool_plain
        def lookup_order(order_id: str) -> str: ...

        flow = pydantic_ai_session_flow(agent, flow_type="SupportAgent")

    Args:
        agent: The agent, unchanged.
        tool_sources: Tool sources (``McpToolSource``, ``ConnectorToolSource``)
            whose tools the model is offered beside the agent's own.
        media_store: Where images live; ``None`` refuses images.
        deps: The agent's ``deps`` for every run; it must pickle.
        deps_factory: Builds ``deps`` once per process instead (for deps that
            hold connections).

    Raises:
        TypeError: ``agent`` is not a ``pydantic_ai.Agent``, or it (or ``deps``)
            cannot travel (``AgentTravelError`` names the attribute).
        ValueError: Both ``deps`` and ``deps_factory``, or the agent has native
            (provider-side) tools, which cannot run as tool Steps.
    """

    def __init__(
        self,
        agent: Agent[Any, Any],
        *,
        tool_sources: Iterable[ToolSource] = (),
        media_store: MediaStore | None = None,
        deps: Any = None,
        deps_factory: Callable[[], Any] | None = None,
    ) -> None:
        if not isinstance(agent, Agent):
            raise TypeError(
                f"PydanticAIRunner needs a pydantic_ai.Agent, got {type(agent).__name__}"
            )
        # An optional native tool (the tool search Pydantic AI adds on its own) is
        # dropped where the provider lacks it; only a required one is refused.
        native = [
            tool
            for tool in agent.root_capability.get_native_tools()
            if not getattr(tool, "optional", False)
        ]
        if native:
            names = ", ".join(sorted(type(tool).__name__ for tool in native))
            raise ValueError(
                f"the agent has native (provider-side) tools that cannot run as tool Steps: "
                f"{names}; remove them or offer the same tool as a function tool"
            )
        self._agent = FrameworkTraveller(agent, what="the agent")
        self._deps = PerProcessValue(deps, deps_factory, what="deps")
        self._router = FrameworkToolSourceRouter(tool_sources)
        self.media_store = media_store
        if media_store is not None:
            self.build_user_message_with_images = self._build_user_message_with_images

    build_user_message_with_images: Callable[[str, Sequence[AgentImageReference]], FrameworkMessage]
    """A ``user`` message with images (``ImageUserMessageBuilder``); only a runner
    with a media store has it."""

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("build_user_message_with_images", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self.media_store is not None:
            self.build_user_message_with_images = self._build_user_message_with_images

    def __repr__(self) -> str:
        return f"PydanticAIRunner({self.agent.name or 'agent'!r})"

    @property
    def agent(self) -> Agent[Any, Any]:
        """The agent (in a Ray process, its copy there)."""
        agent: Agent[Any, Any] = self._agent.value
        return agent

    def _deps_value(self) -> Any:
        return self._deps.get()

    # -- messages ----------------------------------------------------------------------

    def build_user_message(self, text: str) -> FrameworkMessage:
        """A ``user`` message holding Pydantic AI's user prompt request."""
        return user_message(text, text)

    def _build_user_message_with_images(
        self, text: str, images: Sequence[AgentImageReference]
    ) -> FrameworkMessage:
        message = user_message(text, text)
        return replace(message, images=tuple(images))

    def build_unfinished_turn_messages(self, turn: AgentTurnContext) -> Sequence[FrameworkMessage]:
        """The results of the turn's open tool calls, from their records."""
        if not turn.is_resuming:
            return []
        history = rebuild_history(turn)
        if not history.open_calls:
            return []
        returns = [
            _return_part(
                call, record_result(FrameworkCallIds(turn).record(call.tool_call_id), call)
            )
            for call in history.open_calls
        ]
        ids = FrameworkCallIds.session_ids(turn.tool_calls.values())
        return framework_messages([pai.ModelRequest(parts=returns)], session_ids=ids)

    # -- RunModel ----------------------------------------------------------------------

    async def run_model_step(self, turn: AgentTurnContext) -> AgentTurnOutcome:
        """Make at most one model request through the agent and report what it asked."""
        agent = self.agent
        image_bytes = await self._image_bytes(turn)
        history = rebuild_history(turn, image_bytes)
        listing = SourceToolListing()
        if self._router.sources:
            listing = await self._router.list_for_turn(turn)
        capability = DeferToolSteps(replay=self._replayer(turn, listing))
        toolsets = self._offered_toolsets(turn, listing)
        user_prompt: Any = None
        message_history = history.messages
        results: DeferredToolResults | None = None
        if history.open_calls:
            results = DeferredToolResults(
                calls={
                    call.tool_call_id: self._open_call_result(turn, listing, call, image_bytes)
                    for call in history.open_calls
                }
            )
        elif history.turn_prompt is not None and _single_prompt(history.turn_prompt):
            message_history = history.messages[:-1]
            user_prompt = _prompt_content(history.turn_prompt)
        continuations = _continuations(turn.framework_run_state)
        ran = await self._one_request(
            turn,
            agent.iter(
                user_prompt,
                message_history=message_history,
                deferred_tool_results=results,
                deps=self._deps_value(),
                toolsets=toolsets,
                capabilities=[capability],
            ),
        )
        node, new, usage, requested, deferred = ran
        system_parts: list[pai.SystemPromptPart] = []
        if user_prompt is not None and new and isinstance(new[0], pai.ModelRequest):
            system_parts = [p for p in new[0].parts if isinstance(p, pai.SystemPromptPart)]
            new = new[1:]
        response = next((m for m in reversed(new) if isinstance(m, pai.ModelResponse)), None)
        metadata = _metadata(response, _model_name(agent))
        if not requested:
            usage = AgentUsage()
        output: Any = node.data.output if deferred is None and Agent.is_end_node(node) else None
        if isinstance(output, DeferredToolRequests):  # the agent's own deferred tools
            deferred = output
        ids = FrameworkCallIds.session_ids(turn.tool_calls.values())
        if deferred is not None:
            assert response is not None
            calls = self._deferred_calls(turn, response, deferred, capability, listing)
            stored = framework_messages(
                new,
                system_parts=system_parts,
                session_ids=ids,
                response_ids=FrameworkCallIds.session_ids(calls),
            )
            return ToolCallsRequested(
                framework_run_state=encode_messages([response]),
                tool_calls=calls,
                usage=usage,
                new_messages=stored,
                model_call_metadata=metadata,
            )
        if not Agent.is_end_node(node):
            stored = framework_messages(
                [*new, node.request], system_parts=system_parts, session_ids=ids
            )
            return self._continued(node, stored, usage, metadata, continuations)
        final_text = output if isinstance(output, str) else to_json(output).decode()
        return TurnCompleted(
            new_messages=framework_messages(
                new, system_parts=system_parts, final_text=final_text, session_ids=ids
            ),
            usage=usage,
            model_call_metadata=metadata,
        )

    async def _one_request(
        self, turn: AgentTurnContext, iteration: Any
    ) -> tuple[Any, list[pai.ModelMessage], AgentUsage, bool, DeferredToolRequests | None]:
        """Drive one ``agent.iter`` run through at most one model request: the node it
        stopped at, its new messages, its usage, whether it made the request, and
        the calls it deferred (``None`` when it deferred none)."""
        deferred: DeferredToolRequests | None = None
        async with iteration as run:
            node: Any = run.next_node
            requested = False
            try:
                while not Agent.is_end_node(node):
                    if Agent.is_model_request_node(node):
                        if requested:
                            break
                        requested = True
                        node = await self._request(run, node, turn)
                        continue
                    node = await run.next(node)
            except ToolStepsRequested as stop:
                deferred = stop.requests
            return node, list(run.new_messages()), _usage(run.usage), requested, deferred

    def _continued(
        self,
        node: Any,
        stored: list[FrameworkMessage],
        usage: AgentUsage,
        metadata: ModelCallMetadata,
        continuations: int,
    ) -> AgentTurnOutcome:
        request: pai.ModelRequest = node.request
        if continuations >= MAX_CONSECUTIVE_TURN_CONTINUATIONS:
            return TurnCompleted(
                new_messages=stored[:-1] if stored else stored,
                usage=usage,
                turn_error=TURN_CONTINUATION_LIMIT_ERROR,
                model_call_metadata=metadata,
            )
        marked = replace(
            request, metadata={**(request.metadata or {}), _CONTINUATIONS_KEY: continuations + 1}
        )
        return TurnContinued(
            framework_run_state=encode_messages([marked]),
            new_messages=stored,
            usage=usage,
            model_call_metadata=metadata,
        )

    async def _request(self, run: Any, node: Any, turn: AgentTurnContext) -> Any:
        """Run the model request node, streaming text and reasoning to the turn's events
        when the model streams."""
        model = run.ctx.deps.model
        if isinstance(model, FunctionModel) and model.stream_function is None:
            return await run.next(node)
        async with node.stream(run.ctx) as stream:
            async for event in stream:
                _write_event(turn, event)
        return await run.next(node)

    def _offered_toolsets(self, turn: AgentTurnContext, listing: SourceToolListing) -> list[Any]:
        definitions: list[tuple[str, str | None, Any]] = [
            (tool.name, tool.description, tool.input_schema)
            for _, tool in (*listing.tools, *listing.replay_only_tools)
        ]
        definitions.extend(
            (d.name.value, d.description, d.parameters_schema)
            for d in built_in_tool_definitions(turn.enabled_built_in_tools)
        )
        return [schema_only_toolset(definitions)] if definitions else []

    def _replayer(
        self, turn: AgentTurnContext, listing: SourceToolListing
    ) -> Callable[[str, str], str | None]:
        def replay(tool_name: str, tool_call_id: str) -> str | None:
            if listing.find(tool_name) is None and listing.is_replay_only(tool_name):
                return FrameworkToolSourceRouter.replay_result(turn, tool_call_id)
            return None

        return replay

    def _deferred_calls(
        self,
        turn: AgentTurnContext,
        response: pai.ModelResponse,
        requests: DeferredToolRequests,
        capability: DeferToolSteps,
        listing: SourceToolListing,
    ) -> list[DeferredToolCall]:
        approvals = {call.tool_call_id for call in requests.approvals}
        deferred_ids = approvals | {call.tool_call_id for call in requests.calls}
        ids = FrameworkCallIds(turn)
        calls: list[DeferredToolCall] = []
        for part in response.tool_calls:
            if part.tool_call_id not in deferred_ids:
                continue
            session_id = ids.new_session_id(part.tool_call_id)
            state = FrameworkCallIds.state(
                part.tool_call_id, approval=part.tool_call_id in approvals
            )
            arguments = part.args_as_json_str()
            if part.tool_name in turn.enabled_built_in_tools:
                calls.append(
                    DeferredToolCall(
                        tool_call_id=session_id,
                        tool_name=part.tool_name,
                        arguments=arguments,
                        policy=_BUILT_IN_POLICY,
                        runner_tool_state=state,
                    )
                )
                continue
            source_call = self._router.build_call(
                turn,
                listing,
                tool_call_id=session_id,
                tool_name=part.tool_name,
                arguments=arguments,
            )
            if source_call is not None:
                calls.append(replace(source_call, runner_tool_state=state))
                continue
            effect = framework_effect(capability.tool_defs.get(part.tool_name))
            policy = turn.resolve_tool_policy(part.tool_name, effect)
            if part.tool_call_id in approvals and part.tool_name not in turn.tool_policies:
                policy = ToolPolicy(policy.effect, requires_approval=True)
            calls.append(
                DeferredToolCall(
                    tool_call_id=session_id,
                    tool_name=part.tool_name,
                    arguments=arguments,
                    policy=policy,
                    runner_tool_state=state,
                )
            )
        return calls

    def _open_call_result(
        self,
        turn: AgentTurnContext,
        listing: SourceToolListing,
        call: pai.ToolCallPart,
        image_bytes: Mapping[str, bytes] | None,
    ) -> Any:
        """The result of an open call: from its record (with its images' bytes); a
        replay-only source tool's call (answered inside the run, so never recorded)
        gets its replay answer."""
        from pydantic_ai import ToolReturn

        record = FrameworkCallIds(turn).record(call.tool_call_id)
        if record is None and listing.is_replay_only(call.tool_name):
            return ToolReturn(FrameworkToolSourceRouter.replay_result(turn, call.tool_call_id))
        result = record_result(record, call)
        if record is not None and record.images and image_bytes and isinstance(result, ToolReturn):
            images = [
                pai.BinaryContent(data=image_bytes[ref.sha256], media_type=ref.mime_type)
                for ref in record.images
                if ref.sha256 in image_bytes
            ]
            result = ToolReturn(result.return_value, content=images)
        return result

    async def _image_bytes(self, turn: AgentTurnContext) -> dict[str, bytes] | None:
        """The bytes of the turn's stored images (user messages and this turn's tool
        results), from the media store; ``None`` without one."""
        if self.media_store is None:
            return None
        references = [ref for message in turn.messages for ref in message.images]
        references.extend(ref for record in turn.tool_calls.values() for ref in record.images)
        if not references:
            return {}
        return await load_images(self.media_store, references)

    # -- tool Steps --------------------------------------------------------------------

    async def execute_deferred_tool_call(self, call: DeferredToolExecution) -> DeferredToolOutcome:
        """Run one tool call once: a tool source's through its source, an agent tool
        through the agent's own tool machinery."""
        record = call.tool_call
        if FrameworkToolSourceRouter.is_source_call(record):
            return await self._router.execute_deferred_tool_call(call)
        state = FrameworkCallIds.read_state(record)
        return await run_tool_call(
            self.agent,
            call,
            tool_call_id=str(state["id"]),
            approval=bool(state.get("approval", record.requires_approval)),
            deps=self._deps_value(),
            media_store=self.media_store,
        )

    # -- compaction (ContextCompactionRunner; the rest in FrameworkRunnerBase) ----------

    async def summarize_context(self, request: ContextSummaryRequest) -> ContextSummaryResult:
        """One summary request to the agent's model, with no tools."""
        from pydantic_ai.direct import model_request

        model = self.agent.model
        if model is None:
            raise ValueError("the agent has no model to summarize with")
        prompt = build_context_summary_prompt(request)
        message = pai.ModelRequest(
            parts=[pai.UserPromptPart(prompt)], instructions=CONTEXT_SUMMARY_INSTRUCTIONS
        )
        response = await model_request(model, [message])
        return ContextSummaryResult(
            text=response.text or "",
            usage=_usage(response.usage),
            model_call_metadata=_metadata(response, _model_name(self.agent)),
        )


def _return_part(call: pai.ToolCallPart, result: Any) -> pai.ModelRequestPart:
    from pydantic_ai import ModelRetry, ToolFailed

    if isinstance(result, ModelRetry):
        return pai.RetryPromptPart(
            content=result.message, tool_name=call.tool_name, tool_call_id=call.tool_call_id
        )
    content = result.message if isinstance(result, ToolFailed) else result.return_value
    return pai.ToolReturnPart(
        tool_name=call.tool_name, content=content, tool_call_id=call.tool_call_id
    )


def _single_prompt(request: pai.ModelRequest) -> bool:
    return len(request.parts) == 1 and isinstance(request.parts[0], pai.UserPromptPart)


def _prompt_content(request: pai.ModelRequest) -> Any:
    part = request.parts[0]
    assert isinstance(part, pai.UserPromptPart)
    return part.content


def _model_name(agent: Agent[Any, Any]) -> str | None:
    model = agent.model
    if model is None:
        return None
    if isinstance(model, str):
        return model.split(":", 1)[-1]
    return getattr(model, "model_name", None)


def _continuations(run_state: str | None) -> int:
    if run_state is None:
        return 0
    try:
        messages = pai.ModelMessagesTypeAdapter.validate_json(run_state)
    except ValueError:
        return 0
    last = messages[-1] if messages else None
    if isinstance(last, pai.ModelRequest) and last.metadata:
        value = last.metadata.get(_CONTINUATIONS_KEY, 0)
        return value if isinstance(value, int) else 0
    return 0


def _write_event(turn: AgentTurnContext, event: Any) -> None:
    if isinstance(event, pai.PartStartEvent):
        part = event.part
        if isinstance(part, pai.TextPart):
            turn.events.write_text_delta(part.content)
        elif isinstance(part, pai.ThinkingPart):
            turn.events.write_reasoning_delta(part.content)
    elif isinstance(event, pai.PartDeltaEvent):
        delta = event.delta
        if isinstance(delta, pai.TextPartDelta):
            turn.events.write_text_delta(delta.content_delta)
        elif isinstance(delta, pai.ThinkingPartDelta) and delta.content_delta:
            turn.events.write_reasoning_delta(delta.content_delta)
