"""The job tests' Ray head: one ``ray start --head`` for the package, not one per test.

Each test submits its own jobs, with its own namespace and store, so they share
the head as two drivers share a cluster."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.jobs.head import RayHead, ray_head


@pytest.fixture(scope="package")
def head() -> Iterator[RayHead]:
    with ray_head() as started:
        yield started
