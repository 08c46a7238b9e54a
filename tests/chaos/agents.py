"""The campaign's test agent: every tool effect, approvals, questions, a durable
wait and a tool task, over the scripted runner of ``tests.session.agents``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from dex_agents_ray import (
    AgentSessionFlow,
    AgentSessionOptions,
    BuiltInTool,
    ToolEffect,
    ToolPolicy,
)
from dex_agents_ray.testing import InvocationLog
from dex_agents_ray.testing.chaos import ToolInvocation
from tests.session.agents import Call, Reply, TaskRunner, build_flow

TURNS = (
    "look, save and note",
    "pay the invoice",
    "ask me",
    "wait a moment",
    "run the job",
)
"""One session's user messages, in order."""

TOOLS = {
    "look": ToolPolicy(ToolEffect.READ, requires_approval=False),
    "save": ToolPolicy(ToolEffect.IDEMPOTENT_WRITE, requires_approval=False),
    "note": ToolPolicy(ToolEffect.UNCLASSIFIED, requires_approval=False),
    "pay": ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE, requires_approval=True),
    "pick": ToolPolicy(ToolEffect.READ, requires_approval=False),
    "job": ToolPolicy(ToolEffect.IDEMPOTENT_WRITE, requires_approval=False),
}
"""The tools that log their runs (built-in tools are the session's own)."""

SCRIPT = {
    TURNS[0]: [Reply(calls=[Call("l1", "look"), Call("s1", "save"), Call("n1", "note")]), Reply()],
    TURNS[1]: [Reply(calls=[Call("p1", "pay"), Call("l2", "look")]), Reply()],
    TURNS[2]: [
        Reply(
            calls=[
                Call("k1", "pick"),
                Call("q1", "ask_user", {"question": "Color?", "choices": ["red", "blue"]}),
            ]
        ),
        Reply(),
    ],
    TURNS[3]: [
        Reply(calls=[Call("w1", "durable_wait", {"duration_seconds": 2, "reason": "cool down"})]),
        Reply(),
    ],
    TURNS[4]: [Reply(calls=[Call("j1", "job"), Call("s2", "save")]), Reply()],
}


def build_campaign_flow(state_dir: Path, flow_type: str = "ChaosAgent") -> AgentSessionFlow:
    """The campaign's flow; its tool task finishes on its second poll."""
    (state_dir / "task-done").touch()
    options = AgentSessionOptions(
        tool_policies=TOOLS,
        built_in_tools=frozenset({BuiltInTool.ASK_USER, BuiltInTool.DURABLE_WAIT}),
    )
    return build_flow(
        state_dir,
        SCRIPT,
        {"pick": "ask", "job": "task"},
        options=options,
        runner_class=TaskRunner,
        flow_type=flow_type,
    )


def invocations(state_dir: Path) -> Iterator[ToolInvocation]:
    """Every real tool run the scripted tools logged
    (``<call>/<attempt>/<session>/<turn>/<call>/<pid>``)."""
    for tool in TOOLS:
        for entry in InvocationLog(state_dir / f"{tool}.log").entries():
            call_id, attempt, session_id, turn_id, _, _ = entry.split("/")
            yield ToolInvocation(
                session_id=session_id, turn_id=turn_id, tool_call_id=call_id, attempt=int(attempt)
            )
