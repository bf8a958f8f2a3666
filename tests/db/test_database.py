"""open_database: URLs, SQLite settings, schema creation, version and migration, concurrent writers."""

from __future__ import annotations

import sqlite3
import threading
import uuid

import pytest
from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    ForeignKey,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    create_engine,
    inspect,
    text,
    update,
)
from sqlalchemy.engine import make_url

from lakefuse.db import SqlRefStore, SqlStagingStore, open_database, schema
from lakefuse.errors import ConfigError
from lakefuse.graveler.model import StagingChanges, ValueRecord


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


def test_rows_on_an_sqlite_file_read_through_a_connection_per_thread(tmp_path):
    """``Database.rows`` on an SQLite file: the same rows as through SQLAlchemy, each thread on
    a connection of its own that cannot write, what other connections commit visible at once,
    and nothing once the database is closed."""
    from sqlalchemy import bindparam, select

    entries = schema.staging_entries
    statement = select(entries.c.key, entries.c.is_tombstone).where(
        entries.c.token == bindparam("token")).order_by(entries.c.key).limit(bindparam("limit"))
    database = open_database(f"sqlite:///{tmp_path / 'lakefuse.db'}")
    staging = SqlStagingStore(database)
    staging.set_many("t", [(b"a", ValueRecord(b"a", b"i", b"v")), (b"b", None), (b"c", ValueRecord(b"c", b"i", b"v"))])
    with database.read() as conn:
        expected = [tuple(row) for row in conn.execute(statement, {"token": "t", "limit": 2})]
    assert database.rows(statement, {"token": "t", "limit": 2}) == expected == [(b"a", 0), (b"b", 1)]
    staging.set("t", b"0", None)  # committed by another connection: the next read sees it
    assert [key for key, _ in database.rows(statement, {"token": "t", "limit": 1})] == [b"0"]

    seen: dict[str, object] = {}

    def other_thread() -> None:
        seen["rows"] = database.rows(statement, {"token": "t", "limit": 10})
        seen["connection"] = database._direct._connection()

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join(timeout=30)
    assert [key for key, _ in seen["rows"]] == [b"0", b"a", b"b", b"c"]
    assert seen["connection"] is not database._direct._connection()
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        database._direct._connection().execute("DELETE FROM staging_entries")
    database.close()
    with pytest.raises(sqlite3.ProgrammingError):
        database.rows(statement, {"token": "t", "limit": 1})


def test_rows_in_memory_and_on_postgres_go_through_sqlalchemy(clean_pg_database):
    in_memory = open_database("sqlite://")
    for database in (in_memory, clean_pg_database):
        assert database._direct is None
        staging = SqlStagingStore(database)
        staging.set("t", b"k", ValueRecord(b"k", b"i", b"v"))
        assert staging.get("t", b"k") == ValueRecord(b"k", b"i", b"v")
        assert [key for key, _ in staging.iterate("t")] == [b"k"]
    in_memory.close()


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


# migration from schema version 1 ----------------------------------------------------------------
def v1_metadata() -> MetaData:
    """The tables as schema version 1 created them (a copy of the old ``lakefuse.db.schema``)."""
    name = String().with_variant(String(collation="C"), "postgresql")
    metadata = MetaData()
    Table(
        "schema_version",
        metadata,
        Column("id", Integer, primary_key=True, autoincrement=False),
        Column("version", Integer, nullable=False),
    )
    Table(
        "repositories",
        metadata,
        Column("id", name, primary_key=True),
        Column("storage_namespace", Text, nullable=False),
        Column("default_branch", name, nullable=False),
        Column("creation_date", BigInteger, nullable=False),
    )
    Table(
        "branches",
        metadata,
        Column("repo", name, ForeignKey("repositories.id", ondelete="CASCADE"), nullable=False),
        Column("name", name, nullable=False),
        Column("commit_id", name, nullable=False),
        Column("staging_token", name, nullable=False),
        Column("sealed_tokens", Text, nullable=False),
        PrimaryKeyConstraint("repo", "name"),
    )
    Table(
        "tags",
        metadata,
        Column("repo", name, ForeignKey("repositories.id", ondelete="CASCADE"), nullable=False),
        Column("name", name, nullable=False),
        Column("commit_id", name, nullable=False),
        PrimaryKeyConstraint("repo", "name"),
    )
    Table(
        "commits",
        metadata,
        Column("repo", name, ForeignKey("repositories.id", ondelete="CASCADE"), nullable=False),
        Column("id", name, nullable=False),
        Column("metarange_id", name, nullable=False),
        Column("parents", Text, nullable=False),
        Column("message", Text, nullable=False),
        Column("committer", Text, nullable=False),
        Column("creation_date", BigInteger, nullable=False),
        Column("metadata", Text, nullable=False),
        Column("generation", BigInteger, nullable=False),
        PrimaryKeyConstraint("repo", "id"),
    )
    Table(
        "staging_entries",
        metadata,
        Column("token", name, nullable=False),
        Column("key", LargeBinary, nullable=False),
        Column("identity", LargeBinary, nullable=True),
        Column("value", LargeBinary, nullable=True),
        Column("is_tombstone", Boolean, nullable=False),
        PrimaryKeyConstraint("token", "key"),
        sqlite_with_rowid=False,
    )
    return metadata


