"""The SQL schema of lakefuse: refs (repositories, branches, tags, commits), staged entries
and the change feed of staging tokens.

SQLAlchemy Core tables only (no ORM).  ``SCHEMA_VERSION`` is the version this code writes; the
``schema_version`` table records the version of a database's tables.  ``open_database``
migrates an older database in place (``lakefuse.db.database._migrate``) and refuses a newer
one.  Versions:

1. refs and ``staging_entries``.
2. the staging change feed: ``staging_versions`` (one row per written staging token: its
   version, bumped by one per write transaction, and ``reset_version``, the version of its last
   ``drop_prefix``), and ``staging_entries.seq`` / ``.origin`` (the version of the transaction
   that last wrote the row, and the ``Database.origin`` of the process that wrote it; 0 / NULL
   for rows written before version 2) with an index on ``(token, seq)``.  See
   ``lakefuse.db.staging`` for how they are written and read.

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
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    text,
)

SCHEMA_VERSION = 2

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
    # v2: the token version that last wrote the row, and the Database.origin that wrote it
    Column("seq", BigInteger, nullable=False, server_default=text("0")),
    Column("origin", NAME, nullable=True),
    PrimaryKeyConstraint("token", "key"),
    sqlite_with_rowid=False,  # clustered on (token, key): iteration reads rows in key order
)

#: v2: the rows a token's change feed reads (``seq > since``)
staging_entries_by_seq = Index("staging_entries_token_seq", staging_entries.c.token, staging_entries.c.seq)

#: v2: one row per staging token written since it was created (deleted with its entries)
staging_versions = Table(
    "staging_versions",
    metadata,
    Column("token", NAME, primary_key=True),
    Column("version", BigInteger, nullable=False),  # +1 per write transaction (0: no row)
    Column("reset_version", BigInteger, nullable=False),  # the version of the last drop_prefix
)

#: tables holding user data, children first (the order a reset must empty them in)
DATA_TABLES = (staging_versions, staging_entries, commits, tags, branches, repositories)
