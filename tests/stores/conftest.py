"""Fixtures for the store tests: each store backend behind one parametrized fixture.

The PostgreSQL server (one for the whole test session) and the fresh database per
test, ``postgres_server`` and ``postgres_dsn``, are in ``tests/conftest.py``: the
jobs tests use them too, and one server serves both."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

import pytest

from dex_agents_ray.engine import PostgresStoreConfig, SqliteStoreConfig, StoreConfig


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