def create_v1_database(url: str) -> None:
    """A version 1 database at ``url`` holding repository ``repo``, branch ``main`` (token
    ``tok``) and two staged rows."""
    engine = create_engine(url)
    metadata = v1_metadata()
    tables = metadata.tables
    try:
        with engine.begin() as conn:
            metadata.create_all(conn)
            conn.execute(tables["schema_version"].insert().values(id=1, version=1))
            conn.execute(tables["repositories"].insert().values(id="repo", storage_namespace="local://ns", default_branch="main", creation_date=1))
            conn.execute(
                tables["commits"].insert().values(
                    repo="repo", id="c0", metarange_id="mr", parents="[]", message="m", committer="c",
                    creation_date=1, metadata="{}", generation=1,
                )
            )
            conn.execute(tables["branches"].insert().values(repo="repo", name="main", commit_id="c0", staging_token="tok", sealed_tokens="[]"))
            conn.execute(
                tables["staging_entries"].insert(),
                [
                    {"token": "tok", "key": b"old", "identity": b"i", "value": b"v", "is_tombstone": False},
                    {"token": "tok", "key": b"gone", "identity": None, "value": None, "is_tombstone": True},
                ],
            )
    finally:
        engine.dispose()


def check_migrated(url: str) -> None:
    with open_database(url) as database:
        assert database.schema_version() == 2
        columns = {column["name"] for column in inspect(database.engine).get_columns("staging_entries")}
        assert {"seq", "origin"} <= columns
        indexes = {index["name"] for index in inspect(database.engine).get_indexes("staging_entries")}
        assert schema.staging_entries_by_seq.name in indexes
        refs, staging = SqlRefStore(database), SqlStagingStore(database)
        # data preserved
        branch = refs.get_branch("repo", "main")
        assert (branch.commit_id, branch.staging_token) == ("c0", "tok")
        assert refs.get_commit("repo", "c0").message == "m"
        assert staging.get("tok", b"old") == ValueRecord(b"old", b"i", b"v")
        assert staging.get("tok", b"gone") is None
        # rows from before have no version: the feed starts at 0 and reports new writes only
        assert staging.changes_since("tok", 0) == StagingChanges(0, ())
        assert refs.stage_on_branch("repo", "main", branch, [(b"new", None)]) is True
        staging.set("tok", b"old", ValueRecord(b"old", b"i2", b"v2"))
        assert staging.changes_since("tok", 0) == StagingChanges(2, (b"new", b"old"))
        assert staging.changes_since("tok", 1, exclude_origin=staging.origin) == StagingChanges(2, ())
        staging.drop_prefix("tok", b"go")
        assert staging.count("tok") == 2
        assert staging.changes_since("tok", 2).keys is None
        refs.delete_branch("repo", "main")
        assert staging.count("tok") == 0
    with open_database(url) as database:  # opening again: already version 2
        assert database.schema_version() == 2


def test_sqlite_version_1_database_is_migrated(tmp_path):
    url = f"sqlite:///{tmp_path / 'v1.db'}"
    create_v1_database(url)
    check_migrated(url)


def test_migration_is_one_transaction(tmp_path, monkeypatch):
    """A migration failing half-way leaves the version 1 database as it was."""
    from lakefuse.db import database as database_module

    url = f"sqlite:///{tmp_path / 'v1.db'}"
    create_v1_database(url)

    def broken_index_create(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(schema.staging_entries_by_seq, "create", broken_index_create)
    with pytest.raises(RuntimeError, match="disk on fire"):
        database_module.open_database(url)
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SELECT version FROM schema_version")).scalar_one() == 1
        assert "seq" not in {column["name"] for column in inspect(engine).get_columns("staging_entries")}
        assert not inspect(engine).has_table("staging_versions")
    finally:
        engine.dispose()
    monkeypatch.undo()
    check_migrated(url)


def test_postgres_version_1_database_is_migrated(pg_url):
    """In a schema of its own (``search_path``), so the session's tables are left alone."""
    name = f"v1_{uuid.uuid4().hex[:12]}"
    admin = create_engine(pg_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE SCHEMA {name}"))
    url = make_url(pg_url).update_query_dict({"options": f"-csearch_path={name}"}).render_as_string(hide_password=False)
    try:
        create_v1_database(url)
        assert "staging_versions" not in inspect(admin).get_table_names(schema=name)
        check_migrated(url)
        assert "staging_versions" in inspect(admin).get_table_names(schema=name)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP SCHEMA {name} CASCADE"))
        admin.dispose()
