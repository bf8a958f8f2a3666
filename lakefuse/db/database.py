"""Opening the SQL database (SQLite or PostgreSQL) and running transactions on it.

``open_database(url)`` builds the engine, creates missing tables and checks the schema version.
``Database.write()`` / ``Database.read()`` are the only way the stores talk to the engine:

- SQLite: WAL journal (readers never wait for the writer), ``busy_timeout`` 30 s, foreign keys
  on, ``synchronous=NORMAL`` (durable across process crashes; a power loss may drop the last
  transactions, never corrupt the file).  Write transactions start with ``BEGIN IMMEDIATE``,
  so concurrent writers queue on the lock instead of failing with "database is locked" when a
  read transaction tries to upgrade.  Reads use a plain deferred ``BEGIN``.
- PostgreSQL (``postgresql+psycopg://``): writes are READ COMMITTED transactions; row locks /
  conditional UPDATEs in the stores make each operation atomic.  Reads run in autocommit (each
  statement is its own snapshot): one round trip instead of BEGIN / SELECT / ROLLBACK.  No
  pre-ping on checkout (it would cost a round trip per operation); after a server restart the
  first operation fails and the pool reconnects.

``Database.rows(statement, params)`` runs one prebuilt read statement and returns its rows as
tuples.  On an SQLite file it skips SQLAlchemy's execution layer: each thread reads through a
``sqlite3`` connection of its own (autocommit, ``query_only``), with the statement compiled once.
A point read of a staged entry or of a branch row, which every lookup on a branch makes, costs
about a fifth of what it costs through ``read()`` (whose BEGIN, events and result objects were
most of it); a single SELECT in autocommit reads one snapshot, as in a transaction of its own.
PostgreSQL, and an in-memory SQLite (one shared connection), use ``read()``.

``Database.origin`` (a random ID per ``Database`` object) is stamped on every staging row
written through it, by ``SqlStagingStore`` and ``SqlRefStore`` alike: the change feed
(``SqlStagingStore.changes_since(exclude_origin=...)``) tells "written by this process through
this database" from "written by anyone else" with it.

Schema: ``open_database`` creates missing tables and migrates a database of an older
``schema.SCHEMA_VERSION`` in the same transaction (``_migrate``; on PostgreSQL under an
advisory lock, so concurrent openers do it once).  A newer database is refused.
"""

from __future__ import annotations

import sqlite3
import threading
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from sqlalchemy import create_engine, event, select, text, update
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError, OperationalError
from sqlalchemy.pool import StaticPool
from sqlalchemy.schema import CreateColumn

from lakefuse.db import schema
from lakefuse.errors import ConcurrentUpdate, ConfigError
from lakefuse.graveler.quick import NotQuick, must_wait, quick

SQLITE_BUSY_TIMEOUT_S = 30.0
_BEGIN_OPTION = "lakefuse_begin"
_PG_SCHEMA_LOCK_KEY = 0x6C616B65  # advisory lock serializing table creation ("lake")


