"""``RayObjectStoreMediaStore``: image bytes cached in Ray's object store.

Reads of a cached image come from Ray's shared-memory object store on the
reader's node instead of from the network. Ray objects are a cache, not
storage: they die with the process that owns them, so every image is written
through to a durable store first, references stay that store's URIs, and an
object that is lost (its owner died) or evicted is read back from the durable
store and cached again.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ._errors import MediaStoreError
from ._ray_owner import media_object_owner_class
from ._reference import MAX_IMAGE_BYTES, AgentImageReference
from ._store import DurableMediaStore
from ._validation import require_store_image_reference, verify_image_bytes

__all__ = ["DEFAULT_MEDIA_CACHE_ACTOR_NAME", "MediaCacheStats", "RayObjectStoreMediaStore"]

logger = logging.getLogger("dex_agents_ray.media")

DEFAULT_MEDIA_CACHE_ACTOR_NAME = "dex_agents_ray.media_cache"
"""The name of the detached actor that owns cached images, unless one is given."""


@dataclass(frozen=True, kw_only=True)
class MediaCacheStats:
    """What one ``RayObjectStoreMediaStore`` (in this process) has done so far."""

    cache_hits: int
    """Reads answered from Ray's object store."""

    durable_reads: int
    """Reads that went to the durable store: never cached, evicted, or lost."""

    cache_puts: int
    """Images handed to the owner actor, by ``put_image`` or after a durable read."""

    cache_put_failures: int
    """Images that could not be cached (owner actor unavailable); reads still work."""


def _require_ray() -> Any:
    import ray

    if not ray.is_initialized():
        raise RuntimeError("RayObjectStoreMediaStore needs a connected Ray: call ray.init() first")
    return ray


