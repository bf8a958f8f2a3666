"""The SQL schema of lakefuse: refs (repositories, branches, tags, commits) and staged entries.

SQLAlchemy Core tables only (no ORM).  ``SCHEMA_VERSION`` is the version this code writes; the
``schema_version`` table records the version a database was created with, so a future release
can migrate old databases and an old release refuses a newer database.

Ordering: names and IDs use the ``C`` collation on PostgreSQL so ``ORDER BY`` and range scans
compare code points, as SQLite (``BINARY``) and Python ``str`` do.  Staged keys are BLOB /
bytea, compared bytewise by both databases.
"""

from __future__ import annotations

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
)

SCHEMA_VERSION = 1

#: names and IDs: plain strings, code-point order on both databases
NAME = String().with_variant(String(collation="C"), "postgresql")

metadata = MetaData()

schema_version = Table(
    "schema_version",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),  # always 1: a single row
    Column("version", Integer, nullable=False),
)

repositories = Table(
    "repositories",
    metadata,
    Column("id", NAME, primary_key=True),
    Column("storage_namespace", Text, nullable=False),
    Column("default_branch", NAME, nullable=False),
    Column("creation_date", BigInteger, nullable=False),
)

branches = Table(
    "branches",
    metadata,
    Column("repo", NAME, ForeignKey("repositories.id", ondelete="CASCADE"), nullable=False),
    Column("name", NAME, nullable=False),
    Column("commit_id", NAME, nullable=False),
    Column("staging_token", NAME, nullable=False),
    Column("sealed_tokens", Text, nullable=False),  # canonical JSON list, newest first
    PrimaryKeyConstraint("repo", "name"),
)

tags = Table(
    "tags",
    metadata,
    Column("repo", NAME, ForeignKey("repositories.id", ondelete="CASCADE"), nullable=False),
    Column("name", NAME, nullable=False),
    Column("commit_id", NAME, nullable=False),
    PrimaryKeyConstraint("repo", "name"),
)

commits = Table(
    "commits",
    metadata,
    Column("repo", NAME, ForeignKey("repositories.id", ondelete="CASCADE"), nullable=False),
    Column("id", NAME, nullable=False),
    Column("metarange_id", NAME, nullable=False),
    Column("parents", Text, nullable=False),  # JSON list
    Column("message", Text, nullable=False),
    Column("committer", Text, nullable=False),
    Column("creation_date", BigInteger, nullable=False),
    Column("metadata", Text, nullable=False),  # JSON object
    Column("generation", BigInteger, nullable=False),
    PrimaryKeyConstraint("repo", "id"),  # also the (repo, id) index of prefix search
)

staging_entries = Table(
    "staging_entries",
    metadata,
    Column("token", NAME, nullable=False),
    Column("key", LargeBinary, nullable=False),
    Column("identity", LargeBinary, nullable=True),  # NULL for a tombstone
    Column("value", LargeBinary, nullable=True),  # NULL for a tombstone
    Column("is_tombstone", Boolean, nullable=False),
    PrimaryKeyConstraint("token", "key"),
    sqlite_with_rowid=False,  # clustered on (token, key): iteration reads rows in key order
)

#: tables holding user data, children first (the order a reset must empty them in)
DATA_TABLES = (staging_entries, commits, tags, branches, repositories)
