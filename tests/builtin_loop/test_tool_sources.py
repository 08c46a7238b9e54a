"""Tool sources through the runner: listing, timeouts, collisions, references and routing."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest

from dex_agents_ray.builtin_loop import (
    AgentDefinition,
    BuiltinLoopAgentRunner,
    FrameworkRunnerBase,
    FrameworkToolSourceRouter,
    ListedTool,
    ModelRequest,
    ScriptedModelClient,
    ScriptedModelReply,
    ScriptedToolCall,
    SourceTool,
    ToolSource,
    function_tool,
)
from dex_agents_ray.session import (
    AgentTurnContext,
    BuiltInTool,
    DeferredToolCall,
    DeferredToolExecution,
    ToolCallsRequested,
    ToolCallStepOptions,
    ToolEffect,
    ToolExecutionError,
    ToolExecutionResult,
    ToolTaskCancellation,
    ToolTaskPending,
    ToolTaskPoll,
    ToolTaskPollOutcome,
    estimate_stored_input_tokens,
    estimate_text_tokens,
)
from tests.builtin_loop.turns import FLOW_ID, Transcript, execution, record


class FakeSource:
    """A tool source that lists fixed tools and answers with its own reference."""

    def __init__(self, source_name: str, names: Sequence[str], *, hang: bool = False) -> None:
        self.source_name = source_name
        self.names = list(names)
        self.hang = hang
        self.listed: list[ListedTool | None] = []
        self.executed: list[DeferredToolExecution] = []
        self.polled: list[ToolTaskPoll] = []
        self.cancelled: list[ToolTaskCancellation] = []

    async def list_tools(self) -> list[SourceTool]:
        if self.hang:
            await asyncio.Event().wait()
        return [
            SourceTool(name=name, description=f"{name} from {self.source_name}")
            for name in self.names
        ]

    def deferred_tool_call(
        self,
        turn: AgentTurnContext,
        *,
        tool_call_id: str,
        tool_name: str,
        arguments: str,
        listed_tool: ListedTool | None = None,
    ) -> DeferredToolCall:
        self.listed.append(listed_tool)
        return DeferredToolCall(
            tool_call_id=tool_call_id,
            tool_name=tool_name,
            arguments=arguments,
            policy=turn.resolve_tool_policy(tool_name, ToolEffect.IDEMPOTENT_WRITE),
            tool_source_reference=f"ref:{tool_name}",
        )

    async def execute_deferred_tool_call(self, call: DeferredToolExecution) -> ToolExecutionResult:
        self.executed.append(call)
        return ToolExecutionResult(output=f"{self.source_name} ran {call.tool_call.tool_name}")

    async def poll_tool_task(self, poll: ToolTaskPoll) -> ToolTaskPollOutcome:
        self.polled.append(poll)
        return ToolTaskPending(poll_interval_seconds=5)

    async def cancel_tool_task(self, cancellation: ToolTaskCancellation) -> None:
        self.cancelled.append(cancellation)

    def tool_call_step_options(self, tool_call: Any) -> ToolCallStepOptions:
        return ToolCallStepOptions(timeout=timedelta(seconds=len(tool_call.tool_source_reference)))


class BrokenSource(FakeSource):
    async def list_tools(self) -> list[SourceTool]:
        raise ConnectionError("server down")


@function_tool(effect=ToolEffect.READ)
def lookup_order(order_id: str) -> str:
    """Look up an order."""
    return order_id


def calling(*names: str) -> ScriptedModelClient:
    def respond(request: ModelRequest) -> ScriptedModelReply:
        return ScriptedModelReply(
            tool_calls=[
                ScriptedToolCall(tool_call_id=f"c{index}", tool_name=name)
                for index, name in enumerate(names, start=1)
            ]
        )

    return ScriptedModelClient(respond)


def make_runner(
    model: ScriptedModelClient, sources: Sequence[Any], **fields: Any
) -> BuiltinLoopAgentRunner:
    definition = AgentDefinition(
        name="reports",
        instructions="You manage reports.",
        model=model,
        tools=[lookup_order],
        tool_sources=sources,
        **fields,
    )
    return BuiltinLoopAgentRunner(definition)


def new_turn(runner: BuiltinLoopAgentRunner, **fields: Any) -> AgentTurnContext:
    transcript = Transcript()
    transcript.store([runner.build_user_message("Go")])
    return transcript.turn(**fields)


def test_a_fake_source_is_a_tool_source() -> None:
    assert isinstance(FakeSource("files", []), ToolSource)
    assert isinstance(SourceTool(name="x"), ListedTool)


async def test_listed_tools_are_offered_after_function_tools_and_before_built_ins() -> None:
    model = calling("read_report", "nobody_listed_this")
    files = FakeSource("files", ["read_report"])
    runner = make_runner(model, [files, FakeSource("tickets", ["open_ticket"])])
    outcome = await runner.run_model_step(
        new_turn(runner, built_ins=frozenset({BuiltInTool.ASK_USER}))
    )
    assert [tool.name for tool in model.requests[0].tools] == [
        "lookup_order",
        "read_report",
        "open_ticket",
        "ask_user",
    ]
    assert isinstance(outcome, ToolCallsRequested)
    source_call, unknown_call = outcome.tool_calls
    assert json.loads(source_call.tool_source_reference or "") == {
        "stepwise_tool_source": "files",
        "reference": "ref:read_report",
    }
    assert source_call.policy.effect is ToolEffect.IDEMPOTENT_WRITE
    assert files.listed[0] is not None and files.listed[0].name == "read_report"
    assert unknown_call.tool_source_reference is None
    assert unknown_call.policy.effect is ToolEffect.UNCLASSIFIED
    assert unknown_call.policy.approval_required is False


async def test_calls_route_to_their_source_with_its_own_reference() -> None:
    files, tickets = FakeSource("files", ["read_report"]), FakeSource("tickets", ["t"])
    runner = make_runner(calling("read_report"), [tickets, files])
    outcome = await runner.run_model_step(new_turn(runner))
    assert isinstance(outcome, ToolCallsRequested)
    [deferred] = outcome.tool_calls
    stored = record(
        "c1", "read_report", tool_source_reference=deferred.tool_source_reference, task_id="job"
    )
    # Another worker: a fresh runner with the sources in another order, no listing.
    other = make_runner(calling(), [FakeSource("files", []), FakeSource("tickets", [])])
    other_files = other.definition.tool_sources[0]
    assert isinstance(other_files, FakeSource)
    result = await other.execute_deferred_tool_call(execution(stored))
    assert result == ToolExecutionResult(output="files ran read_report")
    assert other_files.executed[0].tool_call.tool_source_reference == "ref:read_report"
    assert other_files.executed[0].idempotency_key == f"{FLOW_ID}/turn-1/c1"
    poll = ToolTaskPoll(
        flow_id=FLOW_ID,
        tool_call=stored,
        idempotency_key="k",
        attempt=1,
        events=execution(stored).events,
        heartbeat=execution(stored).heartbeat,
    )
    assert await other.poll_tool_task(poll) == ToolTaskPending(poll_interval_seconds=5)
    assert other_files.polled[0].tool_call.tool_source_reference == "ref:read_report"
    cancellation = ToolTaskCancellation(
        flow_id=FLOW_ID, tool_call=stored, idempotency_key="k", attempt=1
    )
    await other.cancel_tool_task(cancellation)
    assert other_files.cancelled[0].tool_call.tool_source_reference == "ref:read_report"
    options = other.tool_call_step_options(stored)
    assert options is not None and options.timeout == timedelta(seconds=len("ref:read_report"))
    assert other.tool_call_step_options(record("c2", "lookup_order")) is None


async def test_a_missing_source_raises_lookup_error() -> None:
    reference = json.dumps({"stepwise_tool_source": "gone", "reference": None})
    runner = make_runner(calling(), [FakeSource("files", [])])
    stored = record("c1", "read_report", tool_source_reference=reference)
    with pytest.raises(LookupError, match="tool source gone"):
        await runner.execute_deferred_tool_call(execution(stored))
    poll = ToolTaskPoll(
        flow_id=FLOW_ID,
        tool_call=record("c1", "lookup_order"),
        idempotency_key="k",
        attempt=1,
        events=execution(stored).events,
        heartbeat=execution(stored).heartbeat,
    )
    with pytest.raises(LookupError, match="not built by a tool source"):
        await runner.poll_tool_task(poll)
    with pytest.raises(ToolExecutionError, match="^unknown tool read_report$"):
        await runner.execute_deferred_tool_call(execution(record("c1", "read_report")))


async def test_a_failing_or_slow_listing_offers_nothing(caplog: pytest.LogCaptureFixture) -> None:
    model = calling()
    sources = [
        BrokenSource("broken", ["b"]),
        FakeSource("slow", ["s"], hang=True),
        FakeSource("fine", ["f"]),
    ]
    runner = make_runner(model, sources, tool_source_listing_timeout=timedelta(milliseconds=50))
    with caplog.at_level(logging.WARNING, logger="dex_agents_ray.builtin_loop"):
        await runner.run_model_step(new_turn(runner))
    assert [tool.name for tool in model.requests[0].tools] == ["lookup_order", "f"]
    messages = [record.getMessage() for record in caplog.records]
    assert any("tool source broken failed to list" in message for message in messages)
    assert any("tool source slow did not list its tools within" in message for message in messages)


@pytest.mark.parametrize(
    ("sources", "built_ins", "message"),
    [
        (
            [FakeSource("a", ["lookup_order"])],
            frozenset(),
            "tool lookup_order of a tool source uses the name of a function tool",
        ),
        (
            [FakeSource("a", ["ask_user"])],
            frozenset({BuiltInTool.ASK_USER}),
            "tool ask_user uses the name of an enabled built-in tool",
        ),
        (
            [FakeSource("a", ["x"]), FakeSource("b", ["x"])],
            frozenset(),
            "two tool sources list a tool named x",
        ),
    ],
)
async def test_listed_name_collisions_fail_before_the_model_call(
    sources: list[FakeSource], built_ins: frozenset[BuiltInTool], message: str
) -> None:
    model = calling()
    runner = make_runner(model, sources)
    with pytest.raises(ValueError, match=f"^{message}$"):
        await runner.run_model_step(new_turn(runner, built_ins=built_ins))
    assert model.requests == []


async def test_a_disabled_built_in_name_may_be_listed() -> None:
    model = calling()
    runner = make_runner(model, [FakeSource("a", ["ask_user"])])
    await runner.run_model_step(new_turn(runner))
    assert [tool.name for tool in model.requests[0].tools] == ["lookup_order", "ask_user"]


class CachingSource(FakeSource):
    """A source with ``cached_tools()``: its last listing without I/O (as MCP keeps one)."""

    def __init__(self, source_name: str, tools: Sequence[SourceTool]) -> None:
        super().__init__(source_name, [tool.name for tool in tools])
        self.tools = list(tools)

    async def list_tools(self) -> list[SourceTool]:
        return self.tools

    def cached_tools(self) -> list[SourceTool]:
        return self.tools


def _wide_tool(name: str) -> SourceTool:
    schema = {
        "type": "object",
        "properties": {f"field_{i}": {"type": "string", "description": "x" * 60} for i in range(8)},
    }
    return SourceTool(name=name, description=f"{name}: " + "d" * 300, input_schema=schema)


async def test_the_compaction_estimate_counts_every_source_s_tool_definitions() -> None:
    """The spec: ``cached_tools()`` is counted by the synchronous estimate, else the
    runner's last listing of the source; so the estimate is the model request's."""
    model = calling()
    cached = CachingSource("connector", [_wide_tool(f"op_{i}") for i in range(40)])
    listed = FakeSource("files", ["read_report", "write_report"])
    runner = make_runner(model, [cached, listed])
    bare = make_runner(calling(), [])
    turn = new_turn(runner)

    # Before any listing: the cached tools count, the other source's do not yet.
    before = await runner.estimate_input_tokens(turn)
    schema_tokens = sum(len(json.dumps(t.input_schema)) for t in cached.tools) // 3
    assert before >= await bare.estimate_input_tokens(turn) + schema_tokens

    await runner.run_model_step(turn)
    after = await runner.estimate_input_tokens(turn)
    assert after == model.estimate_input_tokens(model.requests[0])
    assert after > before  # the listed source's last listing counts too


async def test_a_framework_adapter_s_estimate_counts_its_sources_tools_too() -> None:
    class Adapter(FrameworkRunnerBase):
        def __init__(self, sources: Sequence[Any]) -> None:
            self._router = FrameworkToolSourceRouter(sources)

    cached = CachingSource("connector", [_wide_tool(f"op_{i}") for i in range(40)])
    turn = new_turn(make_runner(calling(), []))
    stored = estimate_stored_input_tokens(turn)
    tools = sum(
        estimate_text_tokens(t.name + t.description + json.dumps(t.input_schema))
        for t in cached.tools
    )

    assert await Adapter([]).estimate_input_tokens(turn) == stored
    assert await Adapter([cached]).estimate_input_tokens(turn) >= stored + tools
