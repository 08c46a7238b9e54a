"""One local Ray for the whole test session; each test gets its own namespace and store.

Likewise one throwaway PostgreSQL server for the session (started by the first test
that asks for it), with a fresh database per test."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.stores.postgres_server import (
    SERVICES_HINT,
    PostgresServer,
    find_bin_dir,
    running_server,
)

# Ray 2.60 turns on token auth for new local clusters; keep the CLI and the
# runtime in agreement so nothing depends on a token file from an earlier run.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
# Ray workers import the test flows by module name: put the repository on their path.
_ROOT = str(Path(__file__).resolve().parent.parent)
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (_ROOT, os.environ.get("PYTHONPATH", "")) if p
)


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    import ray

    if not ray.is_initialized():
        from dex_agents_ray.engine._engine import task_worker_system_config

        # address="local": always a new cluster of our own, never another
        # test run's or a `ray start` head that happens to run on this machine.
        ray.init(
            address="local",
            num_cpus=2,
            include_dashboard=False,
            _system_config=task_worker_system_config(),
            namespace=f"tests-{uuid.uuid4().hex[:8]}",
            log_to_driver=False,
        )
    yield
    from dex_agents_ray.session.tracing._relay import close_span_relays

    close_span_relays()  # no relay thread inside a Ray call while Ray shuts down
    ray.shutdown()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One throwaway PostgreSQL cluster for the whole session (the store and job tests)."""
    bin_dir = find_bin_dir()
    if bin_dir is None:
        message = f"PostgreSQL binaries not found under /usr/lib/postgresql: {SERVICES_HINT}"
        if os.environ.get("CI"):
            pytest.fail(message)  # CI runs scripts/services, so this is a broken set-up
        pytest.skip(message)
    with running_server(bin_dir) as server:
        yield server


@pytest.fixture
def postgres_dsn(postgres_server: PostgresServer) -> str:
    """The DSN of a new, empty database for this test."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return postgres_server.dsn(name)


@pytest.fixture
def namespace() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "store" / "engine.db"


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    path = tmp_path / "state"
    path.mkdir()
    return path


@pytest.fixture
async def engine_factory(
    ray_session: None, namespace: str, store_path: Path
) -> AsyncIterator[object]:
    """Start engines on this test's namespace and store; all are shut down after."""
    from dex_agents_ray.engine import FlowEngine

    engines: list[FlowEngine] = []

    async def start(flows: list[object], **kwargs: object) -> FlowEngine:
        kwargs.setdefault("store", store_path)
        kwargs.setdefault("namespace", namespace)
        engine = await FlowEngine.start(flows, **kwargs)  # type: ignore[arg-type]
        engines.append(engine)
        return engine

    try:
        yield start
    finally:
        for engine in engines:
            await engine.shutdown(stop_hosts=True)


@pytest.fixture
async def provider() -> AsyncIterator[object]:
    """The loopback OpenAI-compatible server (tests/fake_provider.py), per test."""
    from tests.fake_provider import FakeProviderServer

    server = FakeProviderServer()
    await server.start()
    try:
        yield server
    finally:
        await server.close()


@pytest.fixture
def mcp_http() -> Iterator[object]:
    """The test MCP server over Streamable HTTP (tests/mcp/mcp_server.py), per test."""
    from tests.mcp.mcp_server import HttpMcpServer

    server = HttpMcpServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()