class RayObjectStoreMediaStore:
    """A ``MediaStore`` that caches image bytes in Ray's object store.

    ``put_image`` writes to the durable store first, then hands the bytes to a
    detached actor (named ``actor_name`` in ``namespace``) that ``ray.put``\\s
    and owns them. ``get_image`` asks the actor for the object (remembering the
    reference in this process), checks it with ``ray.wait`` and reads it with a
    timeout; a lost object (``OwnerDiedError``, ``ObjectLostError``), a timeout,
    an unavailable actor, or bytes that fail ``verify_image_bytes`` make it read
    the durable store instead and cache the bytes again under a new actor if the
    old one died. References are the durable store's, so sessions outlive the
    cache.

    The actor is created on first use with ``get_if_exists``, ``lifetime=
    "detached"``, ``num_cpus=0`` and unlimited restarts; the first creator's
    ``capacity_bytes`` wins. It keeps the most recently used images up to
    ``capacity_bytes``; each store instance also remembers up to that many bytes
    of object references, which keep those objects alive while remembered.

    Safe to use from many tasks and threads. Pickling (as when handed to a Ray
    task) keeps the configuration and drops the remembered references.

    Args:
        durable: The store every image is written through to and read back from.
        actor_name: Name of the owner actor; stores with the same name and
            namespace share one cache.
        namespace: Ray namespace of the owner actor; ``None`` for the current
            job's namespace.
        capacity_bytes: Bytes of images the owner actor keeps; at least
            ``MAX_IMAGE_BYTES``.
        read_timeout: Longest wait for the owner actor or for one cached object
            before reading the durable store instead.

    Raises:
        TypeError: ``durable`` is not a ``DurableMediaStore``.
        ValueError: ``capacity_bytes`` or ``read_timeout`` is out of range.
    """

    def __init__(
        self,
        durable: DurableMediaStore,
        *,
        actor_name: str = DEFAULT_MEDIA_CACHE_ACTOR_NAME,
        namespace: str | None = None,
        capacity_bytes: int = 512 * 1024 * 1024,
        read_timeout: timedelta = timedelta(seconds=10),
    ) -> None:
        if not isinstance(durable, DurableMediaStore):
            raise TypeError(
                "durable must be a media store with a store_uri, such as S3MediaStore or "
                f"LocalDirectoryMediaStore, got {type(durable).__name__}"
            )
        if isinstance(capacity_bytes, bool) or capacity_bytes < MAX_IMAGE_BYTES:
            raise ValueError(
                f"capacity_bytes must be at least MAX_IMAGE_BYTES ({MAX_IMAGE_BYTES:,}), "
                f"got {capacity_bytes!r}"
            )
        if read_timeout <= timedelta(0):
            raise ValueError(f"read_timeout must be positive, got {read_timeout}")
        if not actor_name:
            raise ValueError("actor_name must not be empty")
        self._durable = durable
        self._actor_name = actor_name
        self._namespace = namespace
        self._capacity_bytes = capacity_bytes
        self._read_timeout = read_timeout
        self._init_runtime_state()

    def _init_runtime_state(self) -> None:
        self._lock = threading.Lock()
        self._owner_handle: Any = None
        self._refs: OrderedDict[str, tuple[Any, int]] = OrderedDict()
        self._ref_bytes = 0
        self._hits = 0
        self._durable_reads = 0
        self._cache_puts = 0
        self._cache_put_failures = 0

    def __getstate__(self) -> dict[str, object]:
        return {
            "durable": self._durable,
            "actor_name": self._actor_name,
            "namespace": self._namespace,
            "capacity_bytes": self._capacity_bytes,
            "read_timeout": self._read_timeout,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._durable = state["durable"]
        self._actor_name = state["actor_name"]
        self._namespace = state["namespace"]
        self._capacity_bytes = state["capacity_bytes"]
        self._read_timeout = state["read_timeout"]
        self._init_runtime_state()

    def __repr__(self) -> str:
        return (
            f"RayObjectStoreMediaStore({self._durable!r}, actor_name={self._actor_name!r}, "
            f"namespace={self._namespace!r})"
        )

    @property
    def durable(self) -> DurableMediaStore:
        """The store images are written through to."""
        return self._durable

    @property
    def store_uri(self) -> str:
        """The durable store's URI: references are the durable store's."""
        return self._durable.store_uri

    def stats(self) -> MediaCacheStats:
        """Counts of this instance's cache hits, durable reads and cache writes."""
        with self._lock:
            return MediaCacheStats(
                cache_hits=self._hits,
                durable_reads=self._durable_reads,
                cache_puts=self._cache_puts,
                cache_put_failures=self._cache_put_failures,
            )

    async def put_image(self, data: bytes) -> AgentImageReference:
        """Write the image to the durable store, then cache it in Ray's object store.

        A failure to cache is logged and counted, not raised: the image is
        durable, and a later read caches it.

        Raises:
            ImageValidationError: ``data`` is not a supported image.
            MediaStoreError: The durable store could not write it.
            RuntimeError: Ray is not initialized in this process.
        """
        _require_ray()
        reference = await self._durable.put_image(data)
        await self._cache(reference.uri, bytes(data))
        return reference

    async def get_image(self, reference: AgentImageReference) -> bytes:
        """Read the image from Ray's object store, or else from the durable store.

        Raises:
            ImageValidationError: ``reference`` is malformed.
            MediaStoreError: The reference is not in the durable store's
                location, or the durable store could not read it.
            RuntimeError: Ray is not initialized in this process.
        """
        _require_ray()
        require_store_image_reference(reference, self._durable.store_uri)
        data = await self._read_cached(reference)
        if data is not None:
            with self._lock:
                self._hits += 1
            return data
        data = await self._durable.get_image(reference)
        with self._lock:
            self._durable_reads += 1
        await self._cache(reference.uri, data)
        return data

    # -- the cache -------------------------------------------------------------

    async def _read_cached(self, reference: AgentImageReference) -> bytes | None:
        uri = reference.uri
        ref = self._remembered(uri)
        if ref is None:
            ref = await self._look_up(uri)
            if ref is None:
                return None
        data = await self._fetch(ref)
        if data is not None:
            try:
                verify_image_bytes(reference, data)
            except MediaStoreError as error:
                logger.warning("cached image %s failed verification: %s", uri, error)
                data = None
        if data is None:
            self._forget(uri)
            return None
        self._remember(uri, ref, len(data))
        return data

    async def _fetch(self, ref: Any) -> bytes | None:
        """The object's value, or ``None`` when it is lost, pending or too slow."""
        import ray
        from ray.exceptions import RayError

        try:
            # A lost object counts as ready (its error is its value), so this only
            # screens out objects that do not exist yet; the read below surfaces
            # OwnerDiedError / ObjectLostError.
            ready, _ = ray.wait([ref], timeout=0, fetch_local=False)
            if not ready:
                return None
            value = await asyncio.wait_for(
                asyncio.wrap_future(ref.future()), self._read_timeout.total_seconds()
            )
        except (RayError, TimeoutError) as error:
            logger.debug("cached image object unavailable: %r", error)
            return None
        return value if isinstance(value, bytes) else None

    async def _look_up(self, uri: str) -> Any:
        from ray.exceptions import RayError

        try:
            owner = await self._owner()
            refs = await asyncio.wait_for(
                asyncio.wrap_future(owner.lookup.remote(uri).future()),
                self._read_timeout.total_seconds(),
            )
        except (RayError, TimeoutError) as error:
            logger.debug("media cache owner unavailable for lookup: %r", error)
            self._reset_owner()
            return None
        return refs[0] if refs else None

    async def _cache(self, uri: str, data: bytes) -> None:
        from ray.exceptions import RayError

        failure: BaseException | None = None
        # A second try goes to a new owner actor when the first one died.
        for _ in range(2):
            try:
                owner = await self._owner()
                refs = await asyncio.wait_for(
                    asyncio.wrap_future(owner.own.remote(uri, data).future()),
                    self._read_timeout.total_seconds(),
                )
            except (RayError, TimeoutError) as error:
                failure = error
                self._reset_owner()
                continue
            self._remember(uri, refs[0], len(data))
            with self._lock:
                self._cache_puts += 1
            return
        with self._lock:
            self._cache_put_failures += 1
        logger.warning("could not cache image %s in Ray's object store: %r", uri, failure)

    async def _owner(self) -> Any:
        with self._lock:
            handle = self._owner_handle
        if handle is None:
            handle = await asyncio.to_thread(self._create_owner)
            with self._lock:
                self._owner_handle = handle
        return handle

    def _create_owner(self) -> Any:
        return (
            media_object_owner_class()
            .options(
                name=self._actor_name,
                namespace=self._namespace,
                lifetime="detached",
                get_if_exists=True,
                num_cpus=0,
                max_restarts=-1,
            )
            .remote(self._capacity_bytes)
        )

    def _reset_owner(self) -> None:
        with self._lock:
            self._owner_handle = None

    # -- object references remembered in this process ----------------------------

    def _remembered(self, uri: str) -> Any:
        with self._lock:
            entry = self._refs.get(uri)
            if entry is None:
                return None
            self._refs.move_to_end(uri)
            return entry[0]

    def _remember(self, uri: str, ref: Any, size: int) -> None:
        with self._lock:
            previous = self._refs.pop(uri, None)
            if previous is not None:
                self._ref_bytes -= previous[1]
            self._refs[uri] = (ref, size)
            self._ref_bytes += size
            while self._ref_bytes > self._capacity_bytes and len(self._refs) > 1:
                _, (_, evicted) = self._refs.popitem(last=False)
                self._ref_bytes -= evicted

    def _forget(self, uri: str) -> None:
        with self._lock:
            entry = self._refs.pop(uri, None)
            if entry is not None:
                self._ref_bytes -= entry[1]
