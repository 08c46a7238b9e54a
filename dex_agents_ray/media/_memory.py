"""``InMemoryMediaStore``: image bytes in a dict, for tests in one process."""

from __future__ import annotations

import threading
from typing import cast

from ._errors import MediaStoreError
from ._reference import AgentImageReference
from ._validation import (
    build_image_reference,
    require_short_image_uris,
    require_store_image_reference,
    verify_image_bytes,
)

__all__ = ["InMemoryMediaStore"]


class InMemoryMediaStore:
    """A ``MediaStore`` that keeps image bytes in this process's memory.

    For tests and examples in one process: nothing survives the process, and a
    pickled copy (such as one handed to a Ray worker) holds a snapshot of the
    images, not the same dict.

    Args:
        store_uri: The prefix of its image URIs; each is
            ``<store_uri>/sha256/<sha256>``.

    Raises:
        ValueError: ``store_uri`` breaks ``require_short_image_uris``.
    """

    def __init__(self, store_uri: str = "memory://media") -> None:
        require_short_image_uris(store_uri)
        self._store_uri = store_uri
        self._images: dict[str, bytes] = {}
        self._lock = threading.Lock()

    @property
    def store_uri(self) -> str:
        """The prefix of every image URI of this store."""
        return self._store_uri

    def __repr__(self) -> str:
        return f"InMemoryMediaStore(store_uri={self._store_uri!r})"

    def __getstate__(self) -> dict[str, object]:
        with self._lock:
            return {"store_uri": self._store_uri, "images": dict(self._images)}

    def __setstate__(self, state: dict[str, object]) -> None:
        self._store_uri = str(state["store_uri"])
        self._images = dict(cast("dict[str, bytes]", state["images"]))
        self._lock = threading.Lock()

    async def put_image(self, data: bytes) -> AgentImageReference:
        """Keep a copy of the bytes; storing the same bytes again is a no-op.

        Raises:
            ImageValidationError: ``data`` is not a supported image.
        """
        reference = build_image_reference(data, self._store_uri)
        with self._lock:
            self._images.setdefault(reference.sha256, bytes(data))
        return reference

    async def get_image(self, reference: AgentImageReference) -> bytes:
        """Return the bytes of an image this store holds.

        Raises:
            ImageValidationError: ``reference`` is malformed.
            MediaStoreError: The image is not in this store.
        """
        sha256 = require_store_image_reference(reference, self._store_uri)
        with self._lock:
            data = self._images.get(sha256)
        if data is None:
            raise MediaStoreError(f"image {reference.uri!r} not found", uri=reference.uri)
        verify_image_bytes(reference, data)
        return data

    def delete_image(self, reference: AgentImageReference) -> bool:
        """Forget an image, as a bucket lifecycle rule would; for tests of missing objects.

        Returns:
            Whether the image was there.
        """
        sha256 = require_store_image_reference(reference, self._store_uri)
        with self._lock:
            return self._images.pop(sha256, None) is not None
