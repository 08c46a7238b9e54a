"""Durable AI-agent sessions on Ray.

The engine (:mod:`dex_agents_ray.engine`) runs real ``dex-python-sdk`` Flow
definitions durably on Ray; the session (:mod:`dex_agents_ray.session`), the
built-in loop and the integrations build on it. The session's public names
are re-exported here, as the spec's ``dex_agents`` exports them::

    from dex_agents_ray import AgentSessionClient, AgentSessionFlow, AgentSessionOptions

So are the spec's image names (``AgentImageReference``, the media stores, the
limits and the checks), which live in :mod:`dex_agents_ray.media`; the Ray
object store cache stays there. ``DexAgentsError`` (:mod:`dex_agents_ray.errors`) is
the root of every exception class the package defines.
"""

from dex_agents_ray.errors import DexAgentsError
from dex_agents_ray.media import (
    MAX_IMAGE_BYTES,
    MAX_IMAGE_URI_LENGTH,
    MAX_IMAGES_PER_MESSAGE,
    AgentImageReference,
    ImageValidationError,
    InMemoryMediaStore,
    LocalDirectoryMediaStore,
    MediaStore,
    MediaStoreError,
    build_image_reference,
    collect_turn_images,
    load_images,
    require_short_image_uris,
    require_store_image_reference,
    validate_image_reference,
    validate_image_references,
    verify_image_bytes,
)
from dex_agents_ray.session import *  # noqa: F403 - the session's public names
from dex_agents_ray.session import __all__ as _session_all

__all__: list[str] = list(_session_all)
__all__ += [
    "MAX_IMAGES_PER_MESSAGE",
    "MAX_IMAGE_BYTES",
    "MAX_IMAGE_URI_LENGTH",
    "AgentImageReference",
    "ImageValidationError",
    "InMemoryMediaStore",
    "LocalDirectoryMediaStore",
    "MediaStore",
    "MediaStoreError",
    "build_image_reference",
    "collect_turn_images",
    "load_images",
    "require_short_image_uris",
    "require_store_image_reference",
    "validate_image_reference",
    "validate_image_references",
    "verify_image_bytes",
    "DexAgentsError",
]
