"""SQL adapters of the Graveler ports: refs and staged entries on SQLite or PostgreSQL.

``open_database(url)`` opens (and creates) the database; ``SqlRefStore(database)`` and
``SqlStagingStore(database)`` are the ``RefStore`` / ``StagingStore`` implementations on it.
Modules: ``schema`` (tables), ``database`` (engine, transactions), ``refs``, ``staging``.
"""

from lakefuse.db.database import Database, open_database
from lakefuse.db.refs import SqlRefStore
from lakefuse.db.staging import SqlStagingStore

__all__ = ["Database", "SqlRefStore", "SqlStagingStore", "open_database"]
