"""A tool Step's call goes to Pydantic AI's ``ToolManager`` without a run when the
agent allows it; what it returns must be what the run's own dispatch returns.

Each case runs one tool call both ways in this process: by the direct dispatch
and by a run of the agent that stops before the model (the path every other
agent takes), and compares the parts (timestamps aside). No Ray here: the
sessions' tests run the same calls in tool Steps.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import pytest
from pydantic_ai import Agent, ModelRetry, RunContext, ToolReturn
from pydantic_ai import messages as pai
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import ToolFailed
from pydantic_ai.models.test import TestModel
from pydantic_ai.tools import ToolDefinition

from dex_agents_ray.pydantic_ai import _tools


@dataclass
class Deps:
    unit: str


def _agent() -> Agent[Deps, str]:
    agent = Agent(TestModel(), deps_type=Deps, retries=2)

    @agent.tool
    async def priced(ctx: RunContext[Deps], amount: int) -> str:
        return f"{amount} {ctx.deps.unit}"

    @agent.tool_plain
    def picky(value: int) -> str:
        if value < 10:
            raise ModelRetry("value must be at least 10")
        return f"ok {value}"

    @agent.tool_plain
    async def broken() -> str:
        raise ToolFailed("the ledger is closed")

    @agent.tool_plain
    async def noted() -> ToolReturn[Any]:
        return ToolReturn(return_value="saved", content="look at this", metadata={"k": 1})

    @agent.tool_plain
    async def listed(count: int) -> list[int]:
        return list(range(count))

    return agent


CASES = [
    ("priced", '{"amount": 3}'),
    ("priced", '{"amount": "three"}'),  # arguments the tool refuses
    ("picky", '{"value": 3}'),  # ModelRetry
    ("picky", '{"value": 12}'),
    ("broken", "{}"),  # ToolFailed
    ("noted", "{}"),  # a ToolReturn with content for the model
    ("listed", '{"count": 3}'),
    ("missing", "{}"),  # a tool the agent does not have
]


def _comparable(parts: list[Any]) -> list[Any]:
    return [replace(part, timestamp=None) if hasattr(part, "timestamp") else part for part in parts]


@pytest.mark.parametrize(("name", "arguments"), CASES)
async def test_the_direct_dispatch_returns_what_the_runs_dispatch_returns(
    name: str, arguments: str
) -> None:
    agent = _agent()
    assert _tools._dispatches_directly(agent)
    call = pai.ToolCallPart(name, arguments, tool_call_id="c1")
    history: list[pai.ModelMessage] = [pai.ModelResponse(parts=[call])]
    deps = Deps(unit="EUR")

    direct = await _tools._dispatch(agent, call, history, False, deps, "run-direct")
    by_run = await _tools._drive_to_result(agent, history, None, deps, "run-graph", "c1")

    assert _comparable(direct) == _comparable(by_run)


@dataclass
class _Audit(AbstractCapability[Any]):
    seen: list[str]

    async def before_run(self, ctx: RunContext[Any]) -> None:
        self.seen.append("run")


@dataclass
class _Hooked(AbstractCapability[Any]):
    async def before_tool_execute(
        self, ctx: RunContext[Any], *, call: pai.ToolCallPart, tool_def: ToolDefinition, args: Any
    ) -> Any:
        return {**args, "amount": args["amount"] * 10}


async def test_a_capability_with_a_run_hook_takes_the_run_path() -> None:
    assert not _tools._dispatches_directly(Agent(TestModel(), capabilities=[_Audit([])]))


async def test_the_direct_dispatch_runs_the_capabilities_tool_hooks() -> None:
    agent = Agent(TestModel(), capabilities=[_Hooked()])

    @agent.tool_plain
    async def priced(amount: int) -> str:
        return f"{amount} EUR"

    assert _tools._dispatches_directly(agent)
    call = pai.ToolCallPart("priced", '{"amount": 3}', tool_call_id="c1")
    history: list[pai.ModelMessage] = [pai.ModelResponse(parts=[call])]
    [part] = await _tools._dispatch(agent, call, history, False, None, "run-hooked")
    assert isinstance(part, pai.ToolReturnPart)
    assert part.content == "30 EUR"
