"""A session Flow that can put its own stored state into the layout dex-agents 0.1.0
wrote, so tests read such a session with this release.

0.1.0 kept every message in ``AgentMessages``, with no ``AgentMessageIndex``,
no ``AgentMessageChunks``, no ``TurnReplySequence`` and no session settings,
and its Workers did not know turn control, so a turn one of them started or
advanced does not accept steering or cancellation. The two RPCs here write
exactly that through the session's own persistence definitions, in one commit
each, as a 0.1.0 Worker would have left it; ``stored_layout`` reads back where
the messages are.

The Flow is stored by value with the engine and unpickled in Ray workers, which
import this module by name.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from dex import Context, RPCResult, rpc

from dex_agents_ray import AgentSessionFlow, AgentSessionOptions
from dex_agents_ray.session import (
    AGENT_MESSAGE_CHUNKS,
    AGENT_MESSAGE_INDEX,
    AGENT_MESSAGES,
    AGENT_STATE,
    SESSION_SETTINGS,
    TURN_REPLY_SEQUENCE,
    TURN_SESSION_SETTINGS,
    message_sequence_key,
)
from tests.session.agents import ContinuingRunner, Reply


@dataclass(frozen=True, kw_only=True)
class StoredLayout:
    """Where a session's messages are stored."""

    window: tuple[int, ...]
    """Sequences in ``AgentMessages``, oldest first."""
    chunks: tuple[tuple[int, int], ...]
    """``(first, last)`` sequence of each ``AgentMessageChunks`` instance, oldest first."""
    indexed: bool
    """Whether ``AgentMessageIndex`` is set."""


class LegacyFixtureFlow(AgentSessionFlow):
    """``AgentSessionFlow`` plus the fixture RPCs that write the 0.1.0 layout."""

    @rpc(is_transactional=True, load_attribute_maps=(AGENT_MESSAGES, AGENT_MESSAGE_CHUNKS))
    def store_as_0_1_0(self, context: Context) -> RPCResult[int]:
        """Move every chunked message back into ``AgentMessages`` and delete what
        0.1.0 did not write; returns how many messages the window then holds."""
        for key in AGENT_MESSAGE_CHUNKS.get_all_instance_keys(context):
            chunk = AGENT_MESSAGE_CHUNKS.get(context, key)
            if chunk is None:
                continue
            for message in chunk.messages:
                AGENT_MESSAGES.set(context, message_sequence_key(message.sequence), message)
            AGENT_MESSAGE_CHUNKS.delete(context, key)
        AGENT_MESSAGE_INDEX.delete(context)
        TURN_REPLY_SEQUENCE.delete(context)
        TURN_SESSION_SETTINGS.delete(context)
        SESSION_SETTINGS.delete(context)
        return RPCResult(len(AGENT_MESSAGES.get_all_instance_keys(context)))

    @rpc(is_transactional=True)
    def advance_turn_as_0_1_0(self, context: Context) -> RPCResult[bool]:
        """Store the active turn as a Worker without turn control leaves it; ``False``
        when no turn is active."""
        state = AGENT_STATE.get(context)
        if state is None or state.active_turn_id is None:
            return RPCResult(False)
        AGENT_STATE.set(context, replace(state, accepts_turn_control=False))
        return RPCResult(True)

    @rpc(load_attribute_maps=(AGENT_MESSAGES, AGENT_MESSAGE_CHUNKS))
    def stored_layout(self, context: Context) -> RPCResult[StoredLayout]:
        """Where the messages are stored now."""
        chunks = []
        for key in sorted(AGENT_MESSAGE_CHUNKS.get_all_instance_keys(context)):
            chunk = AGENT_MESSAGE_CHUNKS.get(context, key)
            if chunk is not None:
                chunks.append((chunk.first_sequence, chunk.last_sequence))
        window = tuple(int(key) for key in sorted(AGENT_MESSAGES.get_all_instance_keys(context)))
        return RPCResult(
            StoredLayout(
                window=window,
                chunks=tuple(chunks),
                indexed=AGENT_MESSAGE_INDEX.get(context) is not None,
            )
        )


def build_legacy_flow(
    state_dir: Path | str,
    script: dict[str, list[Reply]],
    *,
    options: AgentSessionOptions | None = None,
    flow_type: str = "LegacyAgent",
) -> LegacyFixtureFlow:
    """A ``LegacyFixtureFlow`` over ``ContinuingRunner`` (see ``tests.session.agents``),
    whose turns may continue, so one turn can store many messages."""
    runner = ContinuingRunner(str(state_dir), script, {})
    return LegacyFixtureFlow(runner, flow_type=flow_type, options=options or AgentSessionOptions())
