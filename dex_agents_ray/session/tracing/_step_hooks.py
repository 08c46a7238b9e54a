"""What the tracing decorators do around a Step: spans, stored trace contexts, metrics.

One ``StepHooks`` per process and Flow definition. The span logic follows the
spec's "Tracing" section: an ``invoke_agent`` root per attempt of a Step that
starts an activation (it ends with the Step; its ``traceparent`` goes into
``AgentTraceContext`` in the Step's commit, or the stored one is deleted when
the root has no valid context), a ``chat`` span when a model Step attempt
ends, and an ``execute_tool`` span, current while the tool runs, per tool Step
attempt, parented from the call's record. Nothing here changes what a Step
returns: every OpenTelemetry call is guarded (``_otel``), and a failure
of this module's own bookkeeping is logged and skipped the same way.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

from dex import AsyncContext, Context, StepDecision

from dex_agents_ray.engine import on_clean_exit
from dex_agents_ray.session._compaction import CompactContextInput, ContextSummaryResult
from dex_agents_ray.session._config import SessionConfig
from dex_agents_ray.session._messages import load_messages
from dex_agents_ray.session._records import APPROVAL_DEADLINE_PASSED
from dex_agents_ray.session._runner import ToolCallsRequested, TurnCompleted
from dex_agents_ray.session._schema import (
    AGENT_MESSAGES,
    AGENT_STATE,
    AGENT_TOOL_CALLS,
    AGENT_TRACE_CONTEXT,
    CONTEXT_SUMMARY,
    INTERRUPT_RESOLUTIONS,
    TURN_REPLY_SEQUENCE,
    message_sequence_key,
)
from dex_agents_ray.session._values import (
    AgentMessage,
    AgentState,
    AgentToolCall,
    AgentToolCallStatus,
    AgentUsage,
    MessageRole,
)
from dex_agents_ray.session.tracing._metrics import SessionMetrics
from dex_agents_ray.session.tracing._notes import (
    MODEL_RESULT,
    ModelResultNote,
    forget_trace_context,
)
from dex_agents_ray.session.tracing._options import GenAISemanticConventionsVersion

logger = logging.getLogger("dex_agents_ray.tracing")

__all__ = ["StepHooks", "untraced_approval"]

Execute = Callable[[Any, AsyncContext, Any], Awaitable[StepDecision]]
Attributes = dict[str, Any]

_bookkeeping_failed = False


def _bookkeeping_failure(what: str) -> None:
    global _bookkeeping_failed
    level = logging.DEBUG if _bookkeeping_failed else logging.WARNING
    _bookkeeping_failed = True
    logger.log(level, "tracing: %s failed; the span is skipped", what, exc_info=True)


def _turn_count(state: AgentState | None) -> int:
    return 0 if state is None else state.turn_count


def _approval_change(
    context: Context, before: AgentToolCall | None, after: AgentToolCall | None
) -> tuple[str, bool] | None:
    """``(trigger, approved)`` when this ``AwaitToolApproval`` attempt consumed an
    answer or an expired deadline; ``None`` when it started no activation."""
    if before is None or after is None:
        return None
    if before.status is not AgentToolCallStatus.AWAITING_APPROVAL:
        return None
    if after.status is AgentToolCallStatus.APPROVED:
        return "interrupt_resolution", True
    if after.status is not AgentToolCallStatus.REJECTED or after.cancellation_reason is not None:
        return None
    if list(INTERRUPT_RESOLUTIONS.results(context, before.tool_call_id)):
        return "interrupt_resolution", False
    if after.rejection_message == APPROVAL_DEADLINE_PASSED:
        return "interrupt_deadline", False
    return None


async def untraced_approval(
    fn: Execute, step: Any, context: AsyncContext, input: Any
) -> StepDecision:
    """``AwaitToolApproval`` with tracing and metrics off: a root without a valid
    context deletes the stored one and clears the record's copy."""
    before = AGENT_TOOL_CALLS.get(context, input)
    decision = await fn(step, context, input)
    try:
        after = AGENT_TOOL_CALLS.get(context, input)
        if _approval_change(context, before, after) is not None:
            forget_trace_context(context)
            if after is not None and after.trace_context is not None:
                # The tool's span starts a trace of its own, not the old activation's.
                AGENT_TOOL_CALLS.set(context, input, replace(after, trace_context=None))
    except Exception:
        _bookkeeping_failure("reading the approval")
    return decision


