"""Message storage: the window, immutable chunks and the index.

The newest messages are the window, one ``AgentMessages`` instance each, so
storing a message writes only that message. When the window holds more than
``message_window_size`` messages, its oldest move into ``AgentMessageChunks``
instances in the same commit, at most 4 chunks and 8 MiB per commit. A
message larger than ``message_chunk_max_bytes`` skips the window and goes
into its own chunk. Every Step that stores messages loads the whole window.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from dex import Context

from dex_agents_ray.engine.sdk._stored import encoded_size as stored_encoded_size
from dex_agents_ray.engine.sdk._stored import stored_size
from dex_agents_ray.errors import DexAgentsError
from dex_agents_ray.session._api import AgentSessionOptions
from dex_agents_ray.session._schema import (
    AGENT_MESSAGE_CHUNKS,
    AGENT_MESSAGE_INDEX,
    AGENT_MESSAGES,
    CONTEXT_SUMMARY,
    message_sequence_key,
)
from dex_agents_ray.session._values import (
    AgentMessage,
    AgentMessageChunk,
    AgentMessageChunkInfo,
    AgentMessageIndex,
    FrameworkMessage,
    json_ready,
)

__all__ = [
    "MessageTooLargeError",
    "append_messages",
    "apply_retention",
    "load_messages",
    "window_messages",
]

MAX_CHUNK_BYTES = 8 * 1024 * 1024
"""The hard limit on one chunk's encoded JSON."""
MAX_CHUNKS_PER_COMMIT = 4
"""At most this many chunks move out of the window in one commit."""


class MessageTooLargeError(DexAgentsError, ValueError):
    """A message's JSON exceeds ``MAX_CHUNK_BYTES``, more than one chunk may hold.

    No retry can store it, so the Step that stores it fails its turn at once
    instead of being retried; nothing of the batch it came in is stored.
    """

    def __init__(self, *, role: str, size: int) -> None:
        super().__init__(
            f"the {role} message is {size} bytes of JSON; a stored message holds at most "
            f"{MAX_CHUNK_BYTES}"
        )
        self.role = role
        self.size = size


def encoded_size(message: AgentMessage, context: Context | None = None) -> int:
    """Bytes of the message's JSON: what the store keeps when ``context`` is this
    engine's, else the compact JSON's length."""
    if context is not None:
        size = stored_encoded_size(context, AGENT_MESSAGES, message)
        if size is not None:
            return size
    text = json.dumps(json_ready(message), separators=(",", ":"), sort_keys=True)
    return len(text.encode("utf-8"))


class _Window:
    """The window as keys and stored sizes; a message is decoded only when it
    moves into a chunk (a model Step's transcript already decoded them all), and
    a stored message's size is read only when chunking needs it (a window under
    its limit never does)."""

    def __init__(self, context: Context) -> None:
        self._context = context
        self.entries: list[tuple[str, int | None, AgentMessage | None]] = [
            (key, None, None) for key in sorted(AGENT_MESSAGES.get_all_instance_keys(context))
        ]

    def __len__(self) -> int:
        return len(self.entries)

    def add(self, message: AgentMessage, size: int) -> None:
        self.entries.append((message_sequence_key(message.sequence), size, message))

    def first_sequence(self) -> int:
        return int(self.entries[0][0])

    def size(self, index: int) -> int:
        """Stored bytes of the ``index``-th oldest message (measured once)."""
        key, size, message = self.entries[index]
        if size is None:
            size = stored_size(self._context, AGENT_MESSAGES, key)
            if size is None:  # not this engine's Context
                message = self._message(key)
                size = encoded_size(message, self._context)
            self.entries[index] = (key, size, message)
        return size

    def take(self, count: int) -> tuple[list[AgentMessage], list[int]]:
        """Remove and return the ``count`` oldest messages and their sizes."""
        sizes = [self.size(i) for i in range(count)]
        taken, self.entries = self.entries[:count], self.entries[count:]
        messages = [m if m is not None else self._message(key) for key, _, m in taken]
        return messages, sizes

    def _message(self, key: str) -> AgentMessage:
        message = AGENT_MESSAGES.get(self._context, key)
        if message is None:
            raise RuntimeError(f"window message {key} vanished while being chunked")
        return message


def window_messages(context: Context) -> list[AgentMessage]:
    """The window's messages in sequence order (needs the whole map loaded)."""
    messages = []
    for key in sorted(AGENT_MESSAGES.get_all_instance_keys(context)):
        message = AGENT_MESSAGES.get(context, key)
        if message is not None:
            messages.append(message)
    return messages


def load_messages(context: Context, *, after: int = 0) -> list[AgentMessage]:
    """Every kept message, oldest first; with ``after``, the chunks that hold only
    messages at or before it are skipped (they need not be loaded). Needs the
    window and the other chunks loaded."""
    index = AGENT_MESSAGE_INDEX.get(context)
    messages: list[AgentMessage] = []
    if index is not None:
        for info in index.chunks:
            if info.last_sequence <= after:
                continue
            chunk = AGENT_MESSAGE_CHUNKS.get(context, message_sequence_key(info.first_sequence))
            if chunk is None:
                raise RuntimeError(
                    f"message chunk {info.first_sequence}..{info.last_sequence} is missing"
                )
            messages.extend(chunk.messages)
    messages.extend(window_messages(context))
    return messages


def chunks_after(context: Context, sequence: int) -> list[str]:
    """The keys of the kept chunks that hold a message after ``sequence``."""
    index = AGENT_MESSAGE_INDEX.get(context)
    if index is None:
        return []
    return [
        message_sequence_key(info.first_sequence)
        for info in index.chunks
        if info.last_sequence > sequence
    ]


