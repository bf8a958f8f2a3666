"""Cache counters: the ``CacheStats`` value both caches report, and reading the counters a disk
cache directory has persisted (``read_disk_cache_stats``, no running cache needed).

Owns the shape of the counters; who counts what is documented on ``DiskCache`` and
``RamCache``, and how they are stored on ``CacheIndex``.
"""

from __future__ import annotations

import os
from contextlib import suppress
from dataclasses import asdict, dataclass

from lakefuse.cache.index import read_index_stats
from lakefuse.cache.layout import INDEX_FILE

COUNTER_FIELDS = ("hits", "misses", "evictions", "corrupted")
"""Counters that only grow (persisted cumulatively by the disk cache)."""

GAUGE_FIELDS = ("bytes", "entries")
"""Current occupancy, not cumulative."""


@dataclass
class CacheStats:
    """Counters of a cache, all plain ints.

    ``hits``/``misses``: lookups answered from the cache / that had to load (``misses`` equals the
    number of fetch or loader calls); ``evictions``: entries dropped to stay under the byte bound;
    ``corrupted``: entries found damaged (checksum mismatch, truncated, missing) and dropped;
    ``bytes``/``entries``: what the cache holds now.
    """

    hits: int = 0
    misses: int = 0
    evictions: int = 0
    corrupted: int = 0
    bytes: int = 0
    entries: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


def read_disk_cache_stats(directory: str | os.PathLike) -> dict:
    """Cumulative counters of a cache directory, as last persisted by any process.

    Works without a running cache process (it reads the index read-only).  Keys: ``hits
    misses evictions corrupted bytes entries`` (ints), ``name`` and ``max_bytes`` of the last
    process that persisted counters, ``updated_at`` (unix time, float).  A directory that holds
    no cache (or no readable index) reads as zeros with ``None`` for the last three.
    """
    result = {**CacheStats().as_dict(), "name": None, "max_bytes": None, "updated_at": None}
    found = read_index_stats(os.path.join(os.fspath(directory), INDEX_FILE))
    if found is None:
        return result
    counters, (result["bytes"], result["entries"]), meta = found
    for key in COUNTER_FIELDS:
        result[key] = int(counters.get(key, 0))
    # an index whose processes never persisted counters (created, then closed unused) has
    # no meta rows at all: read each one as optional
    result["name"] = meta.get("name")
    with suppress(TypeError, ValueError):
        result["max_bytes"] = int(meta.get("max_bytes"))
    with suppress(TypeError, ValueError):
        result["updated_at"] = float(meta.get("updated_at"))
    return result
