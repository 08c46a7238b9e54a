"""The public names of dex_agents_ray.media and dex_agents_ray.s3, pinned."""

from __future__ import annotations

import subprocess
import sys

import dex_agents_ray.media
import dex_agents_ray.s3


def test_media_exports() -> None:
    assert sorted(dex_agents_ray.media.__all__) == [
        "AgentImageReference",
        "DEFAULT_MEDIA_CACHE_ACTOR_NAME",
        "DurableMediaStore",
        "ImageMimeType",
        "ImageValidationError",
        "InMemoryMediaStore",
        "LocalDirectoryMediaStore",
        "MAX_IMAGES_PER_MESSAGE",
        "MAX_IMAGE_BYTES",
        "MAX_IMAGE_URI_LENGTH",
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
    for name in dex_agents_ray.media.__all__:
        assert hasattr(dex_agents_ray.media, name)
    assert dex_agents_ray.media.MAX_IMAGE_BYTES == 3_750_000
    assert dex_agents_ray.media.MAX_IMAGES_PER_MESSAGE == 20
    assert dex_agents_ray.media.MAX_IMAGE_URI_LENGTH == 1024


def test_s3_exports() -> None:
    assert dex_agents_ray.s3.__all__ == ["S3MediaStore"]


def test_importing_imports_neither_ray_nor_boto3() -> None:
    script = (
        "import sys\n"
        "import dex_agents_ray.media, dex_agents_ray.s3\n"
        "print(sorted(m for m in ('ray', 'boto3', 'botocore') if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "[]"
