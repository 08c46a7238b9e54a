"""Fixtures of the tracing tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.tracing.otlp_receiver import OtlpReceiver


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    """A loopback OTLP/HTTP trace receiver, per test."""
    server = OtlpReceiver()
    try:
        yield server
    finally:
        server.close()
