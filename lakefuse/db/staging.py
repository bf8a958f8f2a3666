"""``SqlStagingStore``: the StagingStore port (staged entries per staging token) on SQL.

One row per (token, key): ``identity``/``value`` of the ValueRecord, or NULLs and
``is_tombstone`` for a staged deletion.  Writes are upserts (``INSERT ... ON CONFLICT DO
UPDATE`` on both dialects).  Keys are BLOB / bytea, so both databases order them bytewise.
``iterate`` reads in pages with keyset pagination (``key > last ORDER BY key LIMIT n``), each
page its own short read transaction: memory stays bounded and no snapshot is held open.
"""

from __future__ import annotations

from itertools import chain, islice
from typing import Iterable, Iterator

from sqlalchemy import delete, func, select

from lakefuse.db import schema
from lakefuse.db.database import Database
from lakefuse.errors import InvalidArgument
from lakefuse.graveler.model import StagingToken, ValueRecord

_staging = schema.staging_entries
_WRITE_CHUNK = 1000  # rows per executemany inside one set_many transaction


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
    """``INSERT ... ON CONFLICT (token, key) DO UPDATE`` of staging rows (see ``staging_row``)."""
    upsert = database.insert(_staging)
    return upsert.on_conflict_do_update(
        index_elements=[_staging.c.token, _staging.c.key],
        set_={
            "identity": upsert.excluded.identity,
            "value": upsert.excluded.value,
            "is_tombstone": upsert.excluded.is_tombstone,
        },
    )


def write_rows(conn, statement, rows: Iterable[dict]) -> None:
    """Execute ``statement`` for ``rows`` in chunks of ``_WRITE_CHUNK`` (one transaction: the
    caller's)."""
    rows = iter(rows)
    chunk = list(islice(rows, _WRITE_CHUNK))
    while chunk:
        conn.execute(statement, chunk)
        chunk = list(islice(rows, _WRITE_CHUNK))


def _value_of(key: bytes, identity, value, is_tombstone) -> ValueRecord | None:
    if is_tombstone:
        return None
    return ValueRecord(key=key, identity=bytes(identity), value=bytes(value))


class SqlStagingStore:
    """StagingStore on a lakefuse ``Database`` (see ``lakefuse.graveler.ports.StagingStore``)."""

    def __init__(self, database: Database, page_size: int = 1000):
        if page_size < 1:
            raise InvalidArgument(f"staging page size must be >= 1, got {page_size}")
        self._db = database
        self.page_size = page_size
        self._upsert = upsert_statement(database)

    def set(self, token: StagingToken, key: bytes, value: ValueRecord | None) -> None:
        row = staging_row(token, key, value)
        with self._db.write() as conn:
            conn.execute(self._upsert, row)

    def set_many(self, token: StagingToken, items: Iterable[tuple[bytes, ValueRecord | None]]) -> None:
        """All items in one transaction (all or nothing); a key given twice keeps the last value."""
        rows = (staging_row(token, key, value) for key, value in items)
        first = list(islice(rows, _WRITE_CHUNK))
        if not first:
            return
        with self._db.write() as conn:
            write_rows(conn, self._upsert, chain(first, rows))

    def get(self, token: StagingToken, key: bytes):
        key = key_bytes(key)
        with self._db.read() as conn:
            row = conn.execute(
                select(_staging.c.identity, _staging.c.value, _staging.c.is_tombstone).where(
                    _staging.c.token == token, _staging.c.key == key
                )
            ).one_or_none()
        if row is None:
            return ...
        return _value_of(key, row.identity, row.value, row.is_tombstone)

    def iterate(self, token: StagingToken, from_key: bytes = b"") -> Iterator[tuple[bytes, ValueRecord | None]]:
        columns = (_staging.c.key, _staging.c.identity, _staging.c.value, _staging.c.is_tombstone)
        base = select(*columns).where(_staging.c.token == token)
        condition = _staging.c.key >= key_bytes(from_key)
        while True:
            with self._db.read() as conn:
                rows = conn.execute(base.where(condition).order_by(_staging.c.key).limit(self.page_size)).all()
            for key, identity, value, is_tombstone in rows:
                key = bytes(key)
                yield key, _value_of(key, identity, value, is_tombstone)
            if len(rows) < self.page_size:
                return
            condition = _staging.c.key > bytes(rows[-1].key)

    def drop(self, token: StagingToken) -> None:
        with self._db.write() as conn:
            conn.execute(delete(_staging).where(_staging.c.token == token))

    def drop_prefix(self, token: StagingToken, prefix: bytes) -> None:
        prefix = key_bytes(prefix)
        statement = delete(_staging).where(_staging.c.token == token, _staging.c.key >= prefix)
        upper = prefix_successor(prefix)
        if upper is not None:
            statement = statement.where(_staging.c.key < upper)
        with self._db.write() as conn:
            conn.execute(statement)

    def count(self, token: StagingToken) -> int:
        with self._db.read() as conn:
            return int(conn.execute(select(func.count()).select_from(_staging).where(_staging.c.token == token)).scalar_one())
