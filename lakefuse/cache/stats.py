"""Cache counters: the ``CacheStats`` value both caches report.

Owns only the shape of the counters; who counts what is documented on ``DiskCache`` and
``RamCache``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

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
