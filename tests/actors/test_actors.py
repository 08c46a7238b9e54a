"""The ready agents in ``actors/`` in whole sessions on the engine (scripted models)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from actors._models import MODEL_ENV, SettingsModelResolver, default_model
from actors.grader import grader_flow, grading_prompt, parse_grade
from actors.research import research_flow, time_server
from actors.support import support_flow
from dex_agents_ray import AgentSessionClient, InterruptKind
from dex_agents_ray.builtin_loop import ScriptedModelClient
from dex_agents_ray.mcp import McpStreamableHttpServerConfig
from tests.mcp.mcp_server import HttpMcpServer
from tests.session.polling import has_interrupt, snapshot_when, turn_done

TIMEOUT = 120


def _last_text(snapshot: Any) -> str:
    texts = [m.text for m in snapshot.messages if m.role.value == "assistant" and m.text]
    return texts[-1] if texts else ""


async def test_support_desk_looks_up_refunds_with_approval_and_asks(engine_factory: Any) -> None:
    flow = support_flow(flow_type="SupportDeskTest")
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)

    await sessions.start_session("desk-1", "Where is order A2?")
    done = await snapshot_when(sessions, "desk-1", turn_done(1), timeout=TIMEOUT)
    assert "shipped" in _last_text(done) and "office chair" in _last_text(done)

    await sessions.send_user_message("desk-1", "Please refund 300 on order A1.")
    waiting = await snapshot_when(sessions, "desk-1", has_interrupt, timeout=TIMEOUT)
    (approval,) = waiting.pending_interrupts
    assert approval.kind is InterruptKind.APPROVAL and approval.tool_name == "refund_order"
    assert json.loads(approval.arguments) == {"order_id": "A1", "amount_cents": 300}
    assert await sessions.resolve_interrupt("desk-1", approval.interrupt_id, approved=True)
    done = await snapshot_when(sessions, "desk-1", turn_done(2), timeout=TIMEOUT)
    assert _last_text(done) == "Refund: refunded 300 cents on A1"

    # No order named: the agent asks, the answer names one, the refund asks approval.
    await sessions.send_user_message("desk-1", "I want a refund of 200.")
    asked = await snapshot_when(sessions, "desk-1", has_interrupt, timeout=TIMEOUT)
    (question,) = asked.pending_interrupts
    assert question.kind is InterruptKind.QUESTION and question.tool_name == "ask_user"
    assert await sessions.answer_question("desk-1", question.interrupt_id, "It is A4")
    refund = await snapshot_when(
        sessions,
        "desk-1",
        lambda s: any(i.tool_name == "refund_order" for i in s.pending_interrupts),
        timeout=TIMEOUT,
    )
    (approval,) = refund.pending_interrupts
    assert json.loads(approval.arguments) == {"order_id": "A4", "amount_cents": 200}
    assert await sessions.resolve_interrupt(
        "desk-1", approval.interrupt_id, approved=False, rejection_message="not this one"
    )
    done = await snapshot_when(sessions, "desk-1", turn_done(3), timeout=TIMEOUT)
    assert "refunded" not in _last_text(done)


async def test_research_agent_calls_mcp_servers(engine_factory: Any) -> None:
    extra = HttpMcpServer()
    extra.start()
    try:
        servers = [time_server(), McpStreamableHttpServerConfig(name="lab", url=extra.url)]
        flow = research_flow(servers, flow_type="ResearchTest")
        engine = await engine_factory([flow])
        sessions = AgentSessionClient(engine.client, flow)
        await sessions.start_session("research-1", "What time is it in Europe/Paris?")
        done = await snapshot_when(sessions, "research-1", turn_done(1), timeout=TIMEOUT)
        answer = _last_text(done)
        assert answer.startswith("Findings: time__get_current_time -> ")
        result = json.loads(answer.removeprefix("Findings: time__get_current_time -> "))
        assert result["timezone"] == "Europe/Paris"
        # A tool of the test suite's own server, over Streamable HTTP.
        await sessions.send_user_message("research-1", "use lab__echo")
        done = await snapshot_when(sessions, "research-1", turn_done(2), timeout=TIMEOUT)
        assert _last_text(done).startswith("Findings: lab__echo -> ")
        assert len(extra.state.called("echo")) == 1
    finally:
        extra.stop()


async def test_grader_scores_answers(engine_factory: Any) -> None:
    flow = grader_flow(flow_type="GraderTest")
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    prompt = grading_prompt("Where is A2?", "It has shipped.", "shipped")
    await sessions.start_session("grade-pass", prompt)
    await sessions.start_session("grade-fail", grading_prompt("Where is A2?", "Lost.", "shipped"))
    passed = await snapshot_when(sessions, "grade-pass", turn_done(1), timeout=TIMEOUT)
    failed = await snapshot_when(sessions, "grade-fail", turn_done(1), timeout=TIMEOUT)
    assert parse_grade(_last_text(passed)).passed is True
    assert parse_grade(_last_text(passed)).score == 1.0
    assert parse_grade(_last_text(failed)).passed is False


def test_parse_grade_names_what_is_wrong() -> None:
    assert parse_grade('Verdict: {"score": 0.5, "passed": false, "reason": "half"}').score == 0.5
    for reply, problem in [
        ("no json here", "no JSON object"),
        ('{"score": 2, "passed": true}', "score must be a number from 0 to 1"),
        ('{"score": 1, "passed": "yes"}', "passed must be true or false"),
        ("{not json}", "not valid JSON"),
    ]:
        with pytest.raises(ValueError, match=problem):
            parse_grade(reply)


def test_models_are_scripted_unless_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from dex_agents_ray.litellm import LiteLLMModelClient

    monkeypatch.delenv(MODEL_ENV, raising=False)
    scripted = default_model(lambda request: None)  # type: ignore[arg-type,return-value]
    assert isinstance(scripted, ScriptedModelClient)
    monkeypatch.setenv(MODEL_ENV, "openai/gpt-5-mini")
    assert isinstance(default_model(lambda request: None), LiteLLMModelClient)  # type: ignore[arg-type,return-value]
    resolve = SettingsModelResolver(scripted)
    assert resolve({}) is scripted
    named = resolve({"model": "openai/gpt-5-mini"})
    assert isinstance(named, LiteLLMModelClient)
    assert resolve({"model": "openai/gpt-5-mini"}) is named  # built once per name
    with pytest.raises(ValueError, match="session setting 'model' must be a model name"):
        resolve({"model": 5})


async def test_the_pydantic_ai_support_desk_runs_as_a_session(engine_factory: Any) -> None:
    from actors.pydantic_support import flow

    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("pyd-1", "Where is order A2?")
    looked = await snapshot_when(sessions, "pyd-1", turn_done(1), timeout=TIMEOUT)
    assert _last_text(looked) == (
        'Order status: {"item":"office chair","status":"shipped","paid_cents":"18900"}'
    )

    assert await sessions.send_user_message("pyd-1", "Please refund 700 on A2")
    waiting = await snapshot_when(sessions, "pyd-1", has_interrupt, timeout=TIMEOUT)
    [interrupt] = waiting.pending_interrupts
    assert interrupt.kind is InterruptKind.APPROVAL
    assert await sessions.resolve_interrupt("pyd-1", interrupt.interrupt_id, approved=True)
    refunded = await snapshot_when(sessions, "pyd-1", turn_done(2), timeout=TIMEOUT)
    assert _last_text(refunded) == "Refund: refunded 700 cents on A2"


def test_a_bare_pydantic_ai_agent_is_wrapped_by_agent_options(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from dex_agents_ray import AgentSessionFlow
    from dex_agents_ray.cli._connection import load_agents
    from dex_agents_ray.pydantic_ai import PydanticAIRunner

    (flow,) = load_agents(["actors.pydantic_support:agent"])
    assert isinstance(flow, AgentSessionFlow) and isinstance(flow.runner, PydanticAIRunner)
    assert flow.get_flow_type() == "pydantic_support"
    assert flow.runner.agent_reference == "actors.pydantic_support:agent"
    assert "a Pydantic AI agent, run as session Flow 'pydantic_support'" in capsys.readouterr().err


async def test_the_openai_agents_support_desk_runs_as_a_session(engine_factory: Any) -> None:
    from actors.openai_support import flow

    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("oai-1", "Where is order A2?")
    looked = await snapshot_when(sessions, "oai-1", turn_done(1), timeout=TIMEOUT)
    assert _last_text(looked) == (
        'Order status: {"item": "office chair", "status": "shipped", "paid_cents": "18900"}'
    )

    assert await sessions.send_user_message("oai-1", "Please refund 700 on A2")
    waiting = await snapshot_when(sessions, "oai-1", has_interrupt, timeout=TIMEOUT)
    [interrupt] = waiting.pending_interrupts
    assert interrupt.kind is InterruptKind.APPROVAL and interrupt.tool_name == "refund_order"
    assert await sessions.resolve_interrupt("oai-1", interrupt.interrupt_id, approved=True)
    refunded = await snapshot_when(sessions, "oai-1", turn_done(2), timeout=TIMEOUT)
    assert _last_text(refunded) == "Refund: refunded 700 cents on A2"


def test_a_bare_openai_agents_agent_is_wrapped_by_agent_options(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from dex_agents_ray import AgentSessionFlow
    from dex_agents_ray.cli._connection import load_agents
    from dex_agents_ray.openai_agents import OpenAIAgentsRunner

    (flow,) = load_agents(["actors.openai_support:agent"])
    assert isinstance(flow, AgentSessionFlow) and isinstance(flow.runner, OpenAIAgentsRunner)
    assert flow.get_flow_type() == "openai_support"
    assert "an OpenAI Agents SDK agent, run as session Flow 'openai_support'" in (
        capsys.readouterr().err
    )
