"""The spec's span story of two real session turns, checked the same way for every
way the spans leave their processes (a provider factory, the relay to the spec's
``tracer_provider``): one turn with two tool calls is one trace; an approval
starts a second, linked trace, and its answer a third with the refund in it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from dex_agents_ray import AgentSessionClient
from dex_agents_ray.session._schema import AGENT_TRACE_CONTEXT
from tests.session.polling import has_interrupt, snapshot_when, turn_done
from tests.tracing.agents import AGENT_NAME
from tests.tracing.support import render_tree, stored_attribute

SCHEMA_URL = "https://opentelemetry.io/schemas/gen-ai-dev/1.42.0-dev"

Spans = list[dict[str, Any]]
ReadSpans = Callable[[Callable[[Spans], bool], str], Awaitable[Spans]]
"""``read(until, description)``: every span record so far, once ``until`` holds."""


def of_session(spans: Spans, session_id: str) -> Spans:
    return [s for s in spans if s["attributes"].get("session.id") == session_id]


def named(spans: Spans, prefix: str) -> Spans:
    return sorted((s for s in spans if s["name"].startswith(prefix)), key=lambda s: s["start"])


def counts(spans: Spans, **wanted: int) -> bool:
    return all(len(named(spans, prefix)) >= n for prefix, n in wanted.items())


def check_common(span: dict[str, Any], session_id: str, run_id: str, step: str) -> None:
    attributes = span["attributes"]
    assert attributes["gen_ai.conversation.id"] == session_id
    assert attributes["session.id"] == session_id
    assert attributes["dex.flow.id"] == session_id
    assert attributes["dex.run.id"] == run_id
    assert attributes["dex.step.type"] == step
    assert attributes["dex.step.execution_id"].startswith(f"{step}-")
    assert isinstance(attributes["dex.step.attempt"], int)
    assert span["scope"] == "dex_agents_ray"
    assert span["schema_url"] == SCHEMA_URL


def traceparent(span: dict[str, Any]) -> str:
    """The span's W3C ``traceparent``: sampled, with the SDK's random-trace-ID flag."""
    return f"00-{span['trace_id']}-{span['span_id']}-03"


async def check_two_lookups_and_an_approval(
    engine: Any,
    sessions: AgentSessionClient,
    store_path: Path,
    read: ReadSpans,
    *,
    by_process: bool,
) -> None:
    """Drive session ``s1`` of ``tests.tracing.agents`` and check every span.

    ``by_process``: the records say which process emitted each span (the
    factory's providers); relayed spans all carry the origin's resource."""
    root, run_id = await _first_turn(engine, sessions, store_path, read, by_process=by_process)
    await _approval_turns(engine, sessions, store_path, read, root, run_id)


async def _first_turn(
    engine: Any,
    sessions: AgentSessionClient,
    store_path: Path,
    read: ReadSpans,
    *,
    by_process: bool,
) -> tuple[dict[str, Any], str]:
    """One turn, two tool calls: one trace; its root and the run ID."""
    await sessions.start_session("s1", "two lookups")
    await snapshot_when(sessions, "s1", turn_done(1))
    run_id = (await engine.client.describe_flow("s1")).run_id
    spans = of_session(
        await read(
            lambda s: counts(of_session(s, "s1"), invoke_agent=1, chat=2, execute_tool=2),
            "the first turn's spans",
        ),
        "s1",
    )
    (root,) = named(spans, "invoke_agent")
    chats = named(spans, "chat")
    tools = named(spans, "execute_tool")
    assert len(spans) == 5
    assert {s["trace_id"] for s in spans} == {root["trace_id"]}
    assert root["name"] == f"invoke_agent {AGENT_NAME}" and root["kind"] == "INTERNAL"
    assert root["parent_span_id"] is None and root["links"] == []
    check_common(root, "s1", run_id, "StartAgentSession")
    assert root["attributes"]["gen_ai.operation.name"] == "invoke_agent"
    assert root["attributes"]["gen_ai.agent.name"] == AGENT_NAME
    assert root["attributes"]["dex.agent.activation.trigger"] == "user_message"
    assert root["attributes"]["dex.agent.user_message.key"] == "000000000001"
    assert root["attributes"]["dex.agent.turn.id"] == "turn-1"
    assert root["attributes"]["dex.step.execution_id"] == "StartAgentSession-1"
    assert root["attributes"]["dex.step.attempt"] == 1

    await _check_first_chats(sessions, chats, root, run_id)
    assert [t["attributes"]["gen_ai.tool.call.id"] for t in tools] != []
    assert sorted(t["attributes"]["gen_ai.tool.call.id"] for t in tools) == ["call-a", "call-b"]
    for tool in tools:
        check_common(tool, "s1", run_id, "CallTool")
        assert tool["name"] == "execute_tool lookup_order" and tool["kind"] == "INTERNAL"
        assert tool["parent_span_id"] == root["span_id"]
        attributes = tool["attributes"]
        assert attributes["gen_ai.operation.name"] == "execute_tool"
        assert attributes["gen_ai.agent.name"] == AGENT_NAME
        assert attributes["gen_ai.tool.name"] == "lookup_order"
        assert attributes["dex.agent.tool.effect"] == "read"
        assert attributes["dex.agent.tool_call.status"] == "succeeded"
        assert attributes["dex.agent.turn.id"] == "turn-1"
        assert "gen_ai.tool.call.arguments" not in attributes
    if by_process:  # the tools ran on executors and still joined the host's trace
        assert {t["pid"] for t in tools}.isdisjoint({root["pid"], *(c["pid"] for c in chats)})
    stored = stored_attribute(engine, store_path, "s1", AGENT_TRACE_CONTEXT.name, str)
    assert stored == traceparent(root)
    return root, run_id


async def _approval_turns(
    engine: Any,
    sessions: AgentSessionClient,
    store_path: Path,
    read: ReadSpans,
    root: dict[str, Any],
    run_id: str,
) -> None:
    """An approval: a second trace, linked to the first; its answer a third, with
    the refund's tool span in it."""
    assert await sessions.send_user_message("s1", "refund")
    waiting = await snapshot_when(sessions, "s1", has_interrupt, description="the approval")
    (call,) = [c for c in waiting.tool_calls if c.tool_call_id == "call-r"]
    spans = of_session(
        await read(lambda s: counts(of_session(s, "s1"), invoke_agent=2, chat=3), "turn 2's chat"),
        "s1",
    )
    root2 = named(spans, "invoke_agent")[1]
    assert root2["links"] == [(root["trace_id"], root["span_id"])]
    check_common(root2, "s1", run_id, "AwaitUserMessage")
    assert call.trace_context == traceparent(root2)  # RunModel copied the root's context
    assert named(spans, "chat")[2]["trace_id"] == root2["trace_id"]

    interrupt_id = waiting.pending_interrupts[0].interrupt_id
    assert await sessions.resolve_interrupt("s1", interrupt_id, approved=True)
    await snapshot_when(sessions, "s1", turn_done(2))
    spans = of_session(
        await read(
            lambda s: counts(of_session(s, "s1"), invoke_agent=3, chat=4, execute_tool=3),
            "the approval's spans",
        ),
        "s1",
    )
    root3 = named(spans, "invoke_agent")[2]
    check_common(root3, "s1", run_id, "AwaitToolApproval")
    assert root3["trace_id"] not in {root["trace_id"], root2["trace_id"]}
    assert root3["links"] == [(root2["trace_id"], root2["span_id"])]
    assert root3["attributes"]["dex.agent.activation.trigger"] == "interrupt_resolution"
    assert root3["attributes"]["dex.agent.interrupt.id"] == interrupt_id
    assert root3["attributes"]["dex.agent.interrupt.approved"] is True
    assert "dex.agent.user_message.key" not in root3["attributes"]
    refund = named(spans, "execute_tool refund_order")
    assert len(refund) == 1
    assert refund[0]["trace_id"] == root3["trace_id"]
    assert refund[0]["parent_span_id"] == root3["span_id"]
    check_common(refund[0], "s1", run_id, "CallSingleAttemptTool")
    assert refund[0]["attributes"]["dex.agent.tool.effect"] == "non_idempotent_write"
    final_chat = named(spans, "chat")[3]
    assert final_chat["trace_id"] == root3["trace_id"]
    assert final_chat["parent_span_id"] == root3["span_id"]
    stored = stored_attribute(engine, store_path, "s1", AGENT_TRACE_CONTEXT.name, str)
    assert stored == traceparent(root3)
    tree = render_tree(spans).splitlines()  # as docs/tracing.md shows it
    assert [line for line in tree if line.startswith("trace")] == [
        "trace 1",
        "trace 2 (linked to trace 1)",
        "trace 3 (linked to trace 2)",
    ]
    assert tree[-2].startswith("  ├─ execute_tool refund_order [INTERNAL]")
    assert tree[-1].startswith("  └─ chat scripted [CLIENT]")


async def _check_first_chats(
    sessions: AgentSessionClient, chats: Spans, root: dict[str, Any], run_id: str
) -> None:
    """The first turn's two ``chat`` spans: the tool request, then the answer."""
    for chat in chats:
        check_common(chat, "s1", run_id, "RunModel")
        assert chat["name"] == "chat scripted" and chat["kind"] == "CLIENT"
        assert chat["parent_span_id"] == root["span_id"]
        attributes = chat["attributes"]
        assert attributes["gen_ai.operation.name"] == "chat"
        assert attributes["gen_ai.request.model"] == "scripted"
        assert attributes["gen_ai.response.model"] == "scripted"
        assert attributes["gen_ai.provider.name"] == "scripted"
        assert attributes["gen_ai.response.id"].startswith("scripted_")
        assert attributes["gen_ai.usage.input_tokens"] > 0
        assert attributes["gen_ai.usage.output_tokens"] > 0
        assert "gen_ai.system" not in attributes
        assert "gen_ai.input.messages" not in attributes
        assert "gen_ai.agent.name" not in attributes
        assert chat["status"] == "UNSET"
    first, second = chats
    assert first["attributes"]["gen_ai.response.finish_reasons"] == ["tool_calls"]
    assert first["attributes"]["dex.agent.requested_tool_call.ids"] == ["call-a", "call-b"]
    assert first["attributes"]["dex.agent.input_messages.last_key"] == "000000000001"
    assert "dex.agent.output_messages.keys" not in first["attributes"]
    assert second["attributes"]["gen_ai.response.finish_reasons"] == ["stop"]
    snapshot = await sessions.get_agent_snapshot("s1")
    last = snapshot.messages[-1].sequence
    assert second["attributes"]["dex.agent.output_messages.keys"] == [f"{last:012d}"]
    # The built-in loop stores the tool results with its TurnCompleted: the second
    # call's newest stored message is the first call's tool request.
    roles = [m.role.value for m in snapshot.messages]
    assert roles == ["user", "assistant", "tool", "tool", "assistant"]
    assert second["attributes"]["dex.agent.input_messages.last_key"] == "000000000002"
