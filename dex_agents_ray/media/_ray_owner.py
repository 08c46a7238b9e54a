"""The detached actor that owns cached image objects in Ray's object store.

Ray objects die with their owner, and ``ray.put(_owner=...)`` is gone, so this
long-lived actor calls ``ray.put`` itself and hands out the references wrapped
in a list (a bare returned ``ObjectRef`` would be resolved to its value).
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from typing import Any

__all__ = ["MediaObjectOwner", "media_object_owner_class"]


class MediaObjectOwner:
    """Owns one Ray object per cached image, least recently used first out.

    Keys are image URIs, so two stores that write through to different durable
    stores never see each other's entries.
    """

    def __init__(self, capacity_bytes: int) -> None:
        self._capacity_bytes = capacity_bytes
        self._entries: OrderedDict[str, tuple[Any, int]] = OrderedDict()
        self._bytes = 0

    def own(self, uri: str, data: bytes) -> list[Any]:
        """Own a copy of ``data`` under ``uri``; return ``[ref]``."""
        import ray

        entry = self._entries.get(uri)
        if entry is not None:
            self._entries.move_to_end(uri)
            return [entry[0]]
        ref = ray.put(data)
        self._entries[uri] = (ref, len(data))
        self._bytes += len(data)
        # Evict the least recently used objects, but always keep the newest one.
        while self._bytes > self._capacity_bytes and len(self._entries) > 1:
            _, (_, size) = self._entries.popitem(last=False)
            self._bytes -= size
        return [ref]

    def lookup(self, uri: str) -> list[Any]:
        """``[ref]`` for a cached image, ``[]`` when it is not cached."""
        entry = self._entries.get(uri)
        if entry is None:
            return []
        self._entries.move_to_end(uri)
        return [entry[0]]

    def usage(self) -> tuple[int, int]:
        """How many images and bytes the actor holds."""
        return len(self._entries), self._bytes


@functools.cache
def media_object_owner_class() -> Any:
    """The Ray actor class, built on first use so importing this module needs no Ray."""
    import ray

    return ray.remote(MediaObjectOwner)
