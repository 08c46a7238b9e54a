"""Images for agent sessions: references, validation and media stores.

Session state holds only an ``AgentImageReference`` per image; the bytes live in
a media store, one object per image keyed by its SHA-256. Upload first, then
send the reference::

    store = LocalDirectoryMediaStore("/var/lib/agent-media")
    reference = await store.put_image(Path("chart.png").read_bytes())

Stores: ``InMemoryMediaStore`` (tests in one process),
``LocalDirectoryMediaStore`` (one machine), ``dex_agents_ray.s3.S3MediaStore``
(any S3-compatible bucket, the ``s3`` extra), and ``RayObjectStoreMediaStore``,
which caches images in Ray's object store in front of a durable store.

Errors::

    ValueError
    └── ImageValidationError   bad image bytes or a bad reference
    RuntimeError
    └── MediaStoreError        a store could not write or read an image
"""

from ._errors import ImageValidationError, MediaStoreError
from ._formats import detect_image_mime_type
from ._local import LocalDirectoryMediaStore
from ._memory import InMemoryMediaStore
from ._ray_store import DEFAULT_MEDIA_CACHE_ACTOR_NAME, MediaCacheStats, RayObjectStoreMediaStore
from ._reference import (
    MAX_IMAGE_BYTES,
    MAX_IMAGE_URI_LENGTH,
    MAX_IMAGES_PER_MESSAGE,
    AgentImageReference,
    ImageMimeType,
)
from ._store import (
    DurableMediaStore,
    MediaStore,
    SupportsImages,
    SupportsTurnImages,
    collect_turn_images,
    load_images,
)
from ._validation import (
    build_image_reference,
    require_short_image_uris,
    require_store_image_reference,
    validate_image_reference,
    validate_image_references,
    verify_image_bytes,
)

__all__ = [
    "DEFAULT_MEDIA_CACHE_ACTOR_NAME",
    "MAX_IMAGES_PER_MESSAGE",
    "MAX_IMAGE_BYTES",
    "MAX_IMAGE_URI_LENGTH",
    "AgentImageReference",
    "DurableMediaStore",
    "ImageMimeType",
    "ImageValidationError",
    "InMemoryMediaStore",
    "LocalDirectoryMediaStore",
    "MediaCacheStats",
    "MediaStore",
    "MediaStoreError",
    "RayObjectStoreMediaStore",
    "SupportsImages",
    "SupportsTurnImages",
    "build_image_reference",
    "collect_turn_images",
    "detect_image_mime_type",
    "load_images",
    "require_short_image_uris",
    "require_store_image_reference",
    "validate_image_reference",
    "validate_image_references",
    "verify_image_bytes",
]