def _write_chunk(
    context: Context, messages: Sequence[AgentMessage], sizes: Sequence[int]
) -> AgentMessageChunkInfo:
    chunk = AgentMessageChunk(
        first_sequence=messages[0].sequence,
        last_sequence=messages[-1].sequence,
        messages=tuple(messages),
    )
    AGENT_MESSAGE_CHUNKS.set(context, message_sequence_key(chunk.first_sequence), chunk)
    for message in messages:
        AGENT_MESSAGES.delete(context, message_sequence_key(message.sequence))
    return AgentMessageChunkInfo(
        first_sequence=chunk.first_sequence,
        last_sequence=chunk.last_sequence,
        encoded_bytes=sum(sizes),
    )


def _take_chunk(window: _Window, options: AgentSessionOptions) -> int:
    """How many of the oldest window messages fit one chunk (at least one)."""
    count, total = 0, 0
    for index in range(len(window)):
        size = window.size(index)
        if count and (
            count >= options.message_chunk_size or total + size > options.message_chunk_max_bytes
        ):
            break
        count += 1
        total += size
    return count


def _stage(
    context: Context,
    messages: Sequence[FrameworkMessage],
    *,
    last_sequence: int,
    turn_id: str,
    now: datetime,
) -> list[tuple[AgentMessage, str, int]]:
    """Stage each message in the window and measure it as staged (it is encoded
    once); when one is too large, take every one back and raise."""
    staged: list[tuple[AgentMessage, str, int]] = []
    for message in messages:
        last_sequence += 1
        stored = AgentMessage.from_framework(
            message, sequence=last_sequence, turn_id=turn_id, created_at=now
        )
        key = message_sequence_key(stored.sequence)
        AGENT_MESSAGES.set(context, key, stored)
        size = stored_size(context, AGENT_MESSAGES, key)
        if size is None:  # not this engine's Context
            size = encoded_size(stored, context)
        staged.append((stored, key, size))
        if size > MAX_CHUNK_BYTES:
            for _, taken, _ in staged:
                AGENT_MESSAGES.delete(context, taken)
            raise MessageTooLargeError(role=stored.role.value, size=size)
    return staged


def append_messages(
    context: Context,
    options: AgentSessionOptions,
    *,
    last_sequence: int,
    turn_id: str,
    messages: Sequence[FrameworkMessage],
    now: datetime,
) -> int:
    """Store ``messages`` after ``last_sequence``; returns the new last sequence.

    Raises:
        MessageTooLargeError: A message's JSON exceeds 8 MiB, more than a chunk
            may hold; none of ``messages`` is stored then.
    """
    if not messages:
        return last_sequence
    index = AGENT_MESSAGE_INDEX.get(context)
    chunks = list(index.chunks) if index is not None else []
    window = _Window(context)
    index_changed = False
    staged = _stage(context, messages, last_sequence=last_sequence, turn_id=turn_id, now=now)
    for stored, key, size in staged:
        last_sequence = stored.sequence
        if size > options.message_chunk_max_bytes:
            AGENT_MESSAGES.delete(context, key)  # it goes into a chunk of its own instead
            # Chunks hold consecutive messages, so the window moves out first.
            while window:
                chunks.append(_write_chunk(context, *window.take(_take_chunk(window, options))))
            chunks.append(_write_chunk(context, [stored], [size]))
            index_changed = True
            continue
        window.add(stored, size)
    moved, moved_bytes = 0, 0
    while len(window) > options.message_window_size and moved < MAX_CHUNKS_PER_COMMIT:
        # Whole chunks leave the window, so chunks stay near message_chunk_size.
        count = _take_chunk(window, options)
        taken_bytes = sum(window.size(i) for i in range(count))
        if moved and moved_bytes + taken_bytes > MAX_CHUNK_BYTES:
            break
        chunks.append(_write_chunk(context, *window.take(count)))
        moved += 1
        moved_bytes += taken_bytes
        index_changed = True
    if index_changed:
        first = chunks[0].first_sequence if chunks else (index.first_sequence if index else 1)
        base = index if index is not None else AgentMessageIndex()
        AGENT_MESSAGE_INDEX.set(
            context,
            replace(
                base,
                chunks=tuple(chunks),
                window_first_sequence=window.first_sequence() if window else last_sequence + 1,
                first_sequence=first,
            ),
        )
    return last_sequence


def apply_retention(context: Context, options: AgentSessionOptions, last_sequence: int) -> int:
    """Delete the oldest chunks while every message in each is at or before the
    summary's ``last_sequence`` and ``retained_message_limit`` messages are stored
    after it (at most ``MAX_CHUNKS_PER_COMMIT`` per commit); returns how many went.
    Needs the chunk map loaded; without compaction or a limit nothing is deleted."""
    limit = options.retained_message_limit
    summary = CONTEXT_SUMMARY.get(context)
    index = AGENT_MESSAGE_INDEX.get(context)
    if options.compaction is None or limit is None or summary is None or index is None:
        return 0
    chunks = list(index.chunks)
    deleted = 0
    deleted_before = index.deleted_before_sequence
    while chunks and deleted < MAX_CHUNKS_PER_COMMIT:
        oldest = chunks[0]
        if oldest.last_sequence > summary.last_sequence:
            break
        if last_sequence - oldest.last_sequence < limit:
            break
        AGENT_MESSAGE_CHUNKS.delete(context, message_sequence_key(oldest.first_sequence))
        chunks.pop(0)
        deleted += 1
        deleted_before = oldest.last_sequence + 1
    if deleted:
        first = chunks[0].first_sequence if chunks else index.window_first_sequence
        AGENT_MESSAGE_INDEX.set(
            context,
            replace(
                index,
                chunks=tuple(chunks),
                first_sequence=first,
                deleted_before_sequence=deleted_before,
            ),
        )
    return deleted
