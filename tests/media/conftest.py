"""Fixtures for the media tests: a moto S3 server over HTTP and a local Ray."""

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
from pathlib import Path
from typing import Any

import pytest
from media_s3_proxy import S3FaultProxy
from media_support import S3_KEYS, S3_REGION, make_s3_store

from dex_agents_ray.s3 import S3MediaStore


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_for_http(url: str, process: subprocess.Popen[bytes], deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"moto server exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except urllib.error.HTTPError:
            return  # it answered
        except OSError:
            # Not listening yet; wait on the process rather than sleeping blindly.
            try:
                process.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                pass
    raise RuntimeError(f"moto server did not answer at {url} within {deadline_s} s")


@pytest.fixture(scope="session")
def moto_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A moto S3 server in server mode, as a subprocess on a free loopback port."""
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    for _ in range(3):
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        with log.open("ab") as output:
            process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                stdout=output,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONWARNINGS": "ignore"},
            )
        try:
            _wait_for_http(url, process, 60)
        except RuntimeError:
            process.kill()
            process.wait()
            continue  # the port was taken in between; try another
        try:
            yield url
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        return
    raise RuntimeError(f"could not start moto server; see {log}: {log.read_text()[-2000:]}")


@pytest.fixture(scope="session")
def s3_admin(moto_endpoint: str) -> Any:
    """A plain boto3 client on the moto server, for set-up and for tampering with objects."""
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=moto_endpoint,
        region_name=S3_REGION,
        aws_access_key_id=S3_KEYS["access_key_id"],
        aws_secret_access_key=S3_KEYS["secret_access_key"],
    )
    yield client
    client.close()


@pytest.fixture
def s3_bucket(s3_admin: Any) -> str:
    name = f"media-{uuid.uuid4().hex[:16]}"
    s3_admin.create_bucket(Bucket=name)
    return name


@pytest.fixture
def s3_store(moto_endpoint: str, s3_bucket: str) -> Iterator[S3MediaStore]:
    store = make_s3_store(moto_endpoint, s3_bucket)
    yield store
    store.close()


@pytest.fixture
def s3_proxy(moto_endpoint: str) -> Iterator[S3FaultProxy]:
    with S3FaultProxy(moto_endpoint) as proxy:
        yield proxy


@pytest.fixture(scope="session")
def ray_namespace() -> Iterator[str]:
    """A local Ray (reused when one is already initialized) and a namespace of our own."""
    import ray

    namespace = f"media-tests-{uuid.uuid4().hex[:12]}"
    started = False
    if not ray.is_initialized():
        # address="local": always a new cluster of our own, never another
        # test run's or a `ray start` head that happens to run on this machine.
        ray.init(
            address="local",
            num_cpus=2,
            include_dashboard=False,
            namespace=namespace,
            log_to_driver=False,
            configure_logging=False,
        )
        started = True
    try:
        yield namespace
    finally:
        if started:
            ray.shutdown()


@pytest.fixture
def media_cache_actor(ray_namespace: str) -> Iterator[str]:
    """A unique owner-actor name; the actor is killed after the test."""
    import ray

    name = f"media-cache-{uuid.uuid4().hex[:12]}"
    yield name
    try:
        ray.kill(ray.get_actor(name, namespace=ray_namespace))
    except ValueError:
        pass  # never created, or already dead


@pytest.fixture
def local_root(tmp_path: Path) -> Path:
    return tmp_path / "media"
