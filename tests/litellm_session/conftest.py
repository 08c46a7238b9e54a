"""A loopback OpenAI-compatible server for session tests that call LiteLLM from host actors."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.fake_provider import FakeProviderServer


@pytest.fixture
async def provider() -> AsyncIterator[FakeProviderServer]:
    server = FakeProviderServer()
    await server.start()
    try:
        yield server
    finally:
        await server.close()
