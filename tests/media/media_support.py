"""Shared helpers of the media tests (a uniquely named module, unlike conftest)."""

from __future__ import annotations

from dex_agents_ray.s3 import S3MediaStore

# Fixed, non-secret keys for the loopback moto server.
S3_KEYS = {"access_key_id": "media-tests-key", "secret_access_key": "media-tests-not-a-secret"}
S3_REGION = "us-east-1"


def make_s3_store(endpoint: str, bucket: str, prefix: str = "sessions") -> S3MediaStore:
    return S3MediaStore(
        bucket,
        prefix,
        endpoint_url=endpoint,
        region_name=S3_REGION,
        force_path_style=True,
        **S3_KEYS,
    )
