"""A session keeps seeing its images after the Ray object-store cache's owner actor dies."""

from __future__ import annotations

from typing import Any

from dex_agents_ray import AgentSessionClient
from dex_agents_ray.media import RayObjectStoreMediaStore
from tests.images.agents import build_flow, saw
from tests.media.media_images import png
from tests.session.polling import eventually, snapshot_when, turn_done


async def test_images_survive_a_kill_of_the_cache_owner_mid_session(
    engine_factory: Any, ray_store: tuple[RayObjectStoreMediaStore, str], namespace: str
) -> None:
    import ray

    store, actor = ray_store
    flow = build_flow(store, flow_type="ImageViewerRayCache")
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    # Over Ray's 100 KiB inline limit, so the objects live in the shared-memory store.
    photo = png(8, 8, seed=11, padding=300_000)
    photo_ref = await store.put_image(photo)
    # References are the durable store's, so they outlive the cache.
    assert photo_ref.uri.startswith(store.durable.store_uri)

    await sessions.start_session("cache-1", "What is this?", images=[photo_ref])
    first = await snapshot_when(sessions, "cache-1", turn_done(1))
    assert first.state is not None and first.state.last_turn_error is None
    assert first.messages[-1].text == saw([photo])

    # Cache a second image, then kill the owner: every cached object dies with it.
    chart = png(8, 8, seed=12, padding=300_000)
    chart_ref = await store.put_image(chart)
    assert store.stats().cache_puts == 2
    ray.kill(ray.get_actor(actor, namespace=namespace), no_restart=True)

    async def owner_gone() -> bool:
        try:
            ray.get_actor(actor, namespace=namespace)
        except ValueError:
            return True
        return False

    await eventually(owner_gone, description="the cache owner actor is gone")

    # The next turn replays the photo and shows the chart: the model gets both. The
    # chart, never read in the session's process, is read back from the durable
    # store and cached again under a new owner actor of the same name.
    assert await sessions.send_user_message("cache-1", "And now?", images=[chart_ref])
    second = await snapshot_when(sessions, "cache-1", turn_done(2))
    assert second.state is not None and second.state.last_turn_error is None
    assert second.messages[-1].text == saw([photo, chart])
    owner = ray.get_actor(actor, namespace=namespace)
    assert await owner.lookup.remote(chart_ref.uri) != []
