"""``PollToolTask`` attempts are ``execute_tool`` spans of the call's trace, and an
approval whose deadline passed starts an activation (``interrupt_deadline``).
The runner is the session tests' scripted one (no ``ModelCallMetadata``: the
``chat`` spans are named ``chat``)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from pathlib import Path
from typing import Any

from dex_agents_ray import (
    AgentSessionClient,
    AgentSessionOptions,
    AgentTracingOptions,
    ToolEffect,
    ToolPolicy,
)
from dex_agents_ray.testing import InvocationLog
from tests.session.agents import Call, Reply, TaskRunner, build_flow
from tests.session.polling import has_interrupt, snapshot_when, turn_done
from tests.tracing.support import SinkFactory, start_sink
from tests.tracing.test_session_spans import counts, named, of_session, spans_when


async def test_task_polls_and_an_expired_approval(
    engine_factory: Any, namespace: str, state_dir: Path
) -> None:
    sink = start_sink(namespace)
    tracing = AgentTracingOptions(tracer_provider_factory=SinkFactory(namespace))
    tasks = build_flow(
        state_dir,
        {"report": [Reply(calls=[Call("r1", "report")]), Reply()]},
        {"report": "task"},
        options=AgentSessionOptions(
            tool_policies={"report": ToolPolicy(ToolEffect.IDEMPOTENT_WRITE)}, tracing=tracing
        ),
        runner_class=TaskRunner,
        flow_type="Tasks",
    )
    expiring = build_flow(
        state_dir,
        {"wipe": [Reply(calls=[Call("w1", "wipe")]), Reply()]},
        options=dataclasses.replace(
            AgentSessionOptions(
                tool_policies={"wipe": ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE)}
            ),
            interrupt_deadline=timedelta(seconds=1),
            tracing=tracing,
        ),
        flow_type="Expiring",
    )
    engine = await engine_factory([tasks, expiring])
    task_sessions = AgentSessionClient(engine.client, tasks)
    await task_sessions.start_session("t1", "report")
    await AgentSessionClient(engine.client, expiring).start_session("e1", "wipe")

    await snapshot_when(task_sessions, "t1", has_interrupt)
    assert await task_sessions.answer_question("t1", "r1-input-1", "go")
    polls = InvocationLog(state_dir / "poll.log")
    await snapshot_when(task_sessions, "t1", lambda _: len(polls.entries()) >= 3)
    (state_dir / "task-done").write_text("yes")
    await snapshot_when(task_sessions, "t1", turn_done(1))

    spans = of_session(
        await spans_when(
            sink, lambda s: counts(of_session(s, "t1"), chat=2, execute_tool=4), "the task's spans"
        ),
        "t1",
    )
    (root,) = named(spans, "invoke_agent")
    tools = named(spans, "execute_tool report")
    steps = [t["attributes"]["dex.step.type"] for t in tools]
    assert steps[0] == "CallTool" and set(steps[1:]) == {"PollToolTask"}
    statuses = [t["attributes"]["dex.agent.tool_call.status"] for t in tools]
    assert statuses[0] == "waiting_for_task"
    assert statuses[1] == "awaiting_answer"  # the poll that asked the question
    assert statuses[-1] == "succeeded"
    # The answer is no activation: every poll stays in the trace that deferred the call.
    assert {t["trace_id"] for t in tools} == {root["trace_id"]}
    assert {t["parent_span_id"] for t in tools} == {root["span_id"]}
    assert [c["name"] for c in named(spans, "chat")] == ["chat", "chat"]
    assert {c["kind"] for c in named(spans, "chat")} == {"CLIENT"}

    spans = of_session(
        await spans_when(sink, lambda s: counts(of_session(s, "e1"), invoke_agent=2), "expiry"),
        "e1",
    )
    first, expired = named(spans, "invoke_agent")
    assert expired["attributes"]["dex.step.type"] == "AwaitToolApproval"
    assert expired["attributes"]["dex.agent.activation.trigger"] == "interrupt_deadline"
    assert expired["attributes"]["dex.agent.interrupt.approved"] is False
    assert expired["attributes"]["dex.agent.interrupt.id"] == "w1"
    assert expired["links"] == [(first["trace_id"], first["span_id"])]
    assert named(spans, "execute_tool") == []  # a rejected call never runs
