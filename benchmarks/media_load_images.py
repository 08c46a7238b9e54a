"""Repeated ``load_images`` from the Ray object-store cache, S3 (moto) and a local directory.

Starts a local Ray and a moto S3 server on a free loopback port, stores the
same images in ``LocalDirectoryMediaStore``, ``S3MediaStore`` and
``RayObjectStoreMediaStore`` (written through to that S3 store), then times
``load_images`` of all of them, rounds interleaved so drift hits every store
alike, both in this driver and inside a Ray actor (another process on the
node, where a model-calling Step would run). Prints medians and ratios.

    .venv/bin/python benchmarks/media_load_images.py [--images 8] [--size 500000] [--rounds 30]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from dex_agents_ray.media import (
    AgentImageReference,
    LocalDirectoryMediaStore,
    MediaStore,
    RayObjectStoreMediaStore,
    load_images,
    verify_image_bytes,
)
from dex_agents_ray.s3 import S3MediaStore

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
KEYS = {"access_key_id": "bench-key", "secret_access_key": "bench-not-a-secret"}


def make_png(seed: int, size: int) -> bytes:
    """A real 2x2 PNG padded to about ``size`` bytes with a private chunk of random bytes."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    header = chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 2, 8, 0, 0, 0, 0))
    pixels = chunk(b"IDAT", zlib.compress(bytes([0, seed % 256, 1, 0, 2, 3])))
    padding = chunk(b"prVt", random.Random(seed).randbytes(max(0, size - 80)))
    return b"\x89PNG\r\n\x1a\n" + header + pixels + padding + chunk(b"IEND", b"")


@contextmanager
def moto_server() -> Iterator[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(url, timeout=1):
                    break
            except urllib.error.HTTPError:
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("moto server did not start") from None
                try:
                    process.wait(timeout=0.1)
                except subprocess.TimeoutExpired:
                    pass
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


async def time_rounds(
    stores: dict[str, MediaStore], references: dict[str, list[AgentImageReference]], rounds: int
) -> dict[str, list[float]]:
    """Seconds per ``load_images`` call, per store; one warm-up call each first."""
    for name, store in stores.items():
        await load_images(store, references[name])
    timings: dict[str, list[float]] = {name: [] for name in stores}
    for _ in range(rounds):
        for name, store in stores.items():
            started = time.perf_counter()
            loaded = await load_images(store, references[name])
            timings[name].append(time.perf_counter() - started)
            assert len(loaded) == len(references[name])
    return timings


class Reader:
    """Runs the same measurement inside a Ray worker process."""

    def measure(
        self,
        stores: dict[str, MediaStore],
        references: dict[str, list[AgentImageReference]],
        rounds: int,
    ) -> dict[str, list[float]]:
        return asyncio.run(time_rounds(stores, references, rounds))


def report(title: str, timings: dict[str, list[float]], count: int, size: int) -> None:
    medians = {name: statistics.median(values) for name, values in timings.items()}
    ray_median = medians["ray"]
    megabytes = count * size / 1e6
    print(
        f"\n{title}: load_images of {count} images x {size:,} bytes, {len(timings['ray'])} rounds"
    )
    print(f"  {'store':<8} {'median ms':>10} {'p90 ms':>9} {'MB/s':>8} {'x Ray':>7}")
    for name, values in timings.items():
        p90 = statistics.quantiles(values, n=10)[-1]
        print(
            f"  {name:<8} {medians[name] * 1e3:>10.2f} {p90 * 1e3:>9.2f} "
            f"{megabytes / medians[name]:>8.0f} {medians[name] / ray_median:>7.1f}"
        )


async def main(arguments: Sequence[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=8)
    parser.add_argument("--size", type=int, default=500_000)
    parser.add_argument("--rounds", type=int, default=30)
    options = parser.parse_args(arguments)

    import ray

    namespace = f"media-bench-{uuid.uuid4().hex[:8]}"
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        namespace=namespace,
        log_to_driver=False,
        configure_logging=False,
    )
    directory = tempfile.mkdtemp(prefix="media-bench-")
    try:
        with moto_server() as endpoint:
            import boto3

            bucket = f"bench-{uuid.uuid4().hex[:12]}"
            admin = boto3.client(
                "s3",
                endpoint_url=endpoint,
                region_name="us-east-1",
                aws_access_key_id=KEYS["access_key_id"],
                aws_secret_access_key=KEYS["secret_access_key"],
            )
            admin.create_bucket(Bucket=bucket)
            admin.close()
            s3 = S3MediaStore(
                bucket,
                "bench",
                endpoint_url=endpoint,
                region_name="us-east-1",
                force_path_style=True,
                **KEYS,
            )
            stores: dict[str, MediaStore] = {
                "ray": RayObjectStoreMediaStore(s3, actor_name="media-bench", namespace=namespace),
                "s3": s3,
                "local": LocalDirectoryMediaStore(os.path.join(directory, "local")),
            }
            images = [make_png(seed, options.size) for seed in range(options.images)]
            references = {
                name: [await store.put_image(image) for image in images]
                for name, store in stores.items()
            }
            driver = await time_rounds(stores, references, options.rounds)
            verify_only = []
            for _ in range(options.rounds):
                started = time.perf_counter()
                for reference, image in zip(references["ray"], images, strict=True):
                    verify_image_bytes(reference, image)
                verify_only.append(time.perf_counter() - started)
            reader: Any = ray.remote(num_cpus=0)(Reader).remote()
            worker = await reader.measure.remote(stores, references, options.rounds)
            report("In the driver", driver, options.images, options.size)
            print(
                f"  (verify_image_bytes alone, which every read runs: "
                f"{statistics.median(verify_only) * 1e3:.2f} ms)"
            )
            report("In a Ray actor on the same node", worker, options.images, options.size)
            ray.kill(reader)
            ray.kill(ray.get_actor("media-bench", namespace=namespace))
            s3.close()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
        ray.shutdown()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
