"""Fixtures of the version-control core tests (tests/graveler/test_*.py).

``graveler_stores`` is the ONE place the ref and staging stores come from; it is parametrized
over ``memory`` (the twins of ``lakefuse.graveler.memory``), ``sqlite`` (a file in tmp_path)
and ``postgres`` (one throwaway server per session from ``tests/pgserver.py``, tables emptied
before each test).  Committed content goes to ``CommittedManager`` over a local directory per
storage namespace, with small ranges so that a few hundred keys already span many ranges.
"""

from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from lakefuse.block.namespace import open_namespace
from lakefuse.config import CommittedConfig
from lakefuse.graveler.committed import CommittedManager
from lakefuse.graveler.committed.encoding import entry_to_record
from lakefuse.graveler.graveler import Graveler
from lakefuse.graveler.memory import MemoryRefStore, MemoryStagingStore
from lakefuse.graveler.model import Entry, ValueRecord

_HAVE_PGSERVER = (Path(__file__).resolve().parents[1] / "pgserver.py").exists()

#: ranges of a few dozen small records
SMALL_RANGES = CommittedConfig(range_min_bytes=2000, range_max_bytes=8000, range_raggedness=16)


@dataclass
class GravelerStores:
    kind: str  # "memory", "sqlite" or "postgres"
    refs: object
    staging: object
    url: str | None = None  # SQL: where a second process would open the same database


@pytest.fixture(scope="session")
def graveler_pg_database():
    if str(Path(__file__).resolve().parents[2]) not in sys.path:
        sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.pgserver import postgres_url_for_tests

    from lakefuse.db import open_database

    with postgres_url_for_tests() as url:
        database = open_database(url)
        try:
            yield database
        finally:
            database.close()


def _empty_postgres(database) -> None:
    from sqlalchemy import text

    from lakefuse.db.schema import DATA_TABLES

    with database.write() as conn:
        conn.execute(text(f"TRUNCATE {', '.join(table.name for table in DATA_TABLES)}"))


@pytest.fixture(params=["memory", "sqlite"] + (["postgres"] if _HAVE_PGSERVER else []))
def graveler_stores(request, tmp_path) -> GravelerStores:
    if request.param == "memory":
        staging = MemoryStagingStore(page_size=7)  # small pages: iteration crosses page borders
        return GravelerStores("memory", MemoryRefStore(staging), staging)
    from lakefuse.db import SqlRefStore, SqlStagingStore, open_database

    if request.param == "sqlite":
        database = open_database(f"sqlite:///{tmp_path}/db.sqlite")
        request.addfinalizer(database.close)
        kind = "sqlite"
    else:
        kind = "postgres"
        database = request.getfixturevalue("graveler_pg_database")
        _empty_postgres(database)
    url = database.engine.url.render_as_string(hide_password=False)
    return GravelerStores(kind, SqlRefStore(database), SqlStagingStore(database, page_size=7), url)


@pytest.fixture
def committed_for():
    """``storage_namespace -> CommittedManager`` over the namespace's local directory."""
    managers: list[CommittedManager] = []

    def open_committed(namespace: str) -> CommittedManager:
        manager = CommittedManager(open_namespace(namespace), None, None, SMALL_RANGES, upload_threads=0)
        managers.append(manager)
        return manager

    yield open_committed
    for manager in managers:
        manager.close()


@pytest.fixture
def graveler(graveler_stores, committed_for) -> Graveler:
    return Graveler(graveler_stores.refs, graveler_stores.staging, committed_for)


@pytest.fixture
def other_graveler(graveler_stores, committed_for):
    """A second Graveler on the same refs and staging, as another process would open them (SQL:
    a second ``Database`` on the URL; memory: ``peer()`` stores), so its staged writes are of
    another origin."""
    if graveler_stores.kind == "memory":
        staging = graveler_stores.staging.peer()
        yield Graveler(graveler_stores.refs.peer(staging), staging, committed_for)
        return
    from lakefuse.db import SqlRefStore, SqlStagingStore, open_database

    database = open_database(graveler_stores.url)
    yield Graveler(SqlRefStore(database), SqlStagingStore(database, page_size=7), committed_for)
    database.close()


@pytest.fixture
def namespace(tmp_path) -> str:
    return f"local://{tmp_path}/storage/repo1"


@pytest.fixture
def repo(graveler, namespace) -> str:
    graveler.create_repository("repo1", namespace)
    return "repo1"


def record(key: str | bytes, content: str = "A", **entry_fields) -> ValueRecord:
    """A record whose identity follows ``content`` (same content -> same identity)."""
    key_bytes = key.encode() if isinstance(key, str) else key
    checksum = hashlib.md5(content.encode()).hexdigest()
    fields = dict(physical_address="data/" + checksum, size=len(content), mtime=1_700_000_000, checksum=checksum)
    fields.update(entry_fields)
    return entry_to_record(key_bytes, Entry(**fields))


@pytest.fixture
def rec():
    """The ``record(key, content="A", **entry_fields)`` factory."""
    return record


def keys_of(items) -> list[str]:
    return [key.decode() for key, _record in items]


@pytest.fixture
def listed():
    """``listed(page_or_items) -> [str keys]`` of a listing."""
    return lambda items: keys_of(getattr(items, "items", items))
