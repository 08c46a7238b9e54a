"""RayObjectStoreMediaStore on a real local Ray, written through to a local directory."""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from media_images import gif, jpeg, png

from dex_agents_ray.media import (
    MAX_IMAGE_BYTES,
    AgentImageReference,
    InMemoryMediaStore,
    LocalDirectoryMediaStore,
    MediaCacheStats,
    MediaStoreError,
    RayObjectStoreMediaStore,
    load_images,
)


def _store(root: Path, name: str, namespace: str, **options: Any) -> RayObjectStoreMediaStore:
    return RayObjectStoreMediaStore(
        LocalDirectoryMediaStore(root), actor_name=name, namespace=namespace, **options
    )


async def _eventually(check: Callable[[], Awaitable[bool]], what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if await check():
            return
    raise AssertionError(f"{what} did not happen within {seconds} s")


async def test_reads_come_from_the_object_store(
    local_root: Path, media_cache_actor: str, ray_namespace: str
) -> None:
    store = _store(local_root, media_cache_actor, ray_namespace)
    data = png(padding=300_000)
    reference = await store.put_image(data)
    assert reference.uri.startswith(store.durable.store_uri)
    assert store.store_uri == store.durable.store_uri
    # Written through: the durable copy is there before put_image returns.
    assert (local_root / "sha256" / reference.sha256).read_bytes() == data
    os.unlink(local_root / "sha256" / reference.sha256)
    # The durable copy is gone, so these reads can only come from Ray's object store.
    assert await store.get_image(reference) == data
    other = _store(local_root, media_cache_actor, ray_namespace)
    assert await load_images(other, [reference]) == {reference.sha256: data}
    assert store.stats() == MediaCacheStats(
        cache_hits=1, durable_reads=0, cache_puts=1, cache_put_failures=0
    )
    assert other.stats().cache_hits == 1


async def test_a_killed_owner_falls_back_to_the_durable_store(
    local_root: Path, media_cache_actor: str, ray_namespace: str
) -> None:
    import ray

    store = _store(local_root, media_cache_actor, ray_namespace, read_timeout=timedelta(seconds=5))
    data = jpeg(padding=60_000)
    reference = await store.put_image(data)
    assert await store.get_image(reference) == data
    assert store.stats().cache_hits == 1

    ray.kill(ray.get_actor(media_cache_actor, namespace=ray_namespace), no_restart=True)

    async def owner_gone() -> bool:
        try:
            ray.get_actor(media_cache_actor, namespace=ray_namespace)
        except ValueError:
            return True
        return False

    await _eventually(owner_gone, "the owner actor's death")

    # The object this process still references died with its owner (reads right
    # after the kill may still see it): reads go to the durable store, which
    # caches the bytes again under a new owner actor. Starting that actor's worker
    # can outlast read_timeout on a loaded machine: that put counts as a failure,
    # and the next read goes to the durable store and tries again.
    async def cached_again() -> bool:
        assert await store.get_image(reference) == data
        return store.stats().cache_puts == 2

    await _eventually(cached_again, "a read from the durable store cached again", seconds=180)
    stats = store.stats()
    assert stats.durable_reads >= 1
    # Every durable read was followed by exactly one put: a failed one or the last.
    assert stats.durable_reads == stats.cache_put_failures + 1
    assert ray.get_actor(media_cache_actor, namespace=ray_namespace) is not None

    os.unlink(local_root / "sha256" / reference.sha256)

    async def served_from_new_owner() -> bool:
        fresh = _store(local_root, media_cache_actor, ray_namespace)
        return await fresh.get_image(reference) == data and fresh.stats().cache_hits == 1

    await _eventually(served_from_new_owner, "a read from the new owner actor")


async def test_a_ray_task_reads_through_a_pickled_store(
    local_root: Path, media_cache_actor: str, ray_namespace: str
) -> None:
    import ray

    store = _store(local_root, media_cache_actor, ray_namespace)
    reference = await store.put_image(gif())

    def read_in_task(
        store: RayObjectStoreMediaStore, reference: AgentImageReference
    ) -> tuple[bytes, MediaCacheStats]:
        import asyncio

        data = asyncio.run(store.get_image(reference))
        return data, store.stats()

    remote = ray.remote(num_cpus=0, max_retries=0)(read_in_task)
    data, stats = await remote.remote(store, reference)
    assert data == gif()
    assert (stats.cache_hits, stats.durable_reads) == (1, 0)


async def test_evicted_images_are_read_back_from_the_durable_store(
    local_root: Path, media_cache_actor: str, ray_namespace: str
) -> None:
    store = _store(local_root, media_cache_actor, ray_namespace, capacity_bytes=MAX_IMAGE_BYTES)
    first, second = png(seed=1, padding=2_000_000), png(seed=2, padding=2_000_000)
    first_reference = await store.put_image(first)
    await store.put_image(second)
    assert await store.get_image(first_reference) == first
    assert store.stats().durable_reads == 1


async def test_it_reads_only_the_durable_store_location(
    local_root: Path, media_cache_actor: str, ray_namespace: str, tmp_path: Path
) -> None:
    store = _store(local_root, media_cache_actor, ray_namespace)
    foreign = await LocalDirectoryMediaStore(tmp_path / "other").put_image(png())
    with pytest.raises(MediaStoreError, match="not in the media store"):
        await store.get_image(foreign)
    memory = InMemoryMediaStore()
    cached = RayObjectStoreMediaStore(memory, actor_name=media_cache_actor, namespace=ray_namespace)
    reference = await cached.put_image(png())
    assert reference.uri.startswith("memory://media/sha256/")


def test_constructor_checks_its_arguments(local_root: Path) -> None:
    durable = LocalDirectoryMediaStore(local_root)
    with pytest.raises(TypeError, match="store_uri"):
        RayObjectStoreMediaStore(object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="capacity_bytes"):
        RayObjectStoreMediaStore(durable, capacity_bytes=1024)
    with pytest.raises(ValueError, match="read_timeout"):
        RayObjectStoreMediaStore(durable, read_timeout=timedelta(0))
    assert "LocalDirectoryMediaStore" in repr(RayObjectStoreMediaStore(durable))
