"""A user's script: a Pydantic AI agent built in a function of ``__main__`` with
closures as tools, run as durable sessions on the Ray cluster at ``argv[1]``.

Usage: python tests/pydantic_ai/main_script.py ADDRESS NAMESPACE STORE STATE_DIR
Prints one JSON line: how the agent travelled and each session's answer.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import ray
from pydantic_ai import Agent
from pydantic_ai import messages as pai
from pydantic_ai.models.function import AgentInfo, FunctionModel

from dex_agents_ray import AgentSessionClient, AgentSessionOptions, ToolEffect
from dex_agents_ray.engine import FlowEngine
from dex_agents_ray.pydantic_ai import pydantic_ai_session_flow
from dex_agents_ray.testing import InvocationLog


def build_agent(state_dir: Path, bonus: int) -> Agent[None, str]:
    def model(messages: list[pai.ModelMessage], info: AgentInfo) -> pai.ModelResponse:
        last = messages[-1]
        returns = [p for p in last.parts if isinstance(p, pai.ToolReturnPart)]
        if returns:
            return pai.ModelResponse(parts=[pai.TextPart(f"total {returns[0].content}")])
        call = pai.ToolCallPart("add_bonus", {"value": 1}, tool_call_id="b1")
        return pai.ModelResponse(parts=[call])

    agent = Agent(FunctionModel(model), instructions="Add the bonus.")

    @agent.tool_plain
    def add_bonus(value: int) -> int:
        """Add the bonus (a closure over this function's arguments)."""
        InvocationLog(state_dir / "bonus.log").record(f"bonus/{os.getpid()}")
        return value + bonus

    return agent


async def main(address: str, namespace: str, store: str, state_dir: str) -> None:
    ray.init(address=address, namespace=namespace, log_to_driver=False)
    agent = build_agent(Path(state_dir), bonus=41)
    flow = pydantic_ai_session_flow(
        agent,
        flow_type="MainScriptAgent",
        options=AgentSessionOptions(default_tool_effect=ToolEffect.READ),
    )
    engine = await FlowEngine.start([flow], store=store, namespace=namespace)
    try:
        sessions = AgentSessionClient(engine.client, flow)
        answers = []
        for session_id in ("main-1", "main-2"):
            await sessions.start_session(session_id, "go")
            while True:
                snapshot = await sessions.get_agent_snapshot(session_id)
                state = snapshot.state
                if state is not None and state.turn_count >= 1 and state.active_turn_id is None:
                    break
                await asyncio.sleep(0.05)
            answers.append(snapshot.messages[-1].text)
        print(
            json.dumps(
                {
                    "reference": flow.runner.agent_reference,  # type: ignore[attr-defined]
                    "answers": answers,
                    "driver_pid": os.getpid(),
                }
            )
        )
    finally:
        await engine.shutdown(stop_hosts=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
