"""``SqlStagingStore``: the StagingStore port (staged entries per staging token) on SQL, with
the token's change feed.

One row per (token, key): ``identity``/``value`` of the ValueRecord, or NULLs and
``is_tombstone`` for a staged deletion.  Writes are upserts (``INSERT ... ON CONFLICT DO
UPDATE`` on both dialects).  Keys are BLOB / bytea, so both databases order them bytewise.
``iterate`` reads in pages with keyset pagination (``key > last ORDER BY key LIMIT n``), each
page its own short read transaction: memory stays bounded and no snapshot is held open.  The
first page is small (``FIRST_PAGE_ROWS``) and each next one twice the last, up to
``page_size``: a listing that wants a few names of a big directory (a page of 64 while a
directory is learnt, a lookup's look ahead) reads about that many rows, not a thousand.

Change feed (``changes_since``): every write transaction into a token - ``set``, ``set_many``,
``SqlRefStore.stage_on_branch`` (all through ``StagingWriter``) - first bumps the token's row in
``staging_versions`` by one (``INSERT ... ON CONFLICT DO UPDATE SET version = version + 1
RETURNING version``), then writes its rows with ``seq`` = that version and ``origin`` =
``Database.origin`` (on PostgreSQL a one-row write does both in one statement).  The bump locks the version row (PostgreSQL row lock; SQLite: the
``BEGIN IMMEDIATE`` write lock) until commit, so two writers never get the same version, and
the transaction of version V commits after every transaction of a smaller version: a reader
that sees version V sees all rows with ``seq <= V``.  ``drop_prefix`` bumps the version and
sets ``reset_version`` to it (deleted rows leave no trace to report); ``drop`` deletes the
version row with the rows (a dropped token reads as version 0, never written).  Lock order,
against deadlocks on PostgreSQL: branch row (``lakefuse.db.refs``), then version row, then
entries.  A token written again after ``drop`` starts over at version 1, so a feed cursor of it
may miss changes: tokens are never reused (the Graveler makes a new one each time).
"""

from __future__ import annotations

from itertools import chain, islice
from typing import Iterable, Iterator

from sqlalchemy import and_, bindparam, delete, func, or_, select, text
from sqlalchemy.engine import Connection

from lakefuse.db import schema
from lakefuse.db.database import Database
from lakefuse.errors import InvalidArgument
from lakefuse.graveler.model import StagingChanges, StagingToken, ValueRecord, check_feed_arguments

_staging = schema.staging_entries
_versions = schema.staging_versions

# The point read and the pages of ``iterate``, built once: every read of a branch makes them,
# and a statement built per call costs SQLAlchemy its construction and cache key, about half
# of a point read on SQLite.
_ROW_COLUMNS = (_staging.c.key, _staging.c.identity, _staging.c.value, _staging.c.is_tombstone)
_GET = select(*_ROW_COLUMNS[1:]).where(_staging.c.token == bindparam("token"), _staging.c.key == bindparam("key"))


def _page_statement(first: bool, bounded: bool):
    """A page of a token's rows from key ``start`` (inclusive on the ``first`` page, else
    after it), below ``until`` if ``bounded``, at most ``limit`` rows."""
    start = bindparam("start", type_=_staging.c.key.type)
    statement = select(*_ROW_COLUMNS).where(_staging.c.token == bindparam("token"),
                                            _staging.c.key >= start if first else _staging.c.key > start)
    if bounded:
        statement = statement.where(_staging.c.key < bindparam("until", type_=_staging.c.key.type))
    return statement.order_by(_staging.c.key).limit(bindparam("limit"))


_PAGES = {(first, bounded): _page_statement(first, bounded) for first in (True, False) for bounded in (True, False)}
_WRITE_CHUNK = 1000  # rows per executemany inside one set_many transaction
#: rows of the first page ``iterate`` reads; the pages after it double up to ``page_size``
FIRST_PAGE_ROWS = 128


def key_bytes(key) -> bytes:
    """``key`` as bytes; raises InvalidArgument for anything that is not bytes-like."""
    if isinstance(key, bytes):
        return key
    if isinstance(key, (bytearray, memoryview)):
        return bytes(key)
    raise InvalidArgument(f"staging key must be bytes, got {type(key).__name__}")


