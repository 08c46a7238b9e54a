"""LangGraph with ``AsyncSqliteSaver``.

Graph: START -> model -> (one ``Send("tool", call)`` per tool call | END); tool ->
model. The tool tasks of a turn run in one super-step; each task's writes are saved
and each super-step is checkpointed. State is ``MessagesState`` (langchain-core
messages), as a LangGraph agent has it. A session is one thread; a turn is one
``ainvoke`` on it.

Variants (LangGraph's ``durability``):
    async: LangGraph's default: a checkpoint is persisted while the next step runs.
    sync: a checkpoint is persisted before the next step starts.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Durability, Send

from .workload import TURNS, Message, ToolCall, run_tool, scripted_model, user_message

# Distributions whose versions a job reports.
PACKAGES: tuple[str, ...] = (
    "langgraph",
    "langgraph-checkpoint-sqlite",
    "aiosqlite",
    "langchain-core",
)

_DURABILITY: dict[str, Durability] = {"async": "async", "sync": "sync"}
_Graph = CompiledStateGraph[MessagesState, None, MessagesState, MessagesState]
_ROLES = {"human": "user", "ai": "assistant", "tool": "tool"}


def _as_message(message: AnyMessage) -> Message:
    return {"role": _ROLES[message.type], "content": str(message.content)}


async def _model_node(state: MessagesState) -> dict[str, list[AnyMessage]]:
    reply = scripted_model([_as_message(m) for m in state["messages"]])
    calls = [dict(c) for c in reply.get("tool_calls", [])]
    return {"messages": [AIMessage(content=reply["content"], tool_calls=calls)]}


async def _tool_node(call: ToolCall) -> dict[str, list[AnyMessage]]:
    result = run_tool(call)
    message = ToolMessage(content=result["content"], tool_call_id=result.get("tool_call_id", ""))
    return {"messages": [message]}


def _route(state: MessagesState) -> list[Send] | str:
    last = state["messages"][-1]
    calls = last.tool_calls if isinstance(last, AIMessage) else []
    if not calls:
        return END
    return [Send("tool", c) for c in calls]


def _build_graph(checkpointer: AsyncSqliteSaver) -> _Graph:
    graph = StateGraph(MessagesState)
    graph.add_node("model", _model_node)
    # A Send target gets the Send's argument, not the state, which add_node's types forbid.
    graph.add_node("tool", cast(Any, _tool_node))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", _route, ["tool", END])
    graph.add_edge("tool", "model")
    return graph.compile(checkpointer=checkpointer)


class LangGraphPeer:
    """One step is a task write; each super-step is a checkpoint."""

    def __init__(self, graph: _Graph, durability: Durability) -> None:
        self._graph = graph
        self._durability = durability

    async def session(self, session_id: str) -> None:
        config: RunnableConfig = {"configurable": {"thread_id": session_id}}
        for turn in range(TURNS):
            message = HumanMessage(content=user_message(turn)["content"])
            await self._graph.ainvoke({"messages": [message]}, config, durability=self._durability)


@asynccontextmanager
async def open_system(workdir: Path, variant: str) -> AsyncIterator[LangGraphPeer]:
    async with AsyncSqliteSaver.from_conn_string(str(workdir / "langgraph.sqlite")) as saver:
        yield LangGraphPeer(_build_graph(saver), _DURABILITY[variant])