class Database:
    """An open lakefuse database: an engine plus the transaction helpers of the stores."""

    def __init__(self, engine: Engine, sqlite_file: str | None = None):
        self.engine = engine
        self.dialect = engine.dialect.name  # "sqlite" or "postgresql"
        # Same pool; PostgreSQL reads skip the BEGIN/ROLLBACK round trips.
        self._read_engine = engine.execution_options(isolation_level="AUTOCOMMIT") if self.dialect == "postgresql" else engine
        #: stamped on the staging rows written through this object (see the module docstring)
        self.origin: str = uuid.uuid4().hex
        self._direct = _SqliteReads(sqlite_file, engine.dialect) if sqlite_file else None

    @property
    def url(self) -> str:
        return self.engine.url.render_as_string(hide_password=True)

    # transactions -------------------------------------------------------------------------
    @contextmanager
    def write(self) -> Iterator[Connection]:
        """A write transaction: committed on success, rolled back on an exception."""
        must_wait("a database transaction")
        try:
            with self.engine.connect() as conn:
                if self.dialect == "sqlite":
                    conn.execution_options(**{_BEGIN_OPTION: "BEGIN IMMEDIATE"})
                with conn.begin():
                    yield conn
        except OperationalError as exc:
            _raise_if_locked(exc)
            raise

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """For reads: a transaction on SQLite (rolled back at the end), autocommit on PostgreSQL."""
        must_wait("a database connection")
        try:
            with self._read_engine.connect() as conn:
                yield conn
        except OperationalError as exc:
            _raise_if_locked(exc)
            raise

    def rows(self, statement, params: dict) -> list[tuple]:
        """The rows of one read ``statement`` (built once by the caller: it is compiled once
        per database), as tuples (see the module docstring)."""
        if self._direct is not None:
            try:
                return self._direct.rows(statement, params)
            except sqlite3.OperationalError as exc:
                if quick():
                    raise NotQuick(f"the database is busy: {exc}") from None
                _raise_if_locked(exc)
                raise
        with self.read() as conn:
            return conn.execute(statement, params).all()

    def insert(self, table):
        """The dialect's INSERT construct (it has ``on_conflict_do_update`` / ``_do_nothing``)."""
        if self.dialect == "postgresql":
            return postgresql_insert(table)
        return sqlite_insert(table)

    # lifecycle ---------------------------------------------------------------------------
    def schema_version(self) -> int:
        with self.read() as conn:
            return int(conn.execute(select(schema.schema_version.c.version)).scalar_one())

    def close(self) -> None:
        if self._direct is not None:
            self._direct.close()
        self.engine.dispose()

    def __enter__(self) -> "Database":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Database({self.url!r})"


class _SqliteReads:
    """``Database.rows`` on an SQLite file: a ``sqlite3`` connection per thread, statements
    compiled once."""

    def __init__(self, path: str, dialect):
        self._path = path
        self._dialect = dialect
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: list[sqlite3.Connection] = []
        #: id(statement) -> (statement, its SQL, its parameters in order, their built-in values)
        self._compiled: dict[int, tuple[object, str, tuple[str, ...], dict]] = {}
        self._closed = False

    def rows(self, statement, params: dict) -> list[tuple]:
        compiled = self._compiled.get(id(statement))
        if compiled is None:
            built = statement.compile(dialect=self._dialect)
            fixed = {name: value for name, value in built.params.items() if value is not None}  # OFFSET 0
            compiled = (statement, built.string, tuple(built.positiontup), fixed)
            self._compiled[id(statement)] = compiled  # the statement is kept: its id stays its own
        _statement, sql, names, fixed = compiled
        values = [params[name] if name in params else fixed[name] for name in names]
        return self._connection().execute(sql, values).fetchall()

    def _connection(self) -> sqlite3.Connection:
        """This thread's connection; inside ``quick_only()`` another one, which never waits for
        a lock (the event loop must not: ``lakefuse.graveler.quick``)."""
        name = "quick" if quick() else "connection"
        connection = getattr(self._local, name, None)
        if connection is None:
            connection = sqlite3.connect(self._path, timeout=0 if name == "quick" else SQLITE_BUSY_TIMEOUT_S,
                                         isolation_level=None, check_same_thread=False)
            connection.execute("PRAGMA query_only = 1")
            with self._lock:
                if self._closed:
                    connection.close()
                    raise sqlite3.OperationalError("the database is closed")
                self._connections.append(connection)
            setattr(self._local, name, connection)
        return connection

    def close(self) -> None:
        with self._lock:
            self._closed, connections, self._connections = True, self._connections, []
        for connection in connections:
            connection.close()


def _raise_if_locked(exc: Exception) -> None:
    message = str(exc.orig) if getattr(exc, "orig", None) is not None else str(exc)
    if "database is locked" in message or "database is busy" in message:
        raise ConcurrentUpdate(
            f"database stayed locked by another writer for more than {SQLITE_BUSY_TIMEOUT_S:.0f} s; retry"
        ) from exc