def prefix_successor(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with ``prefix`` (None: no bound)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


def staging_row(token: str, key, value: ValueRecord | None) -> dict:
    if value is None:
        return {"token": token, "key": key_bytes(key), "identity": None, "value": None, "is_tombstone": True}
    if not isinstance(value, ValueRecord):
        raise InvalidArgument(f"staged value must be a ValueRecord or None, got {type(value).__name__}")
    return {
        "token": token,
        "key": key_bytes(key),
        "identity": bytes(value.identity),
        "value": bytes(value.value),
        "is_tombstone": False,
    }


def upsert_statement(database: Database):
    """``INSERT ... ON CONFLICT (token, key) DO UPDATE`` of staging rows (``staging_row`` plus
    ``seq`` and ``origin``, see ``StagingWriter``)."""
    upsert = database.insert(_staging)
    return upsert.on_conflict_do_update(
        index_elements=[_staging.c.token, _staging.c.key],
        set_={
            "identity": upsert.excluded.identity,
            "value": upsert.excluded.value,
            "is_tombstone": upsert.excluded.is_tombstone,
            "seq": upsert.excluded.seq,
            "origin": upsert.excluded.origin,
        },
    )


def bump_statement(database: Database, reset: bool = False):
    """Add one to a token's version (``token`` parameter; a first write makes it 1) and return
    the new version.  ``reset``: also set ``reset_version`` to it (``drop_prefix``)."""
    bump = database.insert(_versions).values(version=1, reset_version=1 if reset else 0)
    new_version = _versions.c.version + 1
    changes = {"version": new_version, "reset_version": new_version} if reset else {"version": new_version}
    return bump.on_conflict_do_update(index_elements=[_versions.c.token], set_=changes).returning(_versions.c.version)


#: PostgreSQL, one row: the bump and the upsert in one statement (one round trip, not two).
#: The row's VALUES read the bumped version, so the version row is locked first, as in
#: ``StagingWriter.write``'s general path.
_PG_BUMP_AND_UPSERT_ONE = text(
    """
    WITH bumped AS (
        INSERT INTO staging_versions (token, version, reset_version) VALUES (:token, 1, 0)
        ON CONFLICT (token) DO UPDATE SET version = staging_versions.version + 1
        RETURNING version
    )
    INSERT INTO staging_entries (token, key, identity, value, is_tombstone, seq, origin)
    VALUES (:token, :key, :identity, :value, :is_tombstone, (SELECT version FROM bumped), :origin)
    ON CONFLICT (token, key) DO UPDATE SET
        identity = excluded.identity, value = excluded.value, is_tombstone = excluded.is_tombstone,
        seq = excluded.seq, origin = excluded.origin
    RETURNING seq
    """
)


#: SQLite: the most rows one upsert statement takes (7 parameters each: within the 999
#: parameters of SQLite builds before 3.32); a chunk is split into statements of powers of two
#: rows, so at most 8 statement shapes exist (the driver's statement cache keeps them)
_SQLITE_ROWS_PER_STATEMENT = 128


def _sqlite_upsert(rows: int) -> str:
    """SQLite: ``upsert_statement()`` of ``rows`` rows as driver SQL, run on the DBAPI cursor
    (see ``StagingWriter``)."""
    return (
        "INSERT INTO staging_entries (token, key, identity, value, is_tombstone, seq, origin) VALUES "
        + ", ".join(["(?, ?, ?, ?, ?, ?, ?)"] * rows)
        + " ON CONFLICT (token, key) DO UPDATE SET identity = excluded.identity, value = excluded.value, "
        "is_tombstone = excluded.is_tombstone, seq = excluded.seq, origin = excluded.origin"
    )


_SQLITE_UPSERTS = {rows: _sqlite_upsert(rows) for rows in (1 << bit for bit in range(8))}


def _powers_of_two(count: int) -> Iterator[int]:
    """``count`` as the sizes of statements of at most ``_SQLITE_ROWS_PER_STATEMENT`` rows,
    each a power of two, biggest first."""
    while count >= _SQLITE_ROWS_PER_STATEMENT:
        count -= _SQLITE_ROWS_PER_STATEMENT
        yield _SQLITE_ROWS_PER_STATEMENT
    while count:
        rows = 1 << (count.bit_length() - 1)
        count -= rows
        yield rows

#: SQLite: ``bump_statement()`` as driver SQL, run on the DBAPI cursor (see ``StagingWriter``)
_SQLITE_BUMP = (
    "INSERT INTO staging_versions (token, version, reset_version) VALUES (?, 1, 0) "
    "ON CONFLICT (token) DO UPDATE SET version = staging_versions.version + 1 RETURNING version"
)


class StagingWriter:
    """The staging writes of one write transaction on ``database``: used by
    ``SqlStagingStore.set``/``set_many`` and ``SqlRefStore.stage_on_branch`` alike, so every
    staged row carries the change-feed stamps (statements built once per store).

    Speed: on PostgreSQL a one-row write is one statement (``_PG_BUMP_AND_UPSERT_ONE``).  On
    SQLite the bump and the upserts run on the DBAPI cursor of the transaction's connection:
    through SQLAlchemy the bump costs some 60 us of Python, more than the SQLite work of a
    whole one-row write, and each upserted row some 25 us (``scripts/bench/staging_writes.py``),
    all of it holding the interpreter lock that the mount's event loop waits for.  Same
    connection, same transaction: a rollback undoes them too."""

    def __init__(self, database: Database):
        self._db = database
        self._upsert = upsert_statement(database)
        self._bump = bump_statement(database)
        self._bump_reset = bump_statement(database, reset=True)
        self._upsert_one = _PG_BUMP_AND_UPSERT_ONE if database.dialect == "postgresql" else None
        self._sqlite = database.dialect == "sqlite"

    def write(self, conn: Connection, token: str, rows: Iterable[dict]) -> int | None:
        """In the caller's transaction: bump the token's version, then upsert ``rows``
        (``staging_row`` dicts of ``token``) in chunks of ``_WRITE_CHUNK`` with ``seq`` = the
        new version and ``origin`` = ``database.origin``.  Returns the new version; None (and
        no bump) if there are no rows."""
        origin = self._db.origin
        rows = iter(rows)
        chunk = list(islice(rows, _WRITE_CHUNK))
        if not chunk:
            return None
        if len(chunk) == 1 and self._upsert_one is not None:
            return conn.execute(self._upsert_one, {**chunk[0], "origin": origin}).scalar_one()
        version = self._next_version(conn, token)
        while chunk:
            self._upsert_rows(conn, chunk, version, origin)
            chunk = list(islice(rows, _WRITE_CHUNK))
        return version

    def _upsert_rows(self, conn: Connection, chunk: list[dict], version: int, origin: str) -> None:
        """Upsert ``chunk`` with ``seq`` = ``version`` and ``origin``, in the caller's transaction."""
        if not self._sqlite:
            for row in chunk:
                row["seq"] = version
                row["origin"] = origin
            conn.execute(self._upsert, chunk)
            return
        # several rows per statement, not ``executemany``: the driver lets go of the interpreter
        # lock for each row it steps and takes it back, so a mount's event loop and the stager
        # writing its batch switched threads row by row (``scripts/bench/create_path.py``: the
        # stager's CPU per created file 60 us -> 35, the loop's time per file 325 us -> 297)
        cursor = conn.connection.cursor()
        try:
            start = 0
            for rows in _powers_of_two(len(chunk)):
                parameters = []
                for row in chunk[start:start + rows]:
                    parameters += (row["token"], row["key"], row["identity"], row["value"], row["is_tombstone"],
                                   version, origin)
                cursor.execute(_SQLITE_UPSERTS[rows], parameters)
                start += rows
        finally:
            cursor.close()

    def _next_version(self, conn: Connection, token: str) -> int:
        if not self._sqlite:
            return conn.execute(self._bump, {"token": token}).scalar_one()
        cursor = conn.connection.cursor()
        try:
            cursor.execute(_SQLITE_BUMP, (token,))
            return cursor.fetchone()[0]
        finally:
            cursor.close()

    def reset(self, conn: Connection, token: str) -> int:
        """Bump the token's version as a reset (``drop_prefix``: call it before deleting rows,
        the lock order of ``write``).  Returns the new version."""
        return conn.execute(self._bump_reset, {"token": token}).scalar_one()


def delete_tokens(conn: Connection, tokens: Iterable[str]) -> None:
    """Delete tokens' version rows, then their entries (the lock order of
    ``StagingWriter.write``), in the caller's transaction."""
    tokens = sorted(set(tokens))
    if tokens:
        conn.execute(delete(_versions).where(_versions.c.token.in_(tokens)))
        conn.execute(delete(_staging).where(_staging.c.token.in_(tokens)))


def _value_of(key: bytes, identity, value, is_tombstone) -> ValueRecord | None:
    if is_tombstone:
        return None
    return ValueRecord(key=key, identity=bytes(identity), value=bytes(value))


class SqlStagingStore:
    """StagingStore on a lakefuse ``Database`` (see ``lakefuse.graveler.ports.StagingStore``).
    ``origin`` is the database's: every store on one ``Database`` object writes as the same
    origin (see ``lakefuse.db.database``)."""

    def __init__(self, database: Database, page_size: int = 1000):
        if page_size < 1:
            raise InvalidArgument(f"staging page size must be >= 1, got {page_size}")
        self._db = database
        self.page_size = page_size
        self._writer = StagingWriter(database)

    @property
    def origin(self) -> str:
        return self._db.origin

    def set(self, token: StagingToken, key: bytes, value: ValueRecord | None) -> None:
        row = staging_row(token, key, value)
        with self._db.write() as conn:
            self._writer.write(conn, token, (row,))

    def set_many(self, token: StagingToken, items: Iterable[tuple[bytes, ValueRecord | None]]) -> None:
        """All items in one transaction (all or nothing); a key given twice keeps the last value."""
        rows = (staging_row(token, key, value) for key, value in items)
        first = list(islice(rows, _WRITE_CHUNK))
        if not first:
            return
        with self._db.write() as conn:
            self._writer.write(conn, token, chain(first, rows))

    def get(self, token: StagingToken, key: bytes):
        key = key_bytes(key)
        rows = self._db.rows(_GET, {"token": token, "key": key})
        if not rows:
            return ...
        identity, value, is_tombstone = rows[0]
        return _value_of(key, identity, value, is_tombstone)

    def iterate(self, token: StagingToken, from_key: bytes = b"",
                until: bytes | None = None) -> Iterator[tuple[bytes, ValueRecord | None]]:
        limit = min(self.page_size, FIRST_PAGE_ROWS)
        params = {"token": token, "start": key_bytes(from_key), "limit": limit}
        if until is not None:
            params["until"] = key_bytes(until)
        statement = _PAGES[True, until is not None]
        while True:
            rows = self._db.rows(statement, params)
            for key, identity, value, is_tombstone in rows:
                key = bytes(key)
                yield key, _value_of(key, identity, value, is_tombstone)
            if len(rows) < limit:
                return
            limit = params["limit"] = min(self.page_size, limit * 2)
            params["start"] = bytes(rows[-1][0])
            statement = _PAGES[False, until is not None]

    def drop(self, token: StagingToken) -> None:
        with self._db.write() as conn:
            delete_tokens(conn, (token,))

    def drop_prefix(self, token: StagingToken, prefix: bytes) -> None:
        prefix = key_bytes(prefix)
        statement = delete(_staging).where(_staging.c.token == token, _staging.c.key >= prefix)
        upper = prefix_successor(prefix)
        if upper is not None:
            statement = statement.where(_staging.c.key < upper)
        with self._db.write() as conn:
            self._writer.reset(conn, token)
            conn.execute(statement)

    def count(self, token: StagingToken) -> int:
        with self._db.read() as conn:
            return int(conn.execute(select(func.count()).select_from(_staging).where(_staging.c.token == token)).scalar_one())

    def changes_since(
        self, token: StagingToken, version: int, limit: int = 10_000, exclude_origin: str | None = None
    ) -> StagingChanges:
        """See ``StagingStore.changes_since``.  One statement (one snapshot on both databases):
        the version row, left-joined to the rows written after ``version`` up to it."""
        since, limit = check_feed_arguments(version, limit)
        on = and_(_staging.c.token == _versions.c.token, _staging.c.seq > since, _staging.c.seq <= _versions.c.version)
        if exclude_origin is not None:
            on = and_(on, or_(_staging.c.origin.is_(None), _staging.c.origin != exclude_origin))
        query = (
            select(_versions.c.version, _versions.c.reset_version, _staging.c.key)
            .select_from(_versions.outerjoin(_staging, on))
            .where(_versions.c.token == token)
            .limit(limit + 1)
        )
        with self._db.read() as conn:
            rows = conn.execute(query).all()
        if not rows:  # no version row: never written, or dropped
            return StagingChanges.between(since, 0, 0, (), limit)
        keys = [bytes(row.key) for row in rows if row.key is not None]
        return StagingChanges.between(since, int(rows[0].version), int(rows[0].reset_version), keys, limit)
