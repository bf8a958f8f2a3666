"""In-process RAM cache bounded in bytes: decoded objects (SSTable ranges, metadata) by key.

Owns a ``cachetools.LRUCache`` sized by the byte size each caller declares, its lock, the
one-loader-per-key protocol of ``get_or_load`` and the in-process counters.
"""

from __future__ import annotations

import threading
from operator import itemgetter
from typing import Callable, Hashable

import cachetools

from lakefuse.cache.stats import CacheStats
from lakefuse.errors import InvalidArgument


class _CountingLRU(cachetools.LRUCache):
    """LRUCache of ``(value, size)`` pairs that counts what it evicts to make room."""

    def __init__(self, max_bytes: int):
        super().__init__(max_bytes, getsizeof=itemgetter(1))
        self.evictions = 0

    def popitem(self):
        item = super().popitem()
        self.evictions += 1
        return item


class _PendingLoad:
    __slots__ = ("done", "loaded", "value")

    def __init__(self):
        self.done = threading.Event()
        self.loaded = False
        self.value = None


def _check_size(size, what: str) -> int:
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise InvalidArgument(f"{what}: size must be a non-negative int, got {size!r}")
    return size


class RamCache:
    """Bounded in bytes (``cachetools.LRUCache`` with ``getsizeof``), thread-safe, with counters.

    Sizes are what callers declare (``put``'s ``size``, the loader's second result).  A value
    larger than the whole bound is returned but not kept.  Counters are in-process only:
    ``hits``/``misses`` count ``get_or_load`` and ``get`` lookups (``misses`` of
    ``get_or_load`` equals the number of loader calls; a thread that waited for another
    thread's load counts a hit), ``evictions`` the entries dropped to make room.
    """

    def __init__(self, max_bytes: int, name: str = "ram"):
        _check_size(max_bytes, f"ram cache {name!r}: max_bytes")
        self.max_bytes = max_bytes
        self.name = name
        self._lock = threading.Lock()
        self._data = _CountingLRU(max_bytes)
        self._loading: dict[Hashable, _PendingLoad] = {}
        self._hits = 0
        self._misses = 0

    def get_or_load(self, key, loader: Callable[[], tuple[object, int]]):
        """Cached value of ``key``, or ``loader() -> (value, size_in_bytes)`` stored and returned.

        Concurrent calls for the same missing key run the loader once; the others wait for it.
        If the loader raises, the exception propagates to its caller and one waiting thread
        (if any) tries its own loader next.
        """
        with self._lock:
            try:
                entry = self._data[key]
            except KeyError:
                pass
            except TypeError:
                raise InvalidArgument(f"ram cache {self.name!r}: unhashable key {key!r}") from None
            else:
                self._hits += 1
                return entry[0]
        return self._load(key, loader)

    def get(self, key, default=None):
        """Cached value of ``key`` (counted as a hit), else ``default`` (counted as a miss)."""
        with self._lock:
            try:
                entry = self._data[key]
            except KeyError:
                self._misses += 1
                return default
            except TypeError:
                raise InvalidArgument(f"ram cache {self.name!r}: unhashable key {key!r}") from None
            self._hits += 1
            return entry[0]

    def put(self, key, value, size: int) -> None:
        """Store ``value`` under ``key`` with its size in bytes (replacing any previous one)."""
        _check_size(size, f"ram cache {self.name!r}: put({key!r})")
        with self._lock:
            self._store(key, value, size)

    def contains(self, key) -> bool:
        """True if ``key`` is cached (does not count, does not refresh recency)."""
        with self._lock:
            try:
                return key in self._data
            except TypeError:
                return False

    def invalidate(self, key) -> None:
        """Drop ``key`` (no error if absent)."""
        with self._lock:
            try:
                self._data.pop(key, None)
            except TypeError:
                pass

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(
                hits=self._hits,
                misses=self._misses,
                evictions=self._data.evictions,
                corrupted=0,
                bytes=self._data.currsize,
                entries=len(self._data),
            )

    def __repr__(self) -> str:
        return f"RamCache(max_bytes={self.max_bytes}, name={self.name!r})"

    # -- internals ---------------------------------------------------------------------------

    def _store(self, key, value, size: int) -> None:
        """Insert under ``self._lock``; a value larger than the bound is not kept."""
        try:
            if size > self.max_bytes:
                self._data.pop(key, None)
                return
            self._data[key] = (value, size)
        except TypeError:
            raise InvalidArgument(f"ram cache {self.name!r}: unhashable key {key!r}") from None

    def _load(self, key, loader):
        while True:
            with self._lock:
                try:
                    entry = self._data[key]
                except KeyError:
                    pass
                else:
                    self._hits += 1
                    return entry[0]
                pending = self._loading.get(key)
                leader = pending is None
                if leader:
                    pending = self._loading[key] = _PendingLoad()
                    self._misses += 1
            if not leader:
                pending.done.wait()
                if pending.loaded:
                    with self._lock:
                        self._hits += 1
                    return pending.value
                continue  # the leader's loader failed: try again (perhaps as the leader)
            try:
                result = loader()
                if not (isinstance(result, tuple) and len(result) == 2):
                    raise InvalidArgument(
                        f"ram cache {self.name!r}: loader must return (value, size_in_bytes), got {type(result).__name__}"
                    )
                value, size = result
                _check_size(size, f"ram cache {self.name!r}: loader for {key!r}")
                pending.value = value
                pending.loaded = True
                with self._lock:
                    self._store(key, value, size)
            finally:
                with self._lock:
                    del self._loading[key]
                pending.done.set()
            return value
