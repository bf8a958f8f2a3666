"""The composition root: reads the configuration and wires concrete adapters into the core.

Nothing else in lakefuse constructs adapters.  ``App.from_config()`` gives:

- ``graveler``  the version-control core (refs/staging in SQL, committed files per namespace)
- ``catalog``   objects on top of it (uploads into storage namespaces, entries, listings)
- ``actions``   the hooks runner (the webhooks of ``_lakefs_actions/`` on every lakeFS event the core fires)
- ``block_for_repository(repo)`` / ``committed_for(namespace)`` for the bulk jobs and CLI

Caches: one RAM cache (``cache.ram_bytes``) of decoded ranges/metaranges shared by every
namespace, and one disk cache of Graveler files under ``<cache.dir>/graveler`` bounded by
``cache.disk_bytes`` (the mount's object data cache lives beside it, see ``lakefuse.fs``).
"""

from __future__ import annotations

from pathlib import Path

from lakefuse.config import Config, load_config


class App:
    def __init__(self, config: Config):
        from lakefuse.actions import ActionsRunner
        from lakefuse.cache import DiskCache, RamCache
        from lakefuse.catalog import Catalog
        from lakefuse.db import SqlRefStore, SqlStagingStore, open_database
        from lakefuse.graveler.graveler import Graveler

        self.config = config
        config.home.mkdir(parents=True, exist_ok=True)
        self.database = open_database(config.database_url)
        self.ram_cache = RamCache(config.cache.ram_bytes, name="graveler-ram",
                                  scan_bytes=config.cache.scan_limit)
        self.file_cache = DiskCache(Path(config.cache.dir) / "graveler", config.cache.disk_bytes, name="graveler")
        self._committed_stores: list = []  # created here, closed by close()
        self.actions = ActionsRunner(self.block_for_repository)
        self.graveler = Graveler(
            SqlRefStore(self.database),
            SqlStagingStore(self.database),
            self.committed_for,
            hooks=self.actions,
        )
        self.catalog = Catalog(self.graveler, self.block_for_namespace)

    @classmethod
    def from_config(cls, config: Config | None = None) -> "App":
        return cls(config or load_config())

    # adapters, one per storage namespace: the Catalog (block adapters) and the Graveler
    # (committed stores) call these once per namespace and keep what they get -----------------

    def block_for_namespace(self, namespace: str):
        from lakefuse.block.namespace import open_namespace

        return open_namespace(namespace, self.config.s3)

    def committed_for(self, namespace: str):
        from lakefuse.graveler.committed import CommittedManager

        store = CommittedManager(self.catalog.block(namespace), self.file_cache, self.ram_cache, self.config.committed)
        self._committed_stores.append(store)
        return store

    def block_for_repository(self, repo_id: str):
        return self.catalog.repository_block(repo_id)

    def default_namespace(self, repo_id: str) -> str:
        """Where a repository created without a storage namespace keeps its data."""
        return "local://" + str((self.config.storage_root / repo_id).resolve())

    def close(self) -> None:
        for store in self._committed_stores:
            store.close()
        close = getattr(self.file_cache, "close", None)
        if close:
            close()
        self.database.close()
