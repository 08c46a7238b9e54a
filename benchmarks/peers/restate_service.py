"""The Restate service of the ``restate`` peer: the workload as one Restate handler.

Served by hypercorn in its own process (``restate_peer.py`` starts it) and called by
restate-server, which journals each ``ctx.run`` (one workload step) before the
handler goes on. A session is one invocation of ``agent/session``; the tool calls of
a turn run as concurrent ``ctx.run`` actions joined with ``restate.gather``, the
Restate way to await several durable steps at once.
"""

from __future__ import annotations

import restate

from .workload import TURNS, Message, run_tool, scripted_model, user_message

agent = restate.Service("agent")


@agent.handler()
async def session(ctx: restate.Context, session_id: str) -> int:
    """One workload session; returns the transcript's length so the client can check
    that every turn ran (``session_id`` only makes each invocation's input distinct)."""
    messages: list[Message] = []
    for turn in range(TURNS):
        messages.append(user_message(turn))
        reply = await ctx.run_typed("model", scripted_model, restate.RunOptions(), messages)
        messages.append(reply)
        tools = [
            ctx.run_typed("tool", run_tool, restate.RunOptions(), call)
            for call in reply.get("tool_calls", [])
        ]
        await restate.gather(*tools)
        messages += [await tool for tool in tools]
        messages.append(
            await ctx.run_typed("model", scripted_model, restate.RunOptions(), messages)
        )
    return len(messages)


app = restate.app(services=[agent])
"""The ASGI application hypercorn serves (``benchmarks.peers.restate_service:app``)."""
