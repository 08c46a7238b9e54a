"""A built-in loop agent with a spend limit; its model logs each call to
``<state_dir>/model.log`` as ``<session>``. Ray workers import it by name."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from dex_agents_ray import AgentSessionFlow, ModelSpendLimit
from dex_agents_ray.builtin_loop import (
    AgentDefinition,
    BuiltinLoopAgentRunner,
    ModelRequest,
    ScriptedModelClient,
    ScriptedModelReply,
    builtin_agent_session_options,
)
from dex_agents_ray.testing import InvocationLog


def build_flow(state_dir: str, limit: ModelSpendLimit) -> AgentSessionFlow:
    def respond(request: ModelRequest) -> ScriptedModelReply:
        texts = ScriptedModelClient.user_texts(request)
        InvocationLog(os.path.join(state_dir, "model.log")).record(texts[-1])
        return ScriptedModelReply(text="answered " + texts[-1])

    agent = AgentDefinition(
        name="metered",
        instructions="You answer.",
        model=ScriptedModelClient(respond),
    )
    options: Any = dataclasses.replace(builtin_agent_session_options(agent), spend_limit=limit)
    return AgentSessionFlow(BuiltinLoopAgentRunner(agent), flow_type="Metered", options=options)
