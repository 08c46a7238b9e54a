"""MCP tools of a Pydantic AI session: the agent's own ``MCPToolset`` and an
``McpToolSource`` in ``tool_sources``, each call a tool Step that sends the
Step's idempotency key to a real MCP server over Streamable HTTP."""

from __future__ import annotations

from typing import Any

from pydantic_ai import Agent
from pydantic_ai import messages as pai
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.models.function import AgentInfo, FunctionModel

from dex_agents_ray import AgentSessionClient, AgentSessionOptions, MessageRole, ToolEffect
from dex_agents_ray.mcp import McpStreamableHttpServerConfig, McpToolSource
from dex_agents_ray.pydantic_ai import pydantic_ai_session_flow
from tests.mcp.mcp_server import IDEMPOTENCY_KEY, HttpMcpServer
from tests.session.polling import snapshot_when, turn_done


def _calling(*calls: tuple[str, str, dict[str, Any]]) -> FunctionModel:
    def model(messages: list[pai.ModelMessage], info: AgentInfo) -> pai.ModelResponse:
        returns = [p for p in messages[-1].parts if isinstance(p, pai.ToolReturnPart)]
        if returns:
            return pai.ModelResponse(parts=[pai.TextPart(f"{len(returns)} results")])
        parts = [pai.ToolCallPart(name, args, tool_call_id=cid) for cid, name, args in calls]
        return pai.ModelResponse(parts=parts)

    return FunctionModel(model)


async def _completed(sessions: AgentSessionClient, session_id: str) -> list[str]:
    history = await sessions.client.read_step_history(session_id)
    return [e.step_type for e in history if e.event_type == "step_completed"]


async def test_the_agents_mcp_toolset_calls_run_as_tool_steps_with_effects_and_keys(
    engine_factory: Any, mcp_http: HttpMcpServer
) -> None:
    model = _calling(("e1", "echo", {"text": "hi"}), ("n1", "add_note", {}))
    agent = Agent(model, toolsets=[MCPToolset(mcp_http.url)])
    flow = pydantic_ai_session_flow(agent, flow_type="PydanticMcpToolset")
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)

    await sessions.start_session("mcp-1", "go")
    done = await snapshot_when(sessions, "mcp-1", turn_done(1), timeout=120)

    assert done.messages[-1].text == "2 results"
    # readOnlyHint: a read (CallTool); idempotentHint: an idempotent write (CallTool,
    # no approval); neither waited for a person.
    assert (await _completed(sessions, "mcp-1")).count("CallTool") == 2
    [(echo_args, echo_meta)] = mcp_http.state.called("echo")
    assert echo_args == {"text": "hi"} and echo_meta[IDEMPOTENCY_KEY] == "mcp-1/turn-1/e1"
    [(_, note_meta)] = mcp_http.state.called("add_note")
    assert note_meta[IDEMPOTENCY_KEY] == "mcp-1/turn-1/n1"
    echoed = next(m for m in done.messages if m.role is MessageRole.TOOL and m.tool_call_id == "e1")
    assert "hi" in (echoed.tool_output or "")


async def test_tool_sources_are_offered_beside_the_agents_tools(
    engine_factory: Any, mcp_http: HttpMcpServer
) -> None:
    source = McpToolSource([McpStreamableHttpServerConfig(name="t", url=mcp_http.url)])
    agent = Agent(_calling(("s1", "t__echo", {"text": "from a source"})))
    flow = pydantic_ai_session_flow(
        agent,
        flow_type="PydanticMcpSource",
        tool_sources=[source],
        options=AgentSessionOptions(tool_policies=source.merge_tool_policies({})),
    )
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)

    await sessions.start_session("src-1", "go")
    done = await snapshot_when(sessions, "src-1", turn_done(1), timeout=120)

    assert done.messages[-1].text == "1 results"
    [(args, meta)] = mcp_http.state.called("echo")
    assert args == {"text": "from a source"} and meta[IDEMPOTENCY_KEY] == "src-1/turn-1/s1"
    assert ToolEffect.READ.value == "read"
