"""The Agents SDK adapter against real parts: an OpenAI-compatible HTTP server
(Chat Completions and Responses, loopback), a real MCP server through the spec's
recipe (a schema-only ``FunctionTool`` calling ``McpToolSource.call_tool`` with the
hook's key), and the clear errors for what cannot run as tool Steps."""

from __future__ import annotations

import json
import socket
import warnings
from typing import Any

import pytest
from agents import (
    Agent,
    FunctionTool,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    RunConfig,
    WebSearchTool,
    function_tool,
)
from openai import AsyncOpenAI
from ray import cloudpickle

from dex_agents_ray import AgentSessionClient, AgentSessionOptions, MessageRole, ToolEffect
from dex_agents_ray.mcp import McpStreamableHttpServerConfig, McpToolSource
from dex_agents_ray.openai_agents import (
    AgentTravelError,
    OpenAIAgentsRunner,
    get_current_deferred_tool_execution,
    openai_agents_session_flow,
)
from tests.fake_provider import (
    CHAT_PATH,
    RESPONSES_PATH,
    FakeProviderServer,
    chat_stream,
    responses_stream,
)
from tests.mcp.mcp_server import IDEMPOTENCY_KEY, HttpMcpServer
from tests.openai_agents.agents import MODEL, triage
from tests.session.polling import snapshot_when, turn_done

USAGE = {"prompt_tokens": 30, "completion_tokens": 5, "total_tokens": 35}


@function_tool
def lookup_order(order_id: str) -> str:
    """Look up an order."""
    return f"{order_id} shipped"


async def _run_model_steps(sessions: AgentSessionClient, session_id: str) -> int:
    history = await sessions.client.read_step_history(session_id)
    return sum(1 for e in history if e.step_type == "RunModel" and e.event_type == "step_completed")


async def test_chat_completions_one_request_per_run_model_step(
    engine_factory: Any, provider: FakeProviderServer
) -> None:
    client = AsyncOpenAI(base_url=provider.openai_api_base, api_key="key-for-this-test")
    agent = Agent(
        name="orders",
        instructions="You track orders.",
        model=OpenAIChatCompletionsModel(model="qwen3-local", openai_client=client),
        tools=[lookup_order],
    )
    flow = openai_agents_session_flow(
        agent,
        flow_type="OpenAIChatOrders",
        options=AgentSessionOptions(default_tool_effect=ToolEffect.READ),
    )
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    provider.enqueue(
        CHAT_PATH,
        chat_stream(tool_calls=[("call_1", "lookup_order", '{"order_id":"A1"}')], usage=USAGE),
        chat_stream(text="Order A1 has shipped.", usage=USAGE),
    )
    await sessions.start_session("chat-1", "Where is A1?")
    done = await snapshot_when(sessions, "chat-1", turn_done(1), timeout=120)

    bodies = provider.bodies(CHAT_PATH)
    assert len(bodies) == 2 == await _run_model_steps(sessions, "chat-1")
    assert all(body["stream"] is True for body in bodies)  # deltas reach AgentEvents
    assert bodies[0]["messages"][0] == {"role": "system", "content": "You track orders."}
    tool_reply = next(m for m in bodies[1]["messages"] if m["role"] == "tool")
    assert tool_reply == {"role": "tool", "tool_call_id": "call_1", "content": "A1 shipped"}
    assert done.messages[-1].text == "Order A1 has shipped."
    assert done.usage.model_calls == 2 and done.usage.input_tokens == 60


async def test_responses_api_one_request_per_run_model_step(
    engine_factory: Any, provider: FakeProviderServer
) -> None:
    client = AsyncOpenAI(base_url=provider.openai_api_base, api_key="key-for-this-test")
    agent = Agent(
        name="orders",
        instructions="You track orders.",
        model=OpenAIResponsesModel(model="gpt-5-mini", openai_client=client),
        tools=[lookup_order],
    )
    flow = openai_agents_session_flow(
        agent,
        flow_type="OpenAIResponsesOrders",
        options=AgentSessionOptions(default_tool_effect=ToolEffect.READ),
    )
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    call = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "lookup_order",
        "arguments": '{"order_id":"A2"}',
        "status": "completed",
    }
    answer = {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "A2 has shipped.", "annotations": []}],
    }
    usage = {"input_tokens": 30, "output_tokens": 5, "total_tokens": 35}
    provider.enqueue(
        RESPONSES_PATH,
        responses_stream(output=[call], usage=usage),
        responses_stream(output=[answer], usage=usage),
    )
    await sessions.start_session("resp-1", "Where is A2?")
    done = await snapshot_when(sessions, "resp-1", turn_done(1), timeout=120)

    bodies = provider.bodies(RESPONSES_PATH)
    assert len(bodies) == 2 == await _run_model_steps(sessions, "resp-1")
    outputs = [i for i in bodies[1]["input"] if i.get("type") == "function_call_output"]
    assert outputs == [
        {"call_id": "call_1", "output": "A2 shipped", "type": "function_call_output"}
    ]
    assert done.messages[-1].text == "A2 has shipped."


