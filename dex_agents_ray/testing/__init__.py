"""Test helpers users can use too: gates, invocation counts, crash injection, a scripted
model, and a session driven past a small context window."""

from dex_agents_ray.builtin_loop import ScriptedModelClient
from dex_agents_ray.engine import EXECUTE_COMPLETED_EVENT
from dex_agents_ray.testing._crash import gate_before_ack_env, kill_flow_actor, kill_process
from dex_agents_ray.testing._gates import FileGate, InvocationLog
from dex_agents_ray.testing._scenarios import (
    ContextWindowScenarioResult,
    ContextWindowSessionScenario,
)

__all__ = [
    "EXECUTE_COMPLETED_EVENT",
    "ContextWindowScenarioResult",
    "ContextWindowSessionScenario",
    "FileGate",
    "InvocationLog",
    "ScriptedModelClient",
    "gate_before_ack_env",
    "kill_flow_actor",
    "kill_process",
]
