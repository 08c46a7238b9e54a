"""A built-in loop agent for session tests on the engine.

The Flow is stored by value with the engine and unpickled in Ray workers,
which import this module by name.
"""

from __future__ import annotations

import json

from dex_agents_ray import AgentSessionFlow, ToolEffect
from dex_agents_ray.builtin_loop import (
    AgentDefinition,
    ModelRequest,
    ScriptedModelClient,
    ScriptedModelReply,
    ScriptedToolCall,
    ToolCallContext,
    builtin_agent_session_flow,
    function_tool,
)


@function_tool(effect=ToolEffect.READ)
async def lookup_order(order_id: str, context: ToolCallContext) -> dict[str, str]:
    """Look up an order by its ID."""
    return {"order_id": order_id, "status": "shipped", "key": context.idempotency_key}


def reply(request: ModelRequest) -> ScriptedModelReply:
    results = ScriptedModelClient.tool_results(request)
    if results:
        return ScriptedModelReply(text="; ".join(result.output for result in results))
    return ScriptedModelReply(
        tool_calls=[
            ScriptedToolCall(
                tool_call_id="call-1", tool_name="lookup_order", arguments={"order_id": "A1"}
            )
        ]
    )


def build_flow() -> AgentSessionFlow:
    support_agent = AgentDefinition(
        name="support",
        instructions="You help customers with their orders.",
        model=ScriptedModelClient(reply),
        tools=[lookup_order],
    )
    return builtin_agent_session_flow(support_agent, flow_type="BuiltinSupportAgent")


def plan_reply(request: ModelRequest) -> ScriptedModelReply:
    """Plan mode: write a draft with write_todos, then say what the model saw."""
    offered = sorted(tool.name for tool in request.tools)
    notes = [text for text in ScriptedModelClient.user_texts(request) if text.startswith("[Dex]")]
    if ScriptedModelClient.tool_results(request):
        return ScriptedModelReply(text=f"offered={offered}; note={notes[0].splitlines()[0]}")
    if "write_todos" not in offered:
        return ScriptedModelReply(text=f"offered={offered}; notes={len(notes)}")
    todos = {"todos": [{"content": "back up", "status": "pending"}]}
    return ScriptedModelReply(
        tool_calls=[ScriptedToolCall(tool_call_id="t1", tool_name="write_todos", arguments=todos)]
    )


def build_plan_flow() -> AgentSessionFlow:
    from dex_agents_ray import BuiltInTool

    agent = AgentDefinition(
        name="planner",
        instructions="You plan.",
        model=ScriptedModelClient(plan_reply),
        tools=[lookup_order],
        built_in_tools=frozenset({BuiltInTool.WRITE_TODOS}),
        plan_mode_enabled=True,
    )
    return builtin_agent_session_flow(agent, flow_type="BuiltinPlanner")


def build_compacting_flow(
    state_dir: str,
    *,
    window_tokens: int = 1500,
    retained_message_limit: int = 8,
    event_stream_capacity_bytes: int = 10 * 1024 * 1024,
    inline_tools: bool = False,
    calls_per_turn: int = 1,
) -> AgentSessionFlow:
    """A support agent that compacts a small context window and keeps few messages.

    Its model logs every call to ``model.log``: ``summary`` for a summary call,
    else ``call/<items>/<summary seen>/<unknown results>``. With the file
    ``gate-summary`` in ``state_dir``, a summary call waits at gate ``summary``.
    """
    import dataclasses
    import os

    from dex_agents_ray import (
        CONTEXT_SUMMARY_INSTRUCTIONS,
        CONTEXT_SUMMARY_NOTE_HEADER,
        CompactionPolicy,
    )
    from dex_agents_ray.builtin_loop import (
        BuiltinLoopAgentRunner,
        UserTextItem,
        builtin_agent_session_options,
    )
    from dex_agents_ray.session._runner import OUTCOME_UNKNOWN_TEXT
    from dex_agents_ray.testing import FileGate, InvocationLog

    async def respond(request: ModelRequest) -> ScriptedModelReply:
        log = InvocationLog(os.path.join(state_dir, "model.log"))
        if request.instructions == CONTEXT_SUMMARY_INSTRUCTIONS:
            log.record("summary")
            if _gated(state_dir):
                await FileGate(state_dir, "summary").wait_for_release()
            prompt = request.input[0]
            size = len(prompt.text) if isinstance(prompt, UserTextItem) else 0
            return ScriptedModelReply(text=f"The user asked about orders ({size} chars).")
        first = request.input[0] if request.input else None
        seen = isinstance(first, UserTextItem) and first.text.startswith(
            CONTEXT_SUMMARY_NOTE_HEADER
        )
        results = ScriptedModelClient.tool_results(request)
        unknown = sum(
            1 for item in request.input if getattr(item, "output", None) == OUTCOME_UNKNOWN_TEXT
        )
        # The k-th call of a turn looks up order A<k>; the last result says which.
        done = int(json.loads(results[-1].output)["order_id"][1:]) if results else 0
        log.record(f"call/{len(request.input)}/{seen}/{unknown}/{done}")
        if done >= calls_per_turn:
            return ScriptedModelReply(text="Order A1: " + results[-1].output)
        return ScriptedModelReply(
            tool_calls=[
                ScriptedToolCall(
                    tool_call_id=f"call-{done + 1}",
                    tool_name="lookup_order",
                    arguments={"order_id": f"A{done + 1}"},
                )
            ]
        )

    agent = AgentDefinition(
        name="compacting",
        instructions="You help customers with their orders.",
        model=ScriptedModelClient(respond),
        tools=[lookup_order],
        compaction=CompactionPolicy(context_window_tokens=window_tokens),
    )
    options = dataclasses.replace(
        builtin_agent_session_options(agent),
        message_window_size=4,
        message_chunk_size=4,
        retained_message_limit=retained_message_limit,
        event_stream_capacity_bytes=event_stream_capacity_bytes,
        inline_tools=frozenset({"lookup_order"}) if inline_tools else frozenset(),
    )
    return AgentSessionFlow(BuiltinLoopAgentRunner(agent), flow_type="Compacting", options=options)


def _gated(state_dir: str) -> bool:
    """Whether summary calls wait at gate ``summary`` (the file ``gate-summary``)."""
    import os

    return os.path.exists(os.path.join(state_dir, "gate-summary"))
