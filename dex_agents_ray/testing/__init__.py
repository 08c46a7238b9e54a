"""Test helpers users can use too: the spec's testing kit (``AgentTestStack``,
``run_agent_worker``, ``wait_until``, ``wait_for_agent_snapshot``,
``read_step_history``), gates, invocation counts, crash injection, a scripted
model, and a session driven past a small context window. The chaos campaign is
``dex_agents_ray.testing.chaos``.

The spec's Worker child is a Ray driver here: ``run_agent_worker([flow])`` in
the module an ``AgentTestStack`` was given owns the namespace's hosts and
executors, so ``worker.kill()`` ends them and ``await stack.start_worker()``
resumes the runs on a new one. ``AgentTestStack.kill_session_host`` crashes one
host at a time instead.

``ScriptedModelClient`` (the built-in loop's) is imported on first use: the gates
and logs are imported by the Ray workers of every test agent, most of which run
no built-in loop."""

from typing import TYPE_CHECKING, Any

from dex_agents_ray.engine import EXECUTE_COMPLETED_EVENT, StepHistoryEntry
from dex_agents_ray.testing._crash import gate_before_ack_env, kill_flow_actor, kill_process
from dex_agents_ray.testing._gates import FileGate, InvocationLog
from dex_agents_ray.testing._scenarios import (
    ContextWindowScenarioResult,
    ContextWindowSessionScenario,
)
from dex_agents_ray.testing._stack import (
    AgentTestStack,
    read_step_history,
    wait_for_agent_snapshot,
    wait_until,
)
from dex_agents_ray.testing._worker import AgentWorker, run_agent_worker

if TYPE_CHECKING:
    from dex_agents_ray.builtin_loop import ScriptedModelClient
else:

    def __getattr__(name: str) -> Any:
        if name == "ScriptedModelClient":
            from dex_agents_ray.builtin_loop import ScriptedModelClient

            globals()[name] = ScriptedModelClient
            return ScriptedModelClient
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "EXECUTE_COMPLETED_EVENT",
    "AgentTestStack",
    "AgentWorker",
    "ContextWindowScenarioResult",
    "ContextWindowSessionScenario",
    "FileGate",
    "InvocationLog",
    "ScriptedModelClient",
    "StepHistoryEntry",
    "gate_before_ack_env",
    "kill_flow_actor",
    "kill_process",
    "read_step_history",
    "run_agent_worker",
    "wait_for_agent_snapshot",
    "wait_until",
]
