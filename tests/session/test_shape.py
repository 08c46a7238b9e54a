"""The session Flow's shape without Ray: Steps, options, persistence, exports, values."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import dex
import pytest
from dex import CodecRegistry, StepDurability

import dex_agents_ray
import dex_agents_ray.media
import dex_agents_ray.session
from dex_agents_ray import (
    AgentEvent,
    AgentEventType,
    AgentEventWriter,
    AgentInterrupt,
    AgentSessionFlow,
    AgentSessionOptions,
    AgentSnapshot,
    AgentState,
    AgentStatus,
    AgentToolCall,
    AgentToolCallStatus,
    CancellationReason,
    InterruptKind,
    QuestionAnswer,
    QuestionResolution,
    ToolCallStepOptions,
    ToolEffect,
    ToolPolicy,
    build_turn_failure_note,
    describe_tool_call_outcome,
)
from dex_agents_ray.engine import RayTaskOptions, RemoteStepOptions
from dex_agents_ray.session._records import tool_step_options
from dex_agents_ray.session._steps_tools import RecordToolFailure, RecordToolOutcomeUnknown
from tests.session.agents import ScriptedRunner, build_flow

STEPS = [
    "StartAgentSession",
    "AwaitUserMessage",
    "RunModel",
    "CompactContext",
    "AwaitToolApproval",
    "AwaitQuestionAnswer",
    "AwaitTimer",
    "CallTool",
    "CallSingleAttemptTool",
    "PollToolTask",
    "RecordToolFailure",
    "RecordToolOutcomeUnknown",
    "ResumeTurn",
    "ApplyTurnControl",
    "RecordTurnFailure",
    "FinishTurnCancellation",
    "CancelToolTask",
]
PERSISTENCE = [
    "AgentState",
    "AgentMessages",
    "AgentMessageChunks",
    "AgentMessageIndex",
    "TurnReplySequence",
    "FrameworkRunState",
    "AgentToolCalls",
    "PendingInterrupts",
    "AgentUsage",
    "QueuedUserMessages",
    "InterruptResolutions",
    "ToolCallResults",
    "SteeredUserMessages",
    "TurnControlRequests",
    "TurnCancellationRequest",
    "ToolCallCancellations",
    "AgentTraceContext",
    "AgentPlan",
    "PlanExecutions",
    "PendingPlanExecution",
    "ContextSummary",
    "SessionSettings",
    "TurnSessionSettings",
    "AgentEvents",
]


def _flow(**options: Any) -> AgentSessionFlow:
    return build_flow("/tmp/unused", {}, options=AgentSessionOptions(**options))


def _record(**changes: Any) -> AgentToolCall:
    fields: dict[str, Any] = {
        "tool_call_id": "c1",
        "turn_id": "turn-1",
        "tool_name": "lookup",
        "arguments": '{"id": 1}',
        "effect": ToolEffect.READ,
        "requires_approval": False,
        "status": AgentToolCallStatus.APPROVED,
        "deferral_order": 0,
    }
    fields.update(changes)
    return AgentToolCall(**fields)


def test_registry_accepts_the_flow_with_every_step_and_persistence_name() -> None:
    flow = _flow()
    registry = dex.Registry([flow], allow_async_handlers=True)
    registered = registry._flow_by_type("TestAgent")

    assert list(registered.steps) == STEPS
    assert registered.start_step is not None
    assert registered.start_step.name == "StartAgentSession"
    assert sorted(registered.persistence) == sorted(PERSISTENCE)
    assert sorted(registered.rpcs) == [
        "answer_question",
        "cancel_turn",
        "delete_queued_message",
        "execute_plan",
        "get_agent_snapshot",
        "list_agent_messages",
        "resolve_interrupt",
        "send_user_message",
        "steer_user_message",
        "update_session_settings",
    ]
    assert flow.agent_events.stream_capacity_bytes == 10 * 1024 * 1024


def test_every_step_sets_sync_durability_and_run_model_has_the_spec_limits() -> None:
    flow = _flow()
    for entry in flow.get_steps():
        options = entry.step.get_step_options()
        assert options is not None, entry.step
        assert options.wait_for_durability is StepDurability.SYNC
        assert options.execute_durability is StepDurability.SYNC
    run_model = next(e.step for e in flow.get_steps() if type(e.step).__name__ == "RunModel")
    options = run_model.get_step_options()
    assert options is not None and options.execute_retry is not None
    assert options.execute_method_timeout == timedelta(minutes=15)
    assert options.heartbeat_timeout == timedelta(minutes=2)
    assert options.execute_retry.maximum_attempts == 3
    assert options.execute_retry.total_duration == timedelta(minutes=30)
    assert options._execute_failure_target is not None
    assert options._execute_failure_target.__name__ == "RecordTurnFailure"


class _ProviderRunner(ScriptedRunner):
    def tool_call_step_options(self, tool_call: AgentToolCall) -> ToolCallStepOptions | None:
        if tool_call.tool_name == "slow":
            return ToolCallStepOptions(
                timeout=timedelta(hours=1),
                retry_policy=dex.RetryPolicy(maximum_attempts=5),
                ray=RayTaskOptions(num_gpus=1),
            )
        if tool_call.tool_name == "local":
            return ToolCallStepOptions(run_inline=True)
        return None


def test_tool_steps_get_their_attempts_placement_and_failure_route_per_call() -> None:
    flow = build_flow(
        "/tmp/unused",
        {},
        options=AgentSessionOptions(
            inline_tools=frozenset({"cheap"}),
            tool_ray_options_by_name={"gpu": RayTaskOptions(num_gpus=0.5)},
        ),
        runner_class=_ProviderRunner,
    )
    config = flow.config

    read = tool_step_options(
        config, _record(), single_attempt=False, failure_step=RecordToolFailure
    )
    assert isinstance(read, RemoteStepOptions) and read.ray == RayTaskOptions()
    assert read.execute_retry is not None and read.execute_retry.maximum_attempts == 3
    assert read.execute_durability is StepDurability.SYNC
    assert [load.instance for load in read.execute_load_attribute_map_instances] == ["c1"]
    assert read._execute_failure_target is RecordToolFailure
    failure = read._execute_failure_options
    assert failure is not None
    assert [load.instance for load in failure.execute_load_attribute_map_instances] == ["c1"]

    write = tool_step_options(
        config,
        _record(effect=ToolEffect.NON_IDEMPOTENT_WRITE),
        single_attempt=True,
        failure_step=RecordToolOutcomeUnknown,
    )
    assert write.execute_retry is not None and write.execute_retry.maximum_attempts == 1

    cheap = tool_step_options(
        config, _record(tool_name="cheap"), single_attempt=False, failure_step=RecordToolFailure
    )
    assert not isinstance(cheap, RemoteStepOptions)
    gpu = tool_step_options(
        config, _record(tool_name="gpu"), single_attempt=False, failure_step=RecordToolFailure
    )
    assert isinstance(gpu, RemoteStepOptions) and gpu.ray.num_gpus == 0.5
    slow = tool_step_options(
        config, _record(tool_name="slow"), single_attempt=False, failure_step=RecordToolFailure
    )
    assert isinstance(slow, RemoteStepOptions) and slow.ray.num_gpus == 1
    assert slow.execute_method_timeout == timedelta(hours=1)
    assert slow.execute_retry is not None and slow.execute_retry.maximum_attempts == 5
    single = tool_step_options(
        config, _record(tool_name="slow"), single_attempt=True, failure_step=RecordToolFailure
    )
    assert single.execute_retry is not None and single.execute_retry.maximum_attempts == 1
    local = tool_step_options(
        config, _record(tool_name="local"), single_attempt=False, failure_step=RecordToolFailure
    )
    assert not isinstance(local, RemoteStepOptions)


def test_exports_are_pinned_and_the_top_level_reexports_the_session() -> None:
    names = dex_agents_ray.session.__all__
    assert len(names) == len(set(names))
    for name in names:
        assert getattr(dex_agents_ray.session, name) is getattr(dex_agents_ray, name)
    # Then the spec's image names, from dex_agents_ray.media, and the root of the
    # package's exceptions (pinned in tests/test_exports.py).
    assert dex_agents_ray.__all__[: len(names)] == list(names)
    rest = set(dex_agents_ray.__all__[len(names) :])
    assert rest <= {*dex_agents_ray.media.__all__, "DexAgentsError"}
    for name in [
        "AgentSessionClient",
        "AgentSessionFlow",
        "AgentSessionOptions",
        "AgentFrameworkRunner",
        "UnfinishedTurnMessageBuilder",
        "ImageUserMessageBuilder",
        "ToolTaskPoller",
        "ToolTaskCanceller",
        "ToolCallStepOptionsProvider",
        "BUILT_IN_TOOL_DEFINITIONS",
        "TOOL_CALL_NOT_RUN_ERROR_PREFIX",
        "MISSING_TOOL_TASK_POLLER",
        "describe_tool_call_outcome",
        "build_turn_failure_note",
    ]:
        assert name in names


def test_stored_values_round_trip_through_the_sdk_codec() -> None:
    codecs = CodecRegistry()
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    record = _record(
        status=AgentToolCallStatus.REJECTED,
        cancellation_reason=CancellationReason.STEERED,
        wait_until=now,
        finished_at=now,
        choices=("a", "b"),
        input_answers=(
            QuestionAnswer(
                interrupt_id="c1-input-1", resolution=QuestionResolution.ANSWERED, answer="a"
            ),
        ),
    )
    interrupt = AgentInterrupt(
        interrupt_id="c1",
        kind=InterruptKind.APPROVAL,
        tool_call_id="c1",
        tool_name="lookup",
        turn_id="turn-1",
        arguments="{}",
        deadline=now,
    )
    snapshot = AgentSnapshot(
        state=AgentState(status=AgentStatus.RUNNING_TOOLS, active_turn_id="turn-1"),
        pending_interrupts=(interrupt,),
        tool_calls=(record,),
    )
    event = AgentEvent(
        type=AgentEventType.TEXT_DELTA,
        payload={"text": "hi"},
        turn_id="turn-1",
        step_execution_id="RunModel-1",
        attempt=2,
    )
    for value in (record, snapshot, event):
        codec = codecs.resolve(type(value))
        decoded = codec.decode(codec.encode(value))
        assert decoded == value
        assert type(decoded) is type(value)
    decoded_record = codecs.resolve(AgentToolCall).decode(
        codecs.resolve(AgentToolCall).encode(record)
    )
    assert (
        decoded_record.wait_until == now
        and decoded_record.cancellation_reason is CancellationReason.STEERED
    )


def test_outcome_texts_and_the_turn_failure_note() -> None:
    succeeded = _record(status=AgentToolCallStatus.SUCCEEDED, output="42")
    failed = _record(
        tool_call_id="c2",
        status=AgentToolCallStatus.FAILED,
        error="boom",
        deferral_order=1,
        tool_name="pay",
        arguments="{}",
    )
    steered = _record(
        status=AgentToolCallStatus.REJECTED, cancellation_reason=CancellationReason.STEERED
    )
    assert describe_tool_call_outcome(succeeded) == "42"
    assert describe_tool_call_outcome(failed) == "The tool call failed: boom"
    assert describe_tool_call_outcome(steered) == (
        '{"status":"cancelled","reason":"superseded_by_steered_user_message"}'
    )
    unknown = _record(status=AgentToolCallStatus.OUTCOME_UNKNOWN)
    assert describe_tool_call_outcome(unknown).startswith("The tool call's outcome is unknown")
    assert build_turn_failure_note([failed, succeeded]) == (
        "[Dex] The previous turn failed after these tool calls ran:\n"
        '- lookup {"id": 1} -> succeeded: 42\n'
        "- pay {} -> failed: The tool call failed: boom\n"
        "Do not repeat these tool calls unless the user asks again."
    )


def test_misuse_is_refused_with_a_clear_error() -> None:
    with pytest.raises(ValueError, match="flow_type"):
        AgentSessionFlow(ScriptedRunner("/tmp/x", {}, {}), flow_type=" ")
    with pytest.raises(TypeError, match="AgentFrameworkRunner"):
        AgentSessionFlow(object(), flow_type="X")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="plan_mode_enabled needs write_todos"):
        AgentSessionOptions(plan_mode_enabled=True)
    with pytest.raises(TypeError, match="tool_policies"):
        AgentSessionOptions(tool_policies={"x": "read"})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="interrupt_deadline"):
        AgentSessionOptions(interrupt_deadline=timedelta(0))
    with pytest.raises(TypeError, match="model_ray_options"):
        AgentSessionOptions(model_ray_options={"num_cpus": 1})  # type: ignore[arg-type]
    assert ToolPolicy(ToolEffect.READ).approval_required is False


async def test_event_writer_delivers_from_threads_and_drops_after_close() -> None:
    written: list[AgentEvent] = []
    writer = AgentEventWriter(written.append, turn_id="turn-1", step_execution_id="X-1", attempt=1)
    writer.write_text_delta("a")
    thread = threading.Thread(target=writer.write_reasoning_delta, args=("b",))
    thread.start()
    thread.join()
    await asyncio.sleep(0)  # let the loop run the handed-over write
    writer.close()
    writer.write_text_delta("late")
    assert [(e.type.value, e.payload["text"]) for e in written] == [
        ("text_delta", "a"),
        ("reasoning_delta", "b"),
    ]


async def test_the_client_retries_lock_conflicts_then_gives_up() -> None:
    from dex.runtime_errors import RpcLockConflictError

    from dex_agents_ray.engine._errors import service_error
    from dex_agents_ray.session import _client

    calls: list[int] = []

    async def conflicted_twice() -> bool:
        calls.append(1)
        if len(calls) < 3:
            raise service_error(RpcLockConflictError, "held", "InvokeRPC", "s")
        return True

    assert await _client._retry_lock_conflicts(conflicted_twice) is True
    assert len(calls) == 3

    async def always() -> bool:
        raise service_error(RpcLockConflictError, "held", "InvokeRPC", "s")

    original = _client.LOCK_CONFLICT_RETRY_SECONDS
    _client.LOCK_CONFLICT_RETRY_SECONDS = 0.1
    try:
        with pytest.raises(RpcLockConflictError):
            await _client._retry_lock_conflicts(always)
    finally:
        _client.LOCK_CONFLICT_RETRY_SECONDS = original


def test_a_state_from_a_newer_release_is_refused_clearly() -> None:
    codec = CodecRegistry().resolve(AgentState)
    encoded = codec.encode(AgentState(status=AgentStatus.WAITING_FOR_USER_MESSAGE))
    newer = type(encoded)(
        encoded.kind, encoded.data.replace('"schema_version":1', '"schema_version":9')
    )
    with pytest.raises(ValueError, match="schema version 9"):
        codec.decode(newer)
