"""S3MediaStore against a moto S3 server over HTTP, with faults from a proxy in front."""

from __future__ import annotations

import logging
import pickle
import subprocess
import sys
from typing import Any

import pytest
from media_images import gif, jpeg, png, webp
from media_s3_proxy import S3FaultProxy
from media_support import S3_KEYS, make_s3_store

from dex_agents_ray.media import (
    AgentImageReference,
    ImageValidationError,
    MediaStoreError,
    load_images,
)
from dex_agents_ray.s3 import S3MediaStore


async def test_put_then_get_round_trips_every_type(s3_store: S3MediaStore, s3_admin: Any) -> None:
    for data in (png(), jpeg(), gif(), webp()):
        reference = await s3_store.put_image(data)
        assert reference.uri == f"s3://{s3_store.bucket}/sessions/sha256/{reference.sha256}"
        assert await s3_store.get_image(reference) == data
        head = s3_admin.head_object(
            Bucket=s3_store.bucket, Key=f"sessions/sha256/{reference.sha256}"
        )
        assert head["ContentLength"] == len(data)
        assert head["ContentType"] == reference.mime_type


async def test_moto_refuses_a_second_conditional_write_with_412(
    s3_admin: Any, s3_bucket: str
) -> None:
    from botocore.exceptions import ClientError

    s3_admin.put_object(Bucket=s3_bucket, Key="k", Body=b"one", IfNoneMatch="*")
    with pytest.raises(ClientError) as caught:
        s3_admin.put_object(Bucket=s3_bucket, Key="k", Body=b"two", IfNoneMatch="*")
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert s3_admin.get_object(Bucket=s3_bucket, Key="k")["Body"].read() == b"one"


async def test_second_put_is_a_412_and_keeps_one_object(
    s3_proxy: S3FaultProxy, moto_endpoint: str, s3_bucket: str, s3_admin: Any
) -> None:
    store = make_s3_store(s3_proxy.url, s3_bucket)
    data = png(seed=7)
    first = await store.put_image(data)
    second = await store.put_image(data)
    assert first == second
    puts = s3_proxy.seen("PUT")
    assert len(puts) == 2 and all(put.conditional for put in puts)
    listing = s3_admin.list_object_versions(Bucket=s3_bucket)
    assert [version["Key"] for version in listing.get("Versions", [])] == [
        f"sessions/sha256/{first.sha256}"
    ]
    store.close()


async def test_a_409_conflict_is_retried(s3_proxy: S3FaultProxy, s3_bucket: str) -> None:
    store = make_s3_store(s3_proxy.url, s3_bucket)
    s3_proxy.conflicts_left = 2
    reference = await store.put_image(png(seed=1))
    assert len(s3_proxy.seen("PUT")) == 3
    assert s3_proxy.seen("HEAD") == []
    assert await store.get_image(reference) == png(seed=1)
    store.close()


async def test_three_409s_then_head_finds_the_object(
    s3_proxy: S3FaultProxy, s3_bucket: str, s3_admin: Any
) -> None:
    store = make_s3_store(s3_proxy.url, s3_bucket)
    data = png(seed=2)
    # Another writer stored the object; every one of our attempts conflicts.
    reference = await make_s3_store(s3_proxy.url, s3_bucket).put_image(data)
    s3_proxy.requests.clear()
    s3_proxy.conflicts_left = 3
    assert await store.put_image(data) == reference
    assert len(s3_proxy.seen("PUT")) == 3
    assert len(s3_proxy.seen("HEAD")) == 1
    store.close()


async def test_three_409s_and_no_object_raise(s3_proxy: S3FaultProxy, s3_bucket: str) -> None:
    store = make_s3_store(s3_proxy.url, s3_bucket)
    s3_proxy.conflicts_left = 3
    with pytest.raises(MediaStoreError, match="409 conflicts"):
        await store.put_image(png(seed=3))
    assert len(s3_proxy.seen("HEAD")) == 1
    store.close()


async def test_service_without_conditional_writes_checks_with_head_first(
    s3_proxy: S3FaultProxy, s3_bucket: str
) -> None:
    s3_proxy.refuse_conditional_writes = True
    store = make_s3_store(s3_proxy.url, s3_bucket)
    data = png(seed=4)
    reference = await store.put_image(data)
    # One refused conditional PUT, then HEAD (missing) and a plain PUT.
    assert [(r.method, r.conditional) for r in s3_proxy.requests] == [
        ("PUT", True),
        ("HEAD", False),
        ("PUT", False),
    ]
    s3_proxy.requests.clear()
    assert await store.put_image(data) == reference
    # Remembered: HEAD first, finds the object, uploads nothing.
    assert [(r.method, r.conditional) for r in s3_proxy.requests] == [("HEAD", False)]
    assert await store.get_image(reference) == data
    store.close()


async def test_get_refuses_a_missing_object(s3_store: S3MediaStore) -> None:
    reference = AgentImageReference(
        uri=f"{s3_store.store_uri}/sha256/{'a' * 64}",
        mime_type="image/png",
        sha256="a" * 64,
        size_bytes=100,
    )
    with pytest.raises(MediaStoreError, match="not found"):
        await s3_store.get_image(reference)


