"""Fixtures for whole sessions with images: each media store, and a moto S3 server.

The S3 helpers (keys, region, store factory) come from tests/media; its
server fixture lives in that folder's conftest, so this folder starts its own
moto server the same way, once per test session and only when an S3 test runs.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dex_agents_ray.media import (
    DurableMediaStore,
    LocalDirectoryMediaStore,
    RayObjectStoreMediaStore,
)
from tests.media.media_support import S3_KEYS, S3_REGION, make_s3_store


def _start_moto(log: Path) -> tuple[str, subprocess.Popen[bytes]]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    url = f"http://127.0.0.1:{port}"
    with log.open("ab") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=output,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"moto server exited with {process.returncode}: {log}")
        try:
            with urllib.request.urlopen(url, timeout=1):
                return url, process
        except urllib.error.HTTPError:
            return url, process  # it answered
        except OSError:
            try:
                process.wait(timeout=0.1)  # not listening yet
            except subprocess.TimeoutExpired:
                pass
    process.kill()
    process.wait()
    raise RuntimeError(f"moto server did not answer at {url}: {log}")


@pytest.fixture(scope="session")
def image_moto_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A moto S3 server in server mode on a free loopback port."""
    url, process = _start_moto(tmp_path_factory.mktemp("moto") / "moto.log")
    try:
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@dataclass(frozen=True)
class StoreCase:
    """One media store under test."""

    kind: str
    """``local``, ``ray`` or ``s3``."""
    store: DurableMediaStore
    """The store the runner, the tools and the test share."""
    cache_actor: str | None = None
    """The Ray owner actor's name for ``ray``; ``None`` otherwise."""


def _ray_store(root: Path, namespace: str) -> tuple[RayObjectStoreMediaStore, str]:
    actor = f"image-cache-{uuid.uuid4().hex[:12]}"
    store = RayObjectStoreMediaStore(
        LocalDirectoryMediaStore(root), actor_name=actor, namespace=namespace
    )
    return store, actor


def _kill_actor(name: str, namespace: str) -> None:
    import ray

    try:
        ray.kill(ray.get_actor(name, namespace=namespace), no_restart=True)
    except ValueError:
        pass  # never created, or already gone


@pytest.fixture
def ray_store(
    ray_session: None, tmp_path: Path, namespace: str
) -> Iterator[tuple[RayObjectStoreMediaStore, str]]:
    """A ``RayObjectStoreMediaStore`` written through to a local directory, and its actor."""
    store, actor = _ray_store(tmp_path / "media", namespace)
    try:
        yield store, actor
    finally:
        _kill_actor(actor, namespace)


@pytest.fixture(params=["local", "ray", "s3"])
def store_case(
    request: pytest.FixtureRequest, ray_session: None, tmp_path: Path, namespace: str
) -> Iterator[StoreCase]:
    """Each store in turn: a local directory, the Ray cache over one, and S3 on moto."""
    kind = request.param
    if kind == "local":
        yield StoreCase(kind, LocalDirectoryMediaStore(tmp_path / "media"))
    elif kind == "ray":
        store, actor = _ray_store(tmp_path / "media", namespace)
        try:
            yield StoreCase(kind, store, cache_actor=actor)
        finally:
            _kill_actor(actor, namespace)
    else:
        endpoint: str = request.getfixturevalue("image_moto_endpoint")
        bucket = f"images-{uuid.uuid4().hex[:16]}"
        _create_bucket(endpoint, bucket)
        s3 = make_s3_store(endpoint, bucket)
        try:
            yield StoreCase(kind, s3)
        finally:
            s3.close()


def _create_bucket(endpoint: str, bucket: str) -> None:
    import boto3

    client: Any = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=S3_REGION,
        aws_access_key_id=S3_KEYS["access_key_id"],
        aws_secret_access_key=S3_KEYS["secret_access_key"],
    )
    try:
        client.create_bucket(Bucket=bucket)
    finally:
        client.close()
