"""open_database: URLs, SQLite settings, schema creation and version, concurrent writers."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import text, update

from lakefuse.db import SqlStagingStore, open_database, schema
from lakefuse.errors import ConfigError
from lakefuse.graveler.model import ValueRecord


def test_sqlite_file_settings_and_parent_directory(tmp_path):
    path = tmp_path / "deep" / "er" / "lakefuse.db"
    with open_database(f"sqlite:///{path}") as database:
        assert path.exists()
        assert database.dialect == "sqlite"
        with database.read() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000
        assert database.schema_version() == schema.SCHEMA_VERSION


def test_reopen_keeps_data(tmp_path):
    url = f"sqlite:///{tmp_path / 'lakefuse.db'}"
    with open_database(url) as database:
        SqlStagingStore(database).set("t", b"k", None)
    with open_database(url) as database:
        assert SqlStagingStore(database).get("t", b"k") is None
        assert database.schema_version() == schema.SCHEMA_VERSION


def test_newer_schema_version_is_refused(tmp_path):
    url = f"sqlite:///{tmp_path / 'lakefuse.db'}"
    with open_database(url) as database:
        with database.write() as conn:
            conn.execute(update(schema.schema_version).values(version=schema.SCHEMA_VERSION + 1))
    with pytest.raises(ConfigError, match="newer"):
        open_database(url)


def test_in_memory_sqlite():
    with open_database("sqlite://") as database:
        staging = SqlStagingStore(database)
        staging.set("t", b"k", ValueRecord(b"k", b"i", b"v"))
        assert staging.count("t") == 1


@pytest.mark.parametrize("url", ["mysql://u@127.0.0.1/x", "not a url", "oracle+cx://"])
def test_unsupported_urls(url):
    with pytest.raises(ConfigError):
        open_database(url)


def test_unreachable_postgres_is_config_error():
    with pytest.raises(ConfigError, match="cannot open database"):
        open_database("postgresql+psycopg://nobody@127.0.0.1:1/none")


def test_sqlite_writers_in_threads_queue_instead_of_failing(tmp_path):
    """BEGIN IMMEDIATE + busy timeout: concurrent writers wait for the lock, none fails."""
    with open_database(f"sqlite:///{tmp_path / 'lakefuse.db'}") as database:
        staging = SqlStagingStore(database)
        errors: list[BaseException] = []

        def writer(worker: int) -> None:
            try:
                for i in range(40):
                    key = f"{worker}/{i}".encode()
                    staging.set("t", key, ValueRecord(key, b"i", b"v"))
                    staging.set_many("t", [(key + b"/a", None), (key + b"/b", None)])
                    assert staging.get("t", key) is not ...
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert not errors
        assert staging.count("t") == 4 * 40 * 3


def test_read_transaction_does_not_block_writer(tmp_path):
    """WAL: an open read transaction does not stop a writer (and keeps its snapshot)."""
    with open_database(f"sqlite:///{tmp_path / 'lakefuse.db'}") as database:
        staging = SqlStagingStore(database)
        staging.set("t", b"a", None)
        with database.read() as conn:
            assert conn.execute(text("SELECT count(*) FROM staging_entries")).scalar() == 1
            staging.set("t", b"b", None)  # would time out if the reader blocked the writer
            assert conn.execute(text("SELECT count(*) FROM staging_entries")).scalar() == 1
        assert staging.count("t") == 2


def test_postgres_keys_and_names_order(clean_pg_database):
    """bytea keys and C-collated names order bytewise on PostgreSQL too."""
    with clean_pg_database.read() as conn:
        collation = conn.execute(
            text(
                "SELECT collation_name FROM information_schema.columns "
                "WHERE table_name = 'branches' AND column_name = 'name'"
            )
        ).scalar()
        key_type = conn.execute(
            text(
                "SELECT data_type FROM information_schema.columns "
                "WHERE table_name = 'staging_entries' AND column_name = 'key'"
            )
        ).scalar()
    assert collation == "C"
    assert key_type == "bytea"
