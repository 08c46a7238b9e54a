"""Fixtures for the LiteLLM client tests: LiteLLM imported once, a loopback provider server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from dex_agents_ray.litellm._loader import load_litellm
from tests.fake_provider import FakeProviderServer

# Warnings LiteLLM 1.110.2 causes inside pydantic, none about our code:
# - its logging path dumps each Responses API result, and pydantic warns that
#   the usage object LiteLLM extended with a cost is not the declared type;
# - its error paths build schemas of its TypedDicts (thinking blocks, reasoning
#   items) whose ReadOnly items pydantic warns it cannot protect. Our code
#   declares no TypedDict;
# - its OpenAI Chat Completions stream reads ``model_fields`` and
#   ``model_computed_fields`` from pydantic instances, which pydantic 2.11+
#   deprecates.
_LITELLM_WARNINGS = (
    "ignore:Pydantic serializer warnings:UserWarning",
    "ignore:Items? .* on TypedDict class .* using the `ReadOnly` qualifier:UserWarning",
    "ignore:Accessing the 'model_(computed_)?fields' attribute on the instance is deprecated"
    ":DeprecationWarning",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/litellm/" in item.nodeid.replace("\\", "/"):
            for spec in _LITELLM_WARNINGS:
                item.add_marker(pytest.mark.filterwarnings(spec))


@pytest.fixture(scope="session")
def litellm() -> Any:
    """The litellm module, imported once per test session (it takes seconds)."""
    return load_litellm()


@pytest.fixture(scope="session")
async def provider_server() -> AsyncIterator[FakeProviderServer]:
    server = FakeProviderServer()
    await server.start()
    try:
        yield server
    finally:
        await server.close()


@pytest.fixture
def server(provider_server: FakeProviderServer, litellm: Any) -> FakeProviderServer:
    """The loopback provider server, with no queued replies or recorded requests."""
    provider_server.reset()
    return provider_server
