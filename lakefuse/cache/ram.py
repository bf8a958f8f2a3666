"""In-process RAM cache bounded in bytes: decoded objects (SSTable ranges, metadata) by key.

Owns two ``cachetools.LRUCache`` segments sized by the byte size each caller declares, under
one budget: what point reads load, and what scans load (a walk, which goes first when the budget
is full, so one walk cannot push out the working set; see ``RamCache``), its lock, the
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

    Two LRU segments under one budget of ``max_bytes``, scan-resistant like 2Q: *main*, for
    what point reads (``scan=False``, the default) load or put, and *probation*, for what
    scans (``scan=True``) load or put, itself at most ``scan_bytes`` (default: ``max_bytes``).
    When the two together would hold more than ``max_bytes``, probation's least recently used
    entries go first, and main's only once probation is empty: a walk may fill the room point
    reads leave, never push them out.  A scan finding a key in either segment is a hit and
    moves nothing between segments; a point read finding a key in probation promotes it to
    main.  A smaller ``scan_bytes`` caps what walks keep (less memory after a big walk; a walk
    that reads more than that twice, such as a first ``find`` of a big tree, which lists each
    directory after listing their parent, reads its ranges twice).

    Sizes are what callers declare (``put``'s ``size``, the loader's second result).  A value
    larger than its segment's bound is returned but not kept.  Counters are in-process only
    and cover both segments: ``hits``/``misses`` count ``get_or_load`` and ``get`` lookups
    (``misses`` of ``get_or_load`` equals the number of loader calls; a thread that waited for
    another thread's load counts a hit), ``evictions`` the entries dropped to make room (a
    promotion is not one), ``bytes``/``entries`` what both segments hold.
    """

    def __init__(self, max_bytes: int, name: str = "ram", scan_bytes: int | None = None):
        _check_size(max_bytes, f"ram cache {name!r}: max_bytes")
        if scan_bytes is None:
            scan_bytes = max_bytes
        _check_size(scan_bytes, f"ram cache {name!r}: scan_bytes")
        if scan_bytes > max_bytes:
            raise InvalidArgument(f"ram cache {name!r}: scan_bytes {scan_bytes} exceeds max_bytes {max_bytes}")
        self.max_bytes = max_bytes
        self.scan_bytes = scan_bytes
        self.name = name
        self._lock = threading.Lock()
        self._main = _CountingLRU(max_bytes)
        self._probation = _CountingLRU(scan_bytes)
        self._loading: dict[Hashable, _PendingLoad] = {}
        self._hits = 0
        self._misses = 0

    def get_or_load(self, key, loader: Callable[[], tuple[object, int]], scan: bool = False):
        """Cached value of ``key``, or ``loader() -> (value, size_in_bytes)`` stored and returned.

        ``scan``: the caller is a scan (see the class docstring for where entries go).
        Concurrent calls for the same missing key run the loader once; the others wait for it.
        If the loader raises, the exception propagates to its caller and one waiting thread
        (if any) tries its own loader next.
        """
        with self._lock:
            try:
                entry = self._lookup(key, scan)
            except KeyError:
                pass
            except TypeError:
                raise InvalidArgument(f"ram cache {self.name!r}: unhashable key {key!r}") from None
            else:
                self._hits += 1
                return entry[0]
        return self._load(key, loader, scan)

    def get(self, key, default=None, scan: bool = False):
        """Cached value of ``key`` (counted as a hit), else ``default`` (counted as a miss)."""
        with self._lock:
            try:
                entry = self._lookup(key, scan)
            except KeyError:
                self._misses += 1
                return default
            except TypeError:
                raise InvalidArgument(f"ram cache {self.name!r}: unhashable key {key!r}") from None
            self._hits += 1
            return entry[0]

    def put(self, key, value, size: int, scan: bool = False) -> None:
        """Store ``value`` under ``key`` with its size in bytes (replacing any previous one).

        ``scan``: store in probation, unless ``key`` is in main (a scan never demotes)."""
        _check_size(size, f"ram cache {self.name!r}: put({key!r})")
        with self._lock:
            self._store(key, value, size, scan)

    def contains(self, key) -> bool:
        """True if ``key`` is cached in either segment (does not count, does not refresh recency)."""
        with self._lock:
            try:
                return key in self._main or key in self._probation
            except TypeError:
                return False

    def invalidate(self, key) -> None:
        """Drop ``key`` from both segments (no error if absent)."""
        with self._lock:
            try:
                self._main.pop(key, None)
                self._probation.pop(key, None)
            except TypeError:
                pass

    def clear(self) -> None:
        with self._lock:
            self._main.clear()
            self._probation.clear()

    def stats(self) -> CacheStats:
        with self._lock:
            main, probation = self._main, self._probation
            return CacheStats(
                hits=self._hits,
                misses=self._misses,
                evictions=main.evictions + probation.evictions,
                corrupted=0,
                bytes=main.currsize + probation.currsize,
                entries=len(main) + len(probation),
            )

    def __repr__(self) -> str:
        return f"RamCache(max_bytes={self.max_bytes}, name={self.name!r}, scan_bytes={self.scan_bytes})"

    # -- internals (all under self._lock) --------------------------------------------------

    def _lookup(self, key, scan: bool):
        """``(value, size)`` of ``key`` (KeyError if absent), refreshing its recency in its
        segment; a point read promotes a probation entry to main."""
        try:
            return self._main[key]
        except KeyError:
            pass
        entry = self._probation[key]
        if not scan:
            del self._probation[key]
            self._main[key] = entry  # no bigger than max_bytes: it was kept
        return entry

    def _store(self, key, value, size: int, scan: bool) -> None:
        """Insert into probation for a scan (unless ``key`` is in main), else into main, and
        drop ``key`` from the other segment; a value larger than its segment is not kept."""
        try:
            if scan and key not in self._main:
                target, other = self._probation, self._main
            else:
                target, other = self._main, self._probation
            other.pop(key, None)
            if size > target.maxsize:
                target.pop(key, None)
                return
            target[key] = (value, size)
        except TypeError:
            raise InvalidArgument(f"ram cache {self.name!r}: unhashable key {key!r}") from None
        main, probation = self._main, self._probation
        while main.currsize + probation.currsize > self.max_bytes:  # the shared budget
            (probation if probation.currsize else main).popitem()

    def _load(self, key, loader, scan: bool):
        while True:
            with self._lock:
                try:
                    entry = self._lookup(key, scan)
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
                        if not scan:  # a point read waiting for a scan's load promotes it
                            try:
                                self._lookup(key, scan)
                            except KeyError:
                                pass
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
                    self._store(key, value, size, scan)
            finally:
                with self._lock:
                    del self._loading[key]
                pending.done.set()
            return value