async def test_the_spec_recipe_sends_mcp_calls_with_the_steps_key(
    engine_factory: Any, mcp_http: HttpMcpServer
) -> None:
    tools = McpToolSource([McpStreamableHttpServerConfig(name="t", url=mcp_http.url)])
    listed = {tool.name: tool for tool in await tools.list_tools()}
    echo = listed["t__echo"]

    async def call_echo(_ctx: Any, arguments: str) -> str:
        key = get_current_deferred_tool_execution().idempotency_key
        result = await tools.call_tool(echo.name, arguments, idempotency_key=key)
        return result.output

    schema_only = FunctionTool(
        name=echo.name,
        description=echo.description,
        params_json_schema=dict(echo.input_schema),
        on_invoke_tool=call_echo,
        strict_json_schema=False,
    )
    agent = Agent(name="mcp_user", model=MODEL, tools=[schema_only])
    flow = openai_agents_session_flow(
        agent,
        flow_type="OpenAIMcpRecipe",
        options=AgentSessionOptions(tool_policies=tools.merge_tool_policies({})),
    )
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("recipe-1", "mcp echo")
    done = await snapshot_when(sessions, "recipe-1", turn_done(1), timeout=120)

    [(args, meta)] = mcp_http.state.called("echo")
    assert args == {"text": "hi"} and meta[IDEMPOTENCY_KEY] == "recipe-1/turn-1/m1"
    tool = next(m for m in done.messages if m.role is MessageRole.TOOL)
    assert "hi" in (tool.tool_output or "")


def test_what_cannot_run_as_tool_steps_is_refused_at_flow_build() -> None:
    hosted = Agent(name="web", tools=[WebSearchTool()])
    with pytest.raises(ValueError, match="WebSearchTool"):
        openai_agents_session_flow(hosted, flow_type="Hosted")
    twin = Agent(name="triage")
    with pytest.raises(ValueError, match="unique"):
        openai_agents_session_flow(Agent(name="triage", handoffs=[twin]), flow_type="Twins")
    with pytest.raises(ValueError, match="session_settings"):
        from agents.memory import SessionSettings

        OpenAIAgentsRunner(triage, run_config=RunConfig(session_settings=SessionSettings()))
    with pytest.raises(TypeError, match=r"agents\.Agent"):
        OpenAIAgentsRunner(object())  # type: ignore[arg-type]
    with socket.socket() as held:
        with pytest.raises(AgentTravelError, match="context"):
            OpenAIAgentsRunner(triage, context=held)


def test_mcp_servers_are_warned_as_at_least_once() -> None:
    class Server:  # an MCP server object as the SDK takes it (never connected here)
        name = "inline"

    agent = Agent(name="with_mcp", mcp_servers=[Server()])  # type: ignore[list-item]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        OpenAIAgentsRunner(agent)
    assert any("at-least-once" in str(w.message) for w in caught)


def test_an_agent_with_an_openai_client_travels_by_value_and_tracing_is_off() -> None:
    client = AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="key-for-this-test")
    local = Agent(name="local", model=OpenAIChatCompletionsModel("m", openai_client=client))
    runner = OpenAIAgentsRunner(local)
    arrived = cloudpickle.loads(cloudpickle.dumps(runner))
    assert arrived.agent is not local
    assert str(arrived.agent.model._client.base_url) == "http://127.0.0.1:9/v1/"
    assert runner._config(None).tracing_disabled is True  # type: ignore[arg-type]
    traced = OpenAIAgentsRunner(local, run_config=RunConfig(tracing_disabled=False))
    assert traced._config(None).tracing_disabled is False  # type: ignore[arg-type]
    assert json.loads(runner.build_user_message("hi").framework_item)["item"] == {
        "role": "user",
        "content": "hi",
    }
