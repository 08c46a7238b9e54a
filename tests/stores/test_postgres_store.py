"""What only the PostgreSQL store has: its config, the driver extra, connecting,
schema creation by many processes at once, and use from any event loop."""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path

import pytest

from dex_agents_ray.engine import PostgresStoreConfig, SqliteStoreConfig
from dex_agents_ray.engine._engine import _store_config
from dex_agents_ray.engine.store._open import open_store
from dex_agents_ray.engine.store._postgres_sql import _fetch_one
from dex_agents_ray.engine.store._records import Commit
from dex_agents_ray.engine.store._store import redact_dsn
from tests.stores.postgres_server import PostgresServer
from tests.stores.records import opened, run


def test_the_password_never_shows() -> None:
    config = PostgresStoreConfig(dsn="postgresql://ann:s3cret@db.example:5432/flows")
    for text in (repr(config), str(config), config.location, repr(open_store(config))):
        assert "s3cret" not in text
        assert "ann:***@db.example:5432/flows" in text
    assert redact_dsn("host=db password='a b\\' c' user=ann") == "host=db password=*** user=ann"
    assert redact_dsn("postgresql://db/flows?password=x&sslmode=require") == (
        "postgresql://db/flows?password=***&sslmode=require"
    )
    assert redact_dsn("postgres://ann@db/flows") == "postgres://ann@db/flows"


def test_config_refuses_bad_fields_naming_them() -> None:
    with pytest.raises(ValueError, match="dsn must not be empty"):
        PostgresStoreConfig(dsn=" ")
    with pytest.raises(ValueError, match=r"postgresql:// URI.*mysql://ann:\*\*\*@db"):
        PostgresStoreConfig(dsn="mysql://ann:pw@db/x")
    with pytest.raises(ValueError, match="pool_size must be at least 1, got 0"):
        PostgresStoreConfig(dsn="host=db", pool_size=0)
    with pytest.raises(ValueError, match="durability must be 'full' or 'process'"):
        PostgresStoreConfig(dsn="host=db", durability="none")


def test_engine_reads_postgres_uris_and_configs(tmp_path: Path) -> None:
    for uri in ("postgresql://ann@db/flows", "postgres://ann@db/flows"):
        assert _store_config(uri) == PostgresStoreConfig(dsn=uri)
    config = PostgresStoreConfig(dsn="host=db", pool_size=2)
    assert _store_config(config) is config
    assert _store_config(str(tmp_path / "x.db")) == SqliteStoreConfig(path=str(tmp_path / "x.db"))


def test_a_missing_extra_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)

    with pytest.raises(ImportError, match=r'pip install "dex-agents-ray\[postgres\]"') as caught:
        open_store(PostgresStoreConfig(dsn="host=db"))

    assert isinstance(caught.value.__cause__, ImportError)


async def test_a_wrong_password_fails_open_with_the_drivers_error(
    postgres_server: PostgresServer,
) -> None:
    import psycopg

    dsn = postgres_server.dsn().replace(postgres_server.password, "wrong-password")
    store = open_store(PostgresStoreConfig(dsn=dsn))

    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        await store.open()

    with pytest.raises(RuntimeError, match="not open"):
        await store.runs.get_run("a")


async def test_many_stores_create_the_schema_at_once(postgres_config: PostgresStoreConfig) -> None:
    stores = [open_store(postgres_config) for _ in range(6)]
    try:
        await asyncio.gather(*(store.open() for store in stores))
        epochs = await asyncio.gather(*(store.runs.activate("a") for store in stores))
        assert sorted(epoch for epoch, _ in epochs) == [1, 2, 3, 4, 5, 6]
    finally:
        await asyncio.gather(*(store.close() for store in stores))


async def test_one_store_serves_callers_on_other_event_loops(
    postgres_config: PostgresStoreConfig,
) -> None:
    config = PostgresStoreConfig(dsn=postgres_config.dsn, pool_size=2, durability="process")
    async with opened(config) as store:
        epoch, _ = await store.runs.activate("a")
        results: list[object] = []

        def other_thread() -> None:
            async def use() -> None:
                await store.runs.commit(Commit(flow_id="a", epoch=epoch, run=run("a")))
                results.append(await store.runs.get_run("a"))

            asyncio.run(use())

        thread = threading.Thread(target=other_thread)
        thread.start()
        await asyncio.to_thread(thread.join)

        assert len(results) == 1 and results[0] == await store.runs.get_run("a")
        assert results[0] is not None
        # durability="process" is a per-connection setting: look at a pooled one.
        setting = await store.database.run(_fetch_one, "SHOW synchronous_commit", ())  # type: ignore[attr-defined]
        assert setting == ("off",)


async def test_a_connection_the_server_dropped_is_replaced_at_checkout(
    postgres_config: PostgresStoreConfig,
) -> None:
    import psycopg

    async with opened(postgres_config) as store:
        epoch, _ = await store.runs.activate("a")
        store.database._probe.IDLE_SECONDS = 0.0  # type: ignore[attr-defined]  # probe every checkout
        with psycopg.connect(postgres_config.dsn, autocommit=True) as admin:
            dropped = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone()
        assert dropped is not None and dropped[0] >= 1

        await store.runs.commit(Commit(flow_id="a", epoch=epoch, run=run("a")))

        assert await store.runs.get_run("a") is not None
