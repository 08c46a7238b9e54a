"""Test helpers users can use too: the spec's testing kit (``AgentTestStack``,
``wait_until``, ``wait_for_agent_snapshot``, ``read_step_history``), gates,
invocation counts, crash injection, a scripted model, and a session driven past a
small context window. The chaos campaign is ``dex_agents_ray.testing.chaos``.

The spec's ``run_agent_worker`` has no counterpart: sessions and tools run in
Ray actors the engine names and Ray restarts, not in a Worker child process, so
``worker.kill()`` + ``start_worker()`` is ``AgentTestStack.kill_session_host``."""

from dex_agents_ray.builtin_loop import ScriptedModelClient
from dex_agents_ray.engine import EXECUTE_COMPLETED_EVENT
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

__all__ = [
    "EXECUTE_COMPLETED_EVENT",
    "AgentTestStack",
    "ContextWindowScenarioResult",
    "ContextWindowSessionScenario",
    "FileGate",
    "InvocationLog",
    "ScriptedModelClient",
    "gate_before_ack_env",
    "kill_flow_actor",
    "kill_process",
    "read_step_history",
    "wait_for_agent_snapshot",
    "wait_until",
]
