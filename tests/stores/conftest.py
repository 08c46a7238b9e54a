"""Fixtures for the store tests: a real PostgreSQL server for the session, a fresh
database per test, and each store backend behind one parametrized fixture."""

from __future__ import annotations

import os
import sqlite3
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from dex_agents_ray.engine import PostgresStoreConfig, SqliteStoreConfig, StoreConfig
from tests.stores.postgres_server import (
    SERVICES_HINT,
    PostgresServer,
    find_bin_dir,
    running_server,
)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One throwaway PostgreSQL cluster for the whole session."""
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
def postgres_config(postgres_dsn: str) -> PostgresStoreConfig:
    return PostgresStoreConfig(dsn=postgres_dsn)


@dataclass(frozen=True)
class Backend:
    """One store backend under test, with raw access for what the API cannot do."""

    name: str
    config: StoreConfig

    def set_schema_version(self, version: int) -> None:
        query = f"UPDATE meta SET value = '{version:d}' WHERE key = 'schema_version'"
        if isinstance(self.config, SqliteStoreConfig):
            db = sqlite3.connect(self.config.path)
            try:
                with db:
                    db.execute(query)
            finally:
                db.close()
            return
        import psycopg

        with psycopg.connect(self.config.dsn, autocommit=True) as conn:
            conn.execute(query.encode())


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "sqlite":
        return Backend("sqlite", SqliteStoreConfig(path=str(tmp_path / "store.db")))
    return Backend("postgres", request.getfixturevalue("postgres_config"))