def open_database(url: str, *, echo: bool = False) -> Database:
    """Open (and create if needed) the lakefuse database at ``url``.

    ``sqlite:///path/to/lakefuse.db`` (parent directory created), ``sqlite://`` (in memory,
    one shared connection: single-threaded tests only) or
    ``postgresql+psycopg://user@host:port/dbname``.  Raises ConfigError for other URLs.
    """
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise ConfigError(f"database url {url!r} is not a valid SQLAlchemy URL: {exc}") from None
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        engine = _sqlite_engine(parsed, echo)
    elif backend == "postgresql":
        if parsed.drivername != "postgresql+psycopg":
            parsed = parsed.set(drivername="postgresql+psycopg")
        engine = create_engine(
            parsed,
            echo=echo,
            pool_recycle=3600,
            connect_args={"connect_timeout": 10, "application_name": "lakefuse"},
        )
    else:
        raise ConfigError(f"database url {parsed.render_as_string()!r}: only sqlite and postgresql are supported")
    sqlite_file = None
    if backend == "sqlite" and parsed.database and parsed.database != ":memory:" \
            and not parsed.database.startswith("file:"):
        sqlite_file = parsed.database
    database = Database(engine, sqlite_file)
    try:
        _create_schema(database)
    except OperationalError as exc:
        engine.dispose()
        raise ConfigError(f"cannot open database {database.url}: {str(exc.orig or exc).strip()}") from None
    except BaseException:
        engine.dispose()
        raise
    return database


def _sqlite_engine(parsed, echo: bool) -> Engine:
    path = parsed.database
    in_memory = not path or path == ":memory:" or path.startswith("file::memory:")
    if in_memory:
        engine = create_engine(
            parsed,
            echo=echo,
            poolclass=StaticPool,
            connect_args={"check_same_thread": False},
        )
    else:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(parsed, echo=echo, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record) -> None:
        # Take transaction control away from the sqlite3 module: we emit BEGIN ourselves.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
            if not in_memory:
                cursor.execute("PRAGMA journal_mode = WAL")
                cursor.execute("PRAGMA synchronous = NORMAL")
            cursor.execute("PRAGMA foreign_keys = ON")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql(conn.get_execution_options().get(_BEGIN_OPTION, "BEGIN"))

    return engine


def _create_schema(database: Database) -> None:
    with database.write() as conn:
        if database.dialect == "postgresql":
            # Two processes opening a fresh database at once must not race on CREATE TABLE.
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_SCHEMA_LOCK_KEY})
        schema.metadata.create_all(conn, checkfirst=True)
        version = conn.execute(select(schema.schema_version.c.version)).scalar_one_or_none()
        if version is None:
            conn.execute(schema.schema_version.insert().values(id=1, version=schema.SCHEMA_VERSION))
        elif version > schema.SCHEMA_VERSION:
            raise ConfigError(
                f"database {database.url} has schema version {version}, newer than this lakefuse "
                f"supports ({schema.SCHEMA_VERSION}); upgrade lakefuse"
            )
        elif version < schema.SCHEMA_VERSION:
            _migrate(conn, version)


def _add_column(conn: Connection, column) -> None:
    """``ALTER TABLE ... ADD COLUMN`` of a column as ``schema`` defines it."""
    ddl = CreateColumn(column).compile(dialect=conn.dialect)
    conn.execute(text(f"ALTER TABLE {column.table.name} ADD COLUMN {ddl}"))


def _migrate(conn: Connection, version: int) -> None:
    """Upgrade the tables of schema ``version`` to ``schema.SCHEMA_VERSION``, in the caller's
    transaction (``create_all`` has already created the tables new since ``version``)."""
    if version < 2:
        # the staging change feed: rows written before it keep seq 0 and no origin
        _add_column(conn, schema.staging_entries.c.seq)
        _add_column(conn, schema.staging_entries.c.origin)
        schema.staging_entries_by_seq.create(conn, checkfirst=True)
    conn.execute(update(schema.schema_version).values(version=schema.SCHEMA_VERSION))
