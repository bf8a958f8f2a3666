"""Caches the core reads through: a multi-process disk cache of immutable named files and an
in-process RAM cache bounded in bytes.

Owns nothing itself; re-exports the public API of ``disk``, ``layout``, ``ram`` and ``stats``:

- ``DiskCache(directory, max_bytes, name="files")``: ``get(name, fetch) -> path``,
  ``open(name, fetch) -> file``, ``put_file``, ``contains``, ``invalidate``, ``stats``,
  ``clear``, ``flush_stats``, ``repair``, ``close``.
- ``read_disk_cache_stats(directory) -> dict``: persisted counters, no running process needed.
- ``RamCache(max_bytes, name="ram", scan_bytes=None)``: ``get_or_load(key, loader, scan=False)``,
  ``get``, ``put``, ``contains``, ``invalidate``, ``clear``, ``stats``; what scans load goes first
  when the cache is full, and keeps at most ``scan_bytes`` (default: all of ``max_bytes``).
- ``CacheStats``: hits, misses, evictions, corrupted, bytes, entries.
"""

from lakefuse.cache.disk import DiskCache
from lakefuse.cache.layout import check_cache_name
from lakefuse.cache.ram import RamCache
from lakefuse.cache.stats import CacheStats, read_disk_cache_stats

__all__ = ["CacheStats", "DiskCache", "RamCache", "check_cache_name", "read_disk_cache_stats"]
