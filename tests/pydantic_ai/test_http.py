"""A Pydantic AI agent on an OpenAI-compatible HTTP server (loopback): one HTTP
request per ``RunModel`` Step, made by the framework's own OpenAI model."""

from __future__ import annotations

from typing import Any

from pydantic_ai import Agent, ModelRetry
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from dex_agents_ray import AgentEventType, AgentSessionClient, AgentSessionOptions, ToolEffect
from dex_agents_ray.pydantic_ai import pydantic_ai_session_flow
from tests.fake_provider import CHAT_PATH, FakeProviderServer, chat_stream
from tests.session.polling import read_events, snapshot_when, turn_done

USAGE = {"prompt_tokens": 40, "completion_tokens": 7, "total_tokens": 47}


def _build_agent(base_url: str) -> Agent[None, str]:
    model = OpenAIChatModel("qwen3-local", provider=OpenAIProvider(base_url=base_url, api_key="k"))
    support = Agent(model, instructions="You track orders.")

    @support.tool_plain
    def lookup_order(order_id: str) -> dict[str, str]:
        """Look up an order."""
        return {"order_id": order_id, "status": "shipped"}

    @support.output_validator
    def no_shouting(output: str) -> str:
        if output.isupper():
            raise ModelRetry("Do not shout.")
        return output

    return support


async def _run_model_steps(sessions: AgentSessionClient, session_id: str) -> int:
    history = await sessions.client.read_step_history(session_id)
    return sum(1 for e in history if e.step_type == "RunModel" and e.event_type == "step_completed")


async def test_one_http_request_per_run_model_step_with_streamed_text(
    engine_factory: Any, provider: FakeProviderServer
) -> None:
    flow = pydantic_ai_session_flow(
        _build_agent(provider.openai_api_base),
        flow_type="HttpOrders",
        options=AgentSessionOptions(default_tool_effect=ToolEffect.READ),
    )
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    provider.enqueue(
        CHAT_PATH,
        chat_stream(tool_calls=[("call_1", "lookup_order", '{"order_id":"A1"}')], usage=USAGE),
        chat_stream(text="ORDER A1 SHIPPED", usage=USAGE),  # the validator asks again
        chat_stream(text="Order A1 has shipped.", usage=USAGE),
    )
    await sessions.start_session("http-1", "Where is order A1?")
    done = await snapshot_when(sessions, "http-1", turn_done(1), timeout=120)

    bodies = provider.bodies(CHAT_PATH)
    assert len(bodies) == 3 == await _run_model_steps(sessions, "http-1")
    assert all(body["stream"] is True for body in bodies)
    assert bodies[0]["messages"][0] == {"role": "system", "content": "You track orders."}
    tool_reply = next(m for m in bodies[1]["messages"] if m["role"] == "tool")
    assert tool_reply["tool_call_id"] == "call_1" and "shipped" in tool_reply["content"]
    assert "Do not shout." in str(bodies[2]["messages"][-1])
    assert done.messages[-1].text == "Order A1 has shipped."
    assert done.usage.model_calls == 3 and done.usage.input_tokens == 120
    events = await read_events(sessions, "http-1", until_type=AgentEventType.TURN_COMPLETED)
    streamed = "".join(
        str(e.payload["text"]) for e in events if e.type is AgentEventType.TEXT_DELTA
    )
    assert "Order A1 has shipped." in streamed