def _text_part(text: str | None) -> list[dict[str, Any]]:
    return [] if not text else [{"type": "text", "content": text}]


def _message_json(message: AgentMessage) -> dict[str, Any]:
    """One stored message in the GenAI message format (from its projections)."""
    parts = _text_part(message.text)
    if message.role is MessageRole.TOOL:
        parts = [
            {
                "type": "tool_call_response",
                "id": message.tool_call_id,
                "response": message.tool_output,
            }
        ]
    elif message.tool_call_id is not None and message.tool_name is not None:
        parts.append(
            {
                "type": "tool_call",
                "id": message.tool_call_id,
                "name": message.tool_name,
                "arguments": message.tool_arguments,
            }
        )
    return {"role": message.role.value, "parts": parts}


def _produced(result: TurnCompleted) -> list[tuple[int, Any]]:
    """``(index, message)`` of what the final model call produced: the
    ``TurnCompleted`` messages after the turn's last tool result."""
    messages = list(result.new_messages)
    last_tool = max((i for i, m in enumerate(messages) if m.role is MessageRole.TOOL), default=-1)
    return [(i, m) for i, m in enumerate(messages) if i > last_tool]


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class StepHooks:
    """Spans and metrics of one Flow definition's Steps in this process."""

    def __init__(self, config: SessionConfig, *, tracing: bool, metrics: bool) -> None:
        options = config.options.tracing
        self.config = config
        self.agent_name = options.agent_name or config.flow_type
        self.version = options.semantic_conventions_version
        self.legacy = self.version is GenAISemanticConventionsVersion.V1_36_0
        self.capture = options.should_capture_message_content and not self.legacy
        self.tracer: Any = None
        if tracing:
            try:
                from dex_agents_ray.session.tracing._otel import OtelTracer
            except ImportError:  # no OpenTelemetry API: roots store no context
                pass
            else:
                self.tracer = OtelTracer(options)
                _register_flush()
        self.tracing = tracing
        self.metrics: Any = None
        if metrics:
            self.metrics = SessionMetrics()

    def _live(self) -> bool:
        return self.tracer is not None and bool(self.tracer.active())

    def _common(
        self, step: Any, context: Context, operation: str, turn_id: str | None
    ) -> Attributes:
        flow_id = context.flow_id
        attributes: Attributes = {
            "gen_ai.operation.name": operation,
            "gen_ai.conversation.id": flow_id,
            "session.id": flow_id,
            "dex.flow.id": flow_id,
            "dex.run.id": context.run_id,
            "dex.step.type": type(step).__name__,
            "dex.step.execution_id": context.step_execution_id,
            "dex.step.attempt": context.attempt,
        }
        if turn_id is not None:
            attributes["dex.agent.turn.id"] = turn_id
        return attributes

    # -- activation roots ----------------------------------------------------------------

    async def activation(
        self, fn: Execute, step: Any, context: AsyncContext, input: Any
    ) -> StepDecision:
        """A Step that starts an activation when it begins a turn with a user message."""
        if not self._live():
            forget_trace_context(context)
            return await fn(step, context, input)
        before = AGENT_STATE.get(context)
        previous = AGENT_TRACE_CONTEXT.get(context)
        start = time.time_ns()
        try:
            decision = await fn(step, context, input)
        except BaseException as error:
            try:
                turn_id = f"turn-{_turn_count(before) + 1}"
                self._root(step, context, turn_id, previous, start, {}, error=error)
            except Exception:
                _bookkeeping_failure("the invoke_agent span")
            raise
        try:
            after = AGENT_STATE.get(context)
            if after is not None and after.turn_count > _turn_count(before):
                extra = self._user_message_attributes(context, after)
                self._root(step, context, after.active_turn_id, previous, start, extra)
        except Exception:
            _bookkeeping_failure("the invoke_agent span")
        return decision

    def _user_message_attributes(self, context: Context, state: AgentState) -> Attributes:
        reply = TURN_REPLY_SEQUENCE.get(context)
        if reply is None or reply.turn_id != state.active_turn_id:
            return {}
        last_user = reply.first_sequence - 1
        attributes: Attributes = {
            "dex.agent.activation.trigger": "user_message",
            "dex.agent.user_message.key": message_sequence_key(last_user),
        }
        if self.capture:
            messages = []
            sequence = last_user
            while sequence > 0:
                message = AGENT_MESSAGES.get(context, message_sequence_key(sequence))
                if message is None or message.turn_id != state.active_turn_id:
                    break
                messages.append(_message_json(message))
                sequence -= 1
            attributes["gen_ai.input.messages"] = _json(messages[::-1])
        return attributes

    def _root(
        self,
        step: Any,
        context: Context,
        turn_id: str | None,
        previous: str | None,
        start: int,
        extra: Mapping[str, Any],
        *,
        error: BaseException | None = None,
    ) -> str | None:
        """Emit the ``invoke_agent`` root and store (or delete) its ``traceparent``."""
        from opentelemetry.trace import SpanKind

        attributes = self._common(step, context, "invoke_agent", turn_id)
        attributes["gen_ai.agent.name"] = self.agent_name
        attributes.update(extra)
        span = self.tracer.start(
            f"invoke_agent {self.agent_name}",
            kind=SpanKind.INTERNAL,
            parent=None,
            root=True,
            attributes=attributes,
            links=[previous] if previous else [],
            start_time=start,
        )
        traceparent: str | None = self.tracer.traceparent(span)
        self.tracer.end(span, error=error)
        if error is None:
            if traceparent is None:
                forget_trace_context(context)
            else:
                AGENT_TRACE_CONTEXT.set(context, traceparent)
        return traceparent

    async def approval(
        self, fn: Execute, step: Any, context: AsyncContext, input: Any
    ) -> StepDecision:
        """``AwaitToolApproval``: an answer or an expired deadline is an activation, whose
        root replaces the record's ``trace_context``."""
        before = AGENT_TOOL_CALLS.get(context, input)
        previous = AGENT_TRACE_CONTEXT.get(context)
        start = time.time_ns()
        live = self._live()
        try:
            decision = await fn(step, context, input)
        except BaseException as error:
            try:
                if live and before is not None:
                    self._root(step, context, before.turn_id, previous, start, {}, error=error)
            except Exception:
                _bookkeeping_failure("the approval's invoke_agent span")
            raise
        try:
            after = AGENT_TOOL_CALLS.get(context, input)
            change = _approval_change(context, before, after)
            if change is not None and after is not None and before is not None:
                if self.metrics is not None:
                    self.metrics.interrupt_resolved("approval", change[0])
                traceparent = None
                if live:
                    trigger, approved = change
                    extra: Attributes = {
                        "dex.agent.activation.trigger": trigger,
                        "dex.agent.interrupt.approved": approved,
                    }
                    if before.interrupt_id is not None:
                        extra["dex.agent.interrupt.id"] = before.interrupt_id
                    traceparent = self._root(step, context, before.turn_id, previous, start, extra)
                else:
                    forget_trace_context(context)
                if after.status is AgentToolCallStatus.APPROVED:
                    AGENT_TOOL_CALLS.set(context, input, replace(after, trace_context=traceparent))
        except Exception:
            _bookkeeping_failure("the approval's invoke_agent span")
        return decision

    # -- chat ------------------------------------------------------------------------------

    async def model(
        self, fn: Execute, step: Any, context: AsyncContext, input: Any
    ) -> StepDecision:
        """``RunModel`` / ``CompactContext``: the ``chat`` span when the attempt ends."""
        live = self._live()
        state = AGENT_STATE.get(context)
        parent = AGENT_TRACE_CONTEXT.get(context) if live else None
        note = ModelResultNote()
        if self.capture and live:
            keys = AGENT_TOOL_CALLS.get_all_instance_keys(context)
            note.records = [AGENT_TOOL_CALLS.get(context, key) for key in keys]
            summary = CONTEXT_SUMMARY.get(context)
            note.summarized_through = summary.last_sequence if summary is not None else 0
        reset = MODEL_RESULT.set(note)
        token = self.tracer.attach(parent=parent) if live else None
        start_ns, start = time.time_ns(), time.monotonic()
        error: BaseException | None = None
        try:
            return await fn(step, context, input)
        except BaseException as raised:
            error = raised
            raise
        finally:
            if token is not None:
                self.tracer.detach(token)
            MODEL_RESULT.reset(reset)
            if note.result is not None or error is not None:
                try:
                    self._model_done(step, context, input, state, parent, note, error, start_ns)
                    if self.metrics is not None:
                        self.metrics.model_call(
                            note.result, type(step).__name__, time.monotonic() - start, error
                        )
                except Exception:
                    _bookkeeping_failure("the chat span")

    def _model_done(
        self,
        step: Any,
        context: Context,
        input: Any,
        state: AgentState | None,
        parent: str | None,
        note: ModelResultNote,
        error: BaseException | None,
        start: int,
    ) -> None:
        if self.metrics is not None and error is None:
            for _ in range(note.approvals_raised):
                self.metrics.interrupt_raised("approval")
        if not self._live():
            return
        from opentelemetry.trace import SpanKind

        result = note.result
        turn_id = state.active_turn_id if state is not None else None
        attributes = self._common(step, context, "chat", turn_id)
        metadata = getattr(result, "model_call_metadata", None)
        usage = getattr(result, "usage", None)
        attributes.update(self._metadata_attributes(metadata))
        request_model = attributes.get("gen_ai.request.model")
        name = f"chat {request_model}" if request_model else "chat"
        single = isinstance(usage, AgentUsage) and usage.model_calls == 1
        if isinstance(usage, AgentUsage) and single:
            attributes.update(self._usage_attributes(usage))
        kind = SpanKind.CLIENT if single or not isinstance(usage, AgentUsage) else SpanKind.INTERNAL
        if isinstance(input, CompactContextInput):
            attributes["dex.agent.input_messages.last_key"] = message_sequence_key(
                input.through_sequence
            )
        elif state is not None and state.last_sequence > 0:
            attributes["dex.agent.input_messages.last_key"] = message_sequence_key(
                state.last_sequence
            )
        if error is None and state is not None:
            attributes.update(self._outputs(state, result, note))
            if self.capture:
                attributes.update(self._chat_content(context, input, state, result, note))
        span = self.tracer.start(
            name, kind=kind, parent=parent, attributes=attributes, start_time=start
        )
        self.tracer.end(span, error=error)

    def _metadata_attributes(self, metadata: Any) -> Attributes:
        """The ``chat`` attributes of the runner's ``ModelCallMetadata``."""
        attributes: Attributes = {}
        if metadata is None:
            return attributes
        if metadata.request_model:
            attributes["gen_ai.request.model"] = metadata.request_model
        if metadata.response_model:
            attributes["gen_ai.response.model"] = metadata.response_model
        if metadata.provider_name:
            key = "gen_ai.system" if self.legacy else "gen_ai.provider.name"
            attributes[key] = metadata.provider_name
        if metadata.response_id:
            attributes["gen_ai.response.id"] = metadata.response_id
        if metadata.finish_reasons is not None:
            attributes["gen_ai.response.finish_reasons"] = list(metadata.finish_reasons)
        return attributes

    def _usage_attributes(self, usage: AgentUsage) -> Attributes:
        attributes: Attributes = {}
        if usage.input_tokens == 0 and usage.output_tokens == 0:
            return attributes
        attributes["gen_ai.usage.input_tokens"] = usage.input_tokens
        attributes["gen_ai.usage.output_tokens"] = usage.output_tokens
        if not self.legacy:
            if usage.cached_input_tokens:
                attributes["gen_ai.usage.cache_read.input_tokens"] = usage.cached_input_tokens
            if usage.reasoning_tokens:
                attributes["gen_ai.usage.reasoning.output_tokens"] = usage.reasoning_tokens
        return attributes

    def _outputs(self, state: AgentState, result: object, note: ModelResultNote) -> Attributes:
        attributes: Attributes = {}
        if isinstance(result, TurnCompleted):
            first = state.last_sequence + 1
            keys = [message_sequence_key(first + i) for i, _ in _produced(result)]
            if keys:
                attributes["dex.agent.output_messages.keys"] = keys
        if isinstance(result, ToolCallsRequested):
            created = set(note.created_tool_calls)
            ids = [c.tool_call_id for c in result.tool_calls if c.tool_call_id in created]
            if ids:
                attributes["dex.agent.requested_tool_call.ids"] = ids
        return attributes

    def _chat_content(
        self,
        context: Context,
        input: Any,
        state: AgentState,
        result: object,
        note: ModelResultNote,
    ) -> Attributes:
        after = note.summarized_through
        messages = [m for m in load_messages(context, after=after) if m.sequence > after]
        if isinstance(input, CompactContextInput):
            messages = [m for m in messages if m.sequence <= input.through_sequence]
        inputs = [_message_json(m) for m in messages if m.sequence <= state.last_sequence]
        if not isinstance(input, CompactContextInput):
            inputs.extend(self._turn_tool_messages(state, note.records))
        outputs: list[dict[str, Any]] = []
        if isinstance(result, ContextSummaryResult):
            outputs.append({"role": "assistant", "parts": _text_part(result.text)})
        elif isinstance(result, ToolCallsRequested):
            parts = [
                {
                    "type": "tool_call",
                    "id": c.tool_call_id,
                    "name": c.tool_name,
                    "arguments": c.arguments,
                }
                for c in result.tool_calls
            ]
            outputs.append({"role": "assistant", "parts": parts, "finish_reason": "tool_call"})
        elif isinstance(result, TurnCompleted):
            for _, message in _produced(result):
                outputs.append({"role": message.role.value, "parts": _text_part(message.text)})
        return {"gen_ai.input.messages": _json(inputs), "gen_ai.output.messages": _json(outputs)}

    def _turn_tool_messages(
        self, state: AgentState, records: list[AgentToolCall | None]
    ) -> list[dict[str, Any]]:
        """The turn's tool calls the model saw, and their recorded results."""
        calls = sorted(
            (r for r in records if r is not None and r.turn_id == state.active_turn_id),
            key=lambda r: r.deferral_order,
        )
        messages: list[dict[str, Any]] = []
        for record in calls:
            messages.append(
                {
                    "role": "assistant",
                    "parts": [
                        {
                            "type": "tool_call",
                            "id": record.tool_call_id,
                            "name": record.tool_name,
                            "arguments": record.arguments,
                        }
                    ],
                }
            )
            if record.is_final:
                messages.append(
                    {
                        "role": "tool",
                        "parts": [
                            {
                                "type": "tool_call_response",
                                "id": record.tool_call_id,
                                "response": record.output
                                if record.output is not None
                                else record.error or record.status.value,
                            }
                        ],
                    }
                )
        return messages

    # -- tools -----------------------------------------------------------------------------

    async def tool(self, fn: Execute, step: Any, context: AsyncContext, input: Any) -> StepDecision:
        """A tool Step attempt: its ``execute_tool`` span is current while the tool runs."""
        # The record is read (decoded) only for what needs it: a span, the metrics.
        record = AGENT_TOOL_CALLS.get(context, input) if self._live() else None
        span = token = None
        if record is not None:
            span = self._start_tool_span(step, context, record)
            token = self.tracer.attach(span) if span is not None else None
        start = time.monotonic()
        error: BaseException | None = None
        try:
            return await fn(step, context, input)
        except BaseException as raised:
            error = raised
            raise
        finally:
            if token is not None:
                self.tracer.detach(token)
            try:
                after = None
                if span is not None or self.metrics is not None:
                    after = AGENT_TOOL_CALLS.get(context, input)
                if span is not None:
                    self._end_tool_span(span, after, error)
                if self.metrics is not None and after is not None and after.is_final:
                    self.metrics.tool_call(after, time.monotonic() - start)
            except Exception:
                _bookkeeping_failure("the execute_tool span")

    def _start_tool_span(self, step: Any, context: Context, record: AgentToolCall) -> Any:
        from opentelemetry.trace import SpanKind

        attributes = self._common(step, context, "execute_tool", record.turn_id)
        attributes.update(
            {
                "gen_ai.agent.name": self.agent_name,
                "gen_ai.tool.name": record.tool_name,
                "gen_ai.tool.call.id": record.tool_call_id,
                "dex.agent.tool.effect": record.effect.value,
            }
        )
        if self.capture:
            attributes["gen_ai.tool.call.arguments"] = record.arguments
        return self.tracer.start(
            f"execute_tool {record.tool_name}",
            kind=SpanKind.INTERNAL,
            parent=record.trace_context,
            attributes=attributes,
        )

    def _end_tool_span(
        self, span: Any, after: AgentToolCall | None, error: BaseException | None
    ) -> None:
        attributes: Attributes = {}
        error_type = None
        if after is not None:
            attributes["dex.agent.tool_call.status"] = after.status.value
            if self.capture and after.output is not None:
                attributes["gen_ai.tool.call.result"] = after.output
            if error is None and after.status is AgentToolCallStatus.FAILED and after.error:
                error_type = "ToolExecutionError"
            elif error is None and after.status is AgentToolCallStatus.OUTCOME_UNKNOWN:
                error_type = "ToolOutcomeUnknownError"
        self.tracer.end(span, attributes=attributes, error=error, error_type=error_type)


_flush_registered = False


def _register_flush() -> None:
    """Flush this process's providers before its host or executor exits cleanly."""
    global _flush_registered
    if _flush_registered:
        return
    from dex_agents_ray.session.tracing._otel import flush_providers

    on_clean_exit(flush_providers)
    _flush_registered = True
