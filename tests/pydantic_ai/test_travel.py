"""How a Pydantic AI agent travels to the Ray processes that run its Steps, and
the clear errors for agents, deps and tools that cannot."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

import pytest
import ray
from pydantic_ai import Agent
from pydantic_ai.capabilities import NativeTool
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.native_tools import WebSearchTool
from pydantic_ai.providers.openai import OpenAIProvider
from ray import cloudpickle

from dex_agents_ray.pydantic_ai import AgentTravelError, PydanticAIRunner, pydantic_ai_session_flow
from dex_agents_ray.testing import InvocationLog
from tests.pydantic_ai.agents import Deps, agent

_ROOT = Path(__file__).resolve().parents[2]


async def test_an_agent_built_in_a_main_script_with_closure_tools_runs_on_ray(
    ray_session: None, namespace: str, store_path: Path, state_dir: Path
) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(_ROOT / "tests" / "pydantic_ai" / "main_script.py"),
        ray.get_runtime_context().gcs_address,
        namespace,
        str(store_path),
        str(state_dir),
        cwd=_ROOT,
        env={**os.environ, "PYTHONPATH": str(_ROOT)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=240)
    assert process.returncode == 0, err.decode()[-3000:]
    result = json.loads(out.decode().strip().splitlines()[-1])

    assert result["reference"] is None  # by value: __main__ is not importable there
    assert result["answers"] == ["total 42", "total 42"]
    pids = {int(entry.split("/")[1]) for entry in InvocationLog(state_dir / "bonus.log").entries()}
    assert len(InvocationLog(state_dir / "bonus.log").entries()) == 2
    assert result["driver_pid"] not in pids


def test_an_agent_of_an_importable_module_travels_by_reference() -> None:
    runner = PydanticAIRunner(agent)
    assert runner.agent_reference == "tests.pydantic_ai.agents:agent"
    arrived = cloudpickle.loads(cloudpickle.dumps(runner))
    assert arrived.agent is agent  # re-imported: the module's own object


def test_an_openai_model_agent_travels_by_value_and_rebuilds_its_client() -> None:
    provider = OpenAIProvider(base_url="http://127.0.0.1:9/v1", api_key="key-for-this-test")
    local = Agent(OpenAIChatModel("local-model", provider=provider), instructions="hi")
    runner = PydanticAIRunner(local)
    assert runner.agent_reference is None
    arrived = cloudpickle.loads(cloudpickle.dumps(runner)).agent
    assert arrived is not local
    client = arrived.model.client
    assert str(client.base_url) == "http://127.0.0.1:9/v1/"
    assert client.api_key == "key-for-this-test"
    assert client is not provider.client


def test_an_agent_that_cannot_travel_is_refused_naming_the_attribute(tmp_path: Path) -> None:
    handle = open(tmp_path / "held.txt", "w")  # noqa: SIM115 - held open on purpose
    try:
        local = Agent("test")

        @local.tool_plain
        def write_note(note: str) -> str:
            """Write a note to the held file."""
            handle.write(note)
            return "ok"

        with pytest.raises(AgentTravelError) as caught:
            pydantic_ai_session_flow(local, flow_type="CannotTravel")
    finally:
        handle.close()
    assert "write_note" in caught.value.path and "handle" in caught.value.path
    assert "cannot be pickled" in str(caught.value)


def test_deps_that_cannot_travel_are_refused_and_a_factory_is_built_once() -> None:
    with socket.socket() as held:
        with pytest.raises(AgentTravelError, match="deps"):
            PydanticAIRunner(agent, deps=held)
    with pytest.raises(ValueError, match="deps or deps_factory"):
        PydanticAIRunner(agent, deps=Deps("x"), deps_factory=lambda: Deps("y"))
    built: list[int] = []

    def factory() -> Deps:
        built.append(1)
        return Deps("built")

    runner = cloudpickle.loads(cloudpickle.dumps(PydanticAIRunner(agent, deps_factory=factory)))
    first = runner._deps_value()
    assert first == Deps("built") and runner._deps_value() is first  # once per process
    assert built == []  # the factory ran in the copy, not here


def test_a_native_tool_is_refused_at_flow_build_naming_it() -> None:
    web = Agent("test", capabilities=[NativeTool(WebSearchTool())])
    with pytest.raises(ValueError, match="WebSearchTool"):
        pydantic_ai_session_flow(web, flow_type="NativeTools")


def test_a_non_agent_is_refused() -> None:
    with pytest.raises(TypeError, match=r"pydantic_ai\.Agent"):
        PydanticAIRunner(object())  # type: ignore[arg-type]


def test_the_runner_implements_the_contract_and_its_options() -> None:
    from dex_agents_ray import AgentFrameworkRunner, UnfinishedTurnMessageBuilder
    from dex_agents_ray.session import ContextCompactionRunner

    runner: Any = PydanticAIRunner(agent)
    assert isinstance(runner, AgentFrameworkRunner)
    assert isinstance(runner, UnfinishedTurnMessageBuilder)
    assert isinstance(runner, ContextCompactionRunner)