async def test_get_reads_only_its_own_bucket_and_prefix(
    s3_store: S3MediaStore, moto_endpoint: str, s3_bucket: str, s3_admin: Any
) -> None:
    reference = await s3_store.put_image(png())
    other_prefix = make_s3_store(moto_endpoint, s3_bucket, "elsewhere")
    with pytest.raises(MediaStoreError, match="not in the media store"):
        await other_prefix.get_image(reference)
    other_bucket_name = f"{s3_bucket}-x"
    s3_admin.create_bucket(Bucket=other_bucket_name)
    other_bucket = make_s3_store(moto_endpoint, other_bucket_name)
    with pytest.raises(MediaStoreError, match="not in the media store"):
        await other_bucket.get_image(reference)
    sneaky = AgentImageReference(
        uri=f"s3://{s3_bucket}/sessions/../sha256/{reference.sha256}",
        mime_type=reference.mime_type,
        sha256=reference.sha256,
        size_bytes=reference.size_bytes,
    )
    with pytest.raises(MediaStoreError, match="not in the media store"):
        await s3_store.get_image(sneaky)


async def test_get_refuses_a_changed_object(s3_store: S3MediaStore, s3_admin: Any) -> None:
    data = png(seed=9, padding=64)
    reference = await s3_store.put_image(data)
    key = s3_store.object_key(reference.sha256)
    s3_admin.put_object(Bucket=s3_store.bucket, Key=key, Body=data + b"more")
    with pytest.raises(MediaStoreError, match="Content-Length"):
        await s3_store.get_image(reference)
    tampered = bytearray(data)
    tampered[-20] ^= 0xFF
    s3_admin.put_object(Bucket=s3_store.bucket, Key=key, Body=bytes(tampered))
    with pytest.raises(MediaStoreError, match="SHA-256"):
        await s3_store.get_image(reference)


async def test_put_refuses_bytes_that_are_no_image(s3_store: S3MediaStore) -> None:
    with pytest.raises(ImageValidationError):
        await s3_store.put_image(b"GIF89a")


async def test_load_images_reads_by_sha256(s3_store: S3MediaStore) -> None:
    references = [await s3_store.put_image(image) for image in (png(), gif(), png())]
    loaded = await load_images(s3_store, references)
    assert loaded == {references[0].sha256: png(), references[1].sha256: gif()}


async def test_from_store_uri_and_prefix_rules(moto_endpoint: str, s3_bucket: str) -> None:
    store = S3MediaStore.from_store_uri(
        f"s3://{s3_bucket}/a/b/",
        endpoint_url=moto_endpoint,
        region_name="us-east-1",
        force_path_style=True,
        **S3_KEYS,
    )
    assert (store.bucket, store.prefix, store.store_uri) == (
        s3_bucket,
        "a/b",
        f"s3://{s3_bucket}/a/b",
    )
    reference = await store.put_image(jpeg())
    assert await store.get_image(reference) == jpeg()
    assert S3MediaStore.from_store_uri(f"s3://{s3_bucket}").store_uri == f"s3://{s3_bucket}"
    for bad in ("https://bucket/x", "s3://", "s3://bucket/x?y=1", "s3://user@bucket/x"):
        with pytest.raises(ValueError):
            S3MediaStore.from_store_uri(bad)
    for prefix in ("a//b", "a/../b", "a/./b", "sp ace", "per%cent"):
        with pytest.raises(ValueError, match="segment"):
            S3MediaStore(s3_bucket, prefix)
    with pytest.raises(ValueError, match="MAX_IMAGE_URI_LENGTH"):
        S3MediaStore(s3_bucket, "p" * 1000)
    with pytest.raises(ValueError, match="bucket"):
        S3MediaStore("Bad_Bucket!", "x")
    with pytest.raises(ValueError, match="together"):
        S3MediaStore(s3_bucket, access_key_id="only-the-id")


async def test_credentials_stay_out_of_repr_and_logs(
    moto_endpoint: str, s3_bucket: str, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "never-show-this-secret-0123456789"
    store = S3MediaStore(
        s3_bucket,
        "sessions",
        endpoint_url=moto_endpoint,
        region_name="us-east-1",
        force_path_style=True,
        access_key_id="visible-key-id",
        secret_access_key=secret,
        session_token="never-show-this-token",
    )
    with caplog.at_level(logging.DEBUG):
        reference = await store.put_image(png())
        await store.get_image(reference)
        with pytest.raises(MediaStoreError) as caught:
            await store.get_image(
                AgentImageReference(
                    uri=f"{store.store_uri}/sha256/{'b' * 64}",
                    mime_type="image/png",
                    sha256="b" * 64,
                    size_bytes=10,
                )
            )
    for text in (repr(store), str(store), caplog.text, str(caught.value)):
        assert secret not in text and "never-show-this-token" not in text
    # A pickled copy rebuilds its client on the far side.
    copy = pickle.loads(pickle.dumps(store))
    assert repr(copy) == repr(store)
    assert await copy.get_image(reference) == png()
    store.close()
    copy.close()


def test_missing_extra_names_the_install_command() -> None:
    script = (
        "import sys; sys.modules['boto3'] = None\n"
        "from dex_agents_ray.s3 import S3MediaStore\n"
        "try:\n"
        "    S3MediaStore('bucket-name')\n"
        "except ImportError as error:\n"
        "    assert isinstance(error.__cause__, ImportError), error.__cause__\n"
        "    print(error)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    assert 'pip install "dex-agents-ray[s3]"' in result.stdout
