"""The store tests' PostgreSQL fixtures, for jobs whose store is PostgreSQL: one
throwaway server for the test session, a fresh database per test."""

from __future__ import annotations

from tests.stores.conftest import postgres_dsn, postgres_server

__all__ = ["postgres_dsn", "postgres_server"]
