"""Fixtures of the store contract suites: one ``backend`` per implementation.

``backend`` is parametrized over ``memory``, ``sqlite`` (a file in tmp_path) and ``postgres``
(one throwaway server per test session, see ``tests/pgserver.py``; its tables are emptied
before every test).  Each backend gives a RefStore and a StagingStore sharing one store, so
deleting a repository can be seen to drop its staged entries.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
import pytest

try:
    from tests.pgserver import postgres_url_for_tests
except ModuleNotFoundError:  # run without the repository root on sys.path (plain `pytest`)
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.pgserver import postgres_url_for_tests

from sqlalchemy import text

from lakefuse.db import Database, SqlRefStore, SqlStagingStore, open_database
from lakefuse.db.schema import DATA_TABLES
from lakefuse.graveler.memory import MemoryRefStore, MemoryStagingStore


@dataclass
class Backend:
    kind: str  # "memory", "sqlite" or "postgres"
    refs: object
    staging: object
    url: str | None = None  # SQL backends: where another process can open the same database


@pytest.fixture(scope="session")
def pg_url():
    with postgres_url_for_tests() as url:
        yield url


@pytest.fixture(scope="session")
def pg_database(pg_url):
    database = open_database(pg_url)
    yield database
    database.close()


def empty_postgres(database: Database) -> None:
    names = ", ".join(table.name for table in DATA_TABLES)
    with database.write() as conn:
        conn.execute(text(f"TRUNCATE {names}"))


@pytest.fixture
def sqlite_database(tmp_path):
    database = open_database(f"sqlite:///{tmp_path / 'db' / 'lakefuse.db'}")
    yield database
    database.close()


@pytest.fixture
def clean_pg_database(pg_database):
    empty_postgres(pg_database)
    return pg_database


def _sql_backend(kind: str, database: Database) -> Backend:
    return Backend(
        kind=kind,
        refs=SqlRefStore(database),
        staging=SqlStagingStore(database),
        url=database.engine.url.render_as_string(hide_password=False),
    )


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def backend(request) -> Backend:
    if request.param == "memory":
        staging = MemoryStagingStore()
        return Backend("memory", MemoryRefStore(staging), staging)
    if request.param == "sqlite":
        return _sql_backend("sqlite", request.getfixturevalue("sqlite_database"))
    return _sql_backend("postgres", request.getfixturevalue("clean_pg_database"))


@pytest.fixture(params=["sqlite", "postgres"])
def sql_backend(request) -> Backend:
    if request.param == "sqlite":
        return _sql_backend("sqlite", request.getfixturevalue("sqlite_database"))
    return _sql_backend("postgres", request.getfixturevalue("clean_pg_database"))


@pytest.fixture
def refs(backend):
    return backend.refs


@pytest.fixture
def staging(backend):
    return backend.staging
