"""The ``MediaStore`` protocol and the helpers runners use to read images."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol, runtime_checkable

from ._errors import MediaStoreError
from ._reference import AgentImageReference
from ._validation import validate_image_reference

__all__ = [
    "DurableMediaStore",
    "MediaStore",
    "SupportsImages",
    "SupportsTurnImages",
    "collect_turn_images",
    "load_images",
]

# Reads in flight at once for one ``load_images`` call.
_LOAD_CONCURRENCY = 8


@runtime_checkable
class MediaStore(Protocol):
    """Where image bytes live, one object per image keyed by its SHA-256.

    Session state holds only the ``AgentImageReference`` that ``put_image``
    returns; runners read the bytes back with ``get_image`` (through
    ``load_images``) for every model call that shows the image.

    Rules for an implementation:

    - ``put_image`` checks the bytes with ``build_image_reference`` (which
      raises ``ImageValidationError``), writes them so that writing the same
      bytes again, from a retried Step or from two processes at once, leaves one
      object, and returns only after the bytes are durable.
    - ``get_image`` refuses references outside its own location with
      ``require_store_image_reference``, checks what it read with
      ``verify_image_bytes``, and raises ``MediaStoreError`` when the object is
      missing or wrong.
    - Both may be called concurrently from many tasks and threads. A store is
      handed to Ray workers by pickling, so keep live clients out of its pickled
      state and rebuild them on first use.

    Example:
        ```python
        class DictStore:
            def __init__(self) -> None:
                self.objects: dict[str, bytes] = {}

            async def put_image(self, data: bytes) -> AgentImageReference:
                reference = build_image_reference(data, "dict://images")
                self.objects.setdefault(reference.sha256, bytes(data))
                return reference

            async def get_image(self, reference: AgentImageReference) -> bytes:
                sha256 = require_store_image_reference(reference, "dict://images")
                data = self.objects.get(sha256)
                if data is None:
                    raise MediaStoreError(f"image {reference.uri} not found", uri=reference.uri)
                verify_image_bytes(reference, data)
                return data
        ```
    """

    async def put_image(self, data: bytes) -> AgentImageReference:
        """Store image bytes and return their reference."""
        ...

    async def get_image(self, reference: AgentImageReference) -> bytes:
        """Read the bytes of an image this store holds."""
        ...


@runtime_checkable
class DurableMediaStore(MediaStore, Protocol):
    """A ``MediaStore`` that names its location: every image URI it makes starts
    with ``store_uri`` followed by ``/sha256/<sha256>``.

    ``S3MediaStore``, ``LocalDirectoryMediaStore`` and ``InMemoryMediaStore``
    are all durable stores in this sense; ``RayObjectStoreMediaStore`` writes
    through to one.
    """

    @property
    def store_uri(self) -> str:
        """The prefix of every image URI of this store, without a trailing ``/``."""
        ...


class SupportsImages(Protocol):
    """Anything that carries image references, such as a stored message or a
    tool call record."""

    @property
    def images(self) -> Sequence[AgentImageReference]:
        """The references, in order; empty when there are none."""
        ...


class SupportsTurnImages(Protocol):
    """The part of a turn context that ``collect_turn_images`` reads."""

    @property
    def messages(self) -> Sequence[SupportsImages]:
        """Every stored message in sequence order."""
        ...

    @property
    def tool_calls(self) -> Mapping[str, SupportsImages]:
        """This turn's tool call records by tool call ID."""
        ...


def collect_turn_images(turn: SupportsTurnImages) -> list[AgentImageReference]:
    """Every image a model call of ``turn`` may show, each SHA-256 once.

    The images of the stored messages come first, in sequence order, then the
    images of this turn's tool call records, in their order. A runner that
    keeps references in its own replayed items may read those instead.
    """
    seen: set[str] = set()
    collected: list[AgentImageReference] = []

    def add(references: Iterable[AgentImageReference]) -> None:
        for reference in references:
            if reference.sha256 not in seen:
                seen.add(reference.sha256)
                collected.append(reference)

    for message in turn.messages:
        add(message.images)
    for record in turn.tool_calls.values():
        add(record.images)
    return collected


async def load_images(
    store: MediaStore, references: Iterable[AgentImageReference]
) -> dict[str, bytes]:
    """Read the bytes of ``references`` from ``store``, keyed by SHA-256.

    Each SHA-256 is read once, up to eight reads at a time. The first failure
    cancels the other reads and is raised.

    Raises:
        ImageValidationError: A reference breaks ``validate_image_reference``;
            nothing is read.
        MediaStoreError: The store could not read an image (missing, outside
            the store, or wrong bytes), or returned bytes of the wrong size.
    """
    unique: dict[str, AgentImageReference] = {}
    for reference in references:
        validate_image_reference(reference)
        unique.setdefault(reference.sha256, reference)
    if not unique:
        return {}
    limit = asyncio.Semaphore(_LOAD_CONCURRENCY)

    async def read(reference: AgentImageReference) -> bytes:
        async with limit:
            data = await store.get_image(reference)
        if not isinstance(data, bytes) or len(data) != reference.size_bytes:
            raise MediaStoreError(
                f"the media store returned {len(data) if isinstance(data, bytes) else 'no'} "
                f"bytes for image {reference.uri!r}; the reference says {reference.size_bytes}",
                uri=reference.uri,
            )
        return data

    tasks = {sha256: asyncio.ensure_future(read(ref)) for sha256, ref in unique.items()}
    try:
        await asyncio.wait(tasks.values(), return_when=asyncio.FIRST_EXCEPTION)
    finally:
        pending = [task for task in tasks.values() if not task.done()]
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)
    errors = [
        error
        for task in tasks.values()
        if not task.cancelled() and (error := task.exception()) is not None
    ]
    if errors:
        raise errors[0]
    return {sha256: task.result() for sha256, task in tasks.items()}
