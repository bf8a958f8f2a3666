"""Disk cache of immutable named files, shared by several processes through one directory.

Owns the cross-process lock, LRU eviction, checksum verification, repair after crashes or
tampering, and persisting the counters (in the index; read without a running process by
``stats.read_disk_cache_stats``).  Where files live is ``layout``'s.

One directory is one cache (``name`` is only a label): give each cache its own directory (e.g.
``<cache dir>/ranges``, ``<cache dir>/blocks``); instances opened on the same directory share its
entries, byte bound and counters.  The files in a cache directory are described in ``layout``.

Protocol.  Reads take no lock.  A miss fetches into ``tmp/`` outside the lock, hashes the file,
then under the lock: records it in the index (commit), stamps its mtime, renames it into place
and evicts least recently used files until the total is <= ``max_bytes`` (never the file just
added; if that file alone is larger than the bound it stays, and the cache is over the bound until
the next insert).  Recency is the files' mtime, shared by all processes: a hit re-stamps the file
when its mtime is older than ``touch_interval`` seconds, so LRU order has that resolution.  Every
step that can be interrupted leaves at worst an index row without a file (counted as
``corrupted`` and re-fetched when used, or silently dropped by the eviction scan) or a stale
temporary file (deleted after an hour); files not in the index are deleted by the scan.

Caller contract for ``get``: open the returned path immediately.  Another process may evict the
file at any moment after ``get`` returns; an already open descriptor keeps working (on Linux an
unlinked file lives until its last descriptor closes), but a later ``open`` may raise
``FileNotFoundError``.  ``DiskCache.open`` does get + open and retries that case for you.

Verification: the first time a process uses a file it is hashed (SHA-256, 1 MiB chunks) and
compared with the index; after that the process trusts it while its inode and size are unchanged,
so a hit costs one dict lookup and one ``os.stat``.  A damaged index is deleted and rebuilt; its
files cannot be verified any more, so they are deleted and fetched again when needed.

The cache directory must be on a local filesystem (SQLite WAL and flock need one).
"""

from __future__ import annotations

import atexit
import errno
import fcntl
import hashlib
import io
import os
import shutil
import sqlite3
import stat
import threading
import time
import weakref
from collections import deque
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

from lakefuse.cache.index import CacheIndex, is_corruption, remove_index_files
from lakefuse.cache.layout import (
    INDEX_FILE,
    LOCK_FILE,
    TMP_DIR,
    check_cache_name,
    clean_tmp,
    entry_path,
    new_tmp_path,
    remove_entry,
    scandir,
    shard_dirs,
    unlink_quietly,
)
from lakefuse.cache.stats import COUNTER_FIELDS, CacheStats
from lakefuse.errors import ConfigError, InvalidArgument, NotFound, StorageError

HASH_CHUNK = 1024 * 1024
LOCK_TIMEOUT_SECONDS = 60.0

_VERIFY_RETRIES = 4
_RETRY = object()  # "another process changed this entry while we looked": look again


def sha256_of_file(f: BinaryIO) -> bytes:
    """SHA-256 of an open binary file from its current position, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    buffer = bytearray(HASH_CHUNK)
    view = memoryview(buffer)
    while True:
        n = f.readinto(buffer)
        if not n:
            return digest.digest()
        digest.update(view[:n])


_OPEN_CACHES: "weakref.WeakSet[DiskCache]" = weakref.WeakSet()


@atexit.register
def _flush_all_at_exit() -> None:
    # Bounded: a thread (or another process) holding the lock must not hang interpreter exit.
    for cache in list(_OPEN_CACHES):
        with suppress(Exception):
            cache._flush_stats_opportunistically(time.time_ns(), wait_seconds=2.0)


class DiskCache:
    """Bounded (bytes), LRU, safe for several processes sharing one directory, of immutable
    named files (names are content addresses: hex strings / safe path components).

    Thread-safe.  ``stats()`` reports this instance's counters (hits, misses, evictions,
    corrupted) with the directory's current ``bytes``/``entries``; the cumulative counters of
    all processes are in the index (``read_disk_cache_stats``), updated under the lock on
    every insert/eviction/drop, at most every ``stats_interval`` seconds on hits, and at
    ``close()``/interpreter exit.
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        max_bytes: int,
        name: str = "files",
        *,
        touch_interval: float = 1.0,
        stats_interval: float = 5.0,
    ):
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise InvalidArgument(f"disk cache {name!r}: max_bytes must be a non-negative int, got {max_bytes!r}")
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"disk cache name must be a non-empty string, got {name!r}")
        if touch_interval < 0 or stats_interval < 0:
            raise InvalidArgument(f"disk cache {name!r}: touch_interval and stats_interval must be >= 0")
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self.name = name
        self.touch_interval = touch_interval
        self._touch_interval_ns = int(touch_interval * 1e9)
        self._stats_interval_ns = int(stats_interval * 1e9)
        self._root = os.fspath(self.directory)
        self._tmp_dir = os.path.join(self._root, TMP_DIR)
        self._index_path = os.path.join(self._root, INDEX_FILE)
        try:
            os.makedirs(self._tmp_dir, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"disk cache {name!r}: cannot create directory {self._root}: {exc.strerror}") from None
        # name -> (path, inode, size) of files this process has verified
        self._verified: dict[str, tuple[str, int, int]] = {}
        self._verified_limit = 1 << 17
        self._counter_lock = threading.Lock()
        self._hits = self._misses = self._evictions = self._corrupted = 0
        self._flushed = dict.fromkeys(COUNTER_FIELDS, 0)
        self._next_stats_flush_ns = time.time_ns() + self._stats_interval_ns
        self._name_locks: dict[str, list] = {}
        self._name_locks_guard = threading.Lock()
        # oldest-first (name, mtime_ns) from the last directory scan; see _evict_locked
        self._candidates: deque[tuple[str, int]] = deque()
        self._closed = False
        self._index: CacheIndex | None = None
        self._open_process_state()
        with self._critical():
            clean_tmp(self._tmp_dir)
        _OPEN_CACHES.add(self)

    # -- public API ------------------------------------------------------------------------

    def get(self, name: str, fetch: Callable[[str], None]) -> str:
        """Path of a verified local copy of ``name``.

        On a miss calls ``fetch(tmp_path)``, which must write the file at ``tmp_path`` (a path in
        a directory the cache owns, on the same filesystem; the file does not exist yet).  The
        cache hashes it, renames it into place and evicts LRU files down to ``max_bytes``.  On a
        hit the file is verified against its stored SHA-256 the first time this process uses
        it; a mismatch or a missing/truncated file counts as ``corrupted``, is dropped and
        fetched again transparently.  Exceptions of ``fetch`` propagate (nothing is cached).
        Open the returned path right away (see the module docstring).
        """
        try:
            record = self._verified.get(name)
        except TypeError:
            record = None
        if record is not None:
            path = record[0]
            try:
                st = os.stat(path)
            except OSError:
                pass
            else:
                if st.st_ino == record[1] and st.st_size == record[2]:
                    now = time.time_ns()
                    if st.st_mtime_ns < now - self._touch_interval_ns:
                        self._touch(path, now)
                    # Unlocked on purpose (a lock would add ~0.3 us to a ~2 us hit); with the GIL
                    # this read-modify-write of an int attribute is not interrupted in practice.
                    self._hits += 1
                    if now >= self._next_stats_flush_ns:
                        self._flush_stats_opportunistically(now)
                    return path
        return self._get_slow(check_cache_name(name), fetch)

    def open(self, name: str, fetch: Callable[[str], None]) -> BinaryIO:
        """``get`` + open for reading (binary), retrying if the file is evicted in between.

        The returned file keeps working even if the cache evicts the entry afterwards.
        """
        for _ in range(_VERIFY_RETRIES):
            path = self.get(name, fetch)
            try:
                return io.open(path, "rb")
            except FileNotFoundError:
                self._verified.pop(name, None)
        raise StorageError(f"disk cache {self.name!r}: {name!r} kept disappearing right after being cached (cache too small?)")

    def put_file(self, name: str, src_path: str | os.PathLike, *, move: bool = False) -> str:
        """Insert an existing local file as ``name`` (replacing any cached copy); return its path.

        The file is copied in, or moved with ``move=True`` (a rename when on the same
        filesystem).  Counts neither a hit nor a miss.
        """
        check_cache_name(name)
        src = os.fspath(src_path)
        if not os.path.isfile(src):
            raise NotFound(f"disk cache {self.name!r}: cannot insert {src!r}: no such file")
        tmp = new_tmp_path(self._tmp_dir)
        try:
            try:
                if move:
                    try:
                        os.rename(src, tmp)
                    except OSError as exc:
                        if exc.errno != errno.EXDEV:
                            raise
                        shutil.copyfile(src, tmp)
                        os.unlink(src)
                else:
                    shutil.copyfile(src, tmp)
            except FileNotFoundError:
                raise NotFound(f"disk cache {self.name!r}: cannot insert {src!r}: no such file") from None
            except OSError as exc:
                raise StorageError(f"disk cache {self.name!r}: cannot insert {src!r}: {exc.strerror or exc}") from None
            return self._insert_tmp(name, tmp)
        finally:
            with suppress(FileNotFoundError):
                os.unlink(tmp)

    def contains(self, name: str) -> bool:
        """True if ``name`` is cached (indexed and present; not verified, counts nothing)."""
        check_cache_name(name)
        return self._lookup(name) is not None and os.path.exists(entry_path(self._root, name))

    def invalidate(self, name: str) -> None:
        """Drop ``name`` from the cache (no error if it is not cached)."""
        check_cache_name(name)
        with self._critical():
            unlink_quietly(entry_path(self._root, name))
            with self._index.transaction():
                self._index.delete(name)
            self._verified.pop(name, None)
            self._write_stats_locked()

    def clear(self) -> None:
        """Drop every cached file.  Cumulative counters are kept."""
        with self._critical():
            for shard in shard_dirs(self._root):
                for entry in scandir(shard):
                    remove_entry(entry)
            with self._index.transaction():
                self._index.delete_all()
            self._verified.clear()
            self._candidates.clear()
            self._write_stats_locked()

    def stats(self) -> CacheStats:
        """This instance's hits/misses/evictions/corrupted and the directory's bytes/entries."""
        with self._counter_lock:
            hits, misses, evictions, corrupted = self._hits, self._misses, self._evictions, self._corrupted
        total_bytes, entries = self._totals()
        return CacheStats(hits, misses, evictions, corrupted, total_bytes, entries)

    def flush_stats(self) -> None:
        """Add this process's not yet persisted counters to the directory's totals now."""
        with self._critical():
            self._write_stats_locked()

    def repair(self) -> None:
        """Reconcile the directory with the index (delete unknown files, forget missing ones,
        fix totals), delete stale temporary files, then evict down to ``max_bytes``."""
        with self._critical():
            self._scan_locked()
            clean_tmp(self._tmp_dir)
            self._evict_locked(keep=None)
            self._write_stats_locked()

    def close(self) -> None:
        """Persist counters and release the index and lock files.  Idempotent."""
        if self._closed:
            return
        with suppress(StorageError, OSError, sqlite3.Error):
            self.flush_stats()
        with self._lock:
            self._closed = True
            _OPEN_CACHES.discard(self)
            if self._index is not None:
                self._index.close()
                self._index = None
            os.close(self._lock_fd)

    def __enter__(self) -> "DiskCache":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"DiskCache({self._root!r}, max_bytes={self.max_bytes}, name={self.name!r})"

    # -- process state, locking ------------------------------------------------------------

    def _open_process_state(self) -> None:
        """Open the lock file and index for the current process (again after a fork)."""
        self._pid = os.getpid()
        self._lock = threading.RLock()
        self._lock_depth = 0
        try:
            self._lock_fd = os.open(os.path.join(self._root, LOCK_FILE), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise ConfigError(f"disk cache {self.name!r}: cannot open lock file in {self._root}: {exc.strerror}") from None
        self._index = None  # opened under the lock by _critical()

    def _check_process(self) -> None:
        if self._closed:
            raise InvalidArgument(f"disk cache {self.name!r} is closed")
        if os.getpid() != self._pid:
            # A forked child must not share the parent's lock description or SQLite connection;
            # the inherited connection is kept referenced (never used, never closed) on purpose.
            self._inherited_index = self._index
            self._open_process_state()
            self._verified.clear()
            self._candidates.clear()
            self._name_locks = {}
            self._name_locks_guard = threading.Lock()
            self._counter_lock = threading.Lock()

    @contextmanager
    def _critical(self) -> Iterator[None]:
        """Thread lock + directory flock (re-entrant within a thread) with a current index."""
        self._check_process()
        with self._lock:
            if self._lock_depth == 0:
                self._flock()
            self._lock_depth += 1
            try:
                if self._lock_depth == 1:
                    self._ensure_index_locked()
                yield
            except sqlite3.DatabaseError as exc:
                if is_corruption(exc):
                    try:
                        self._reset_index_locked()
                    except sqlite3.Error as again:
                        raise StorageError(f"disk cache {self.name!r}: cannot rebuild index {self._index_path}: {again}") from None
                    raise StorageError(f"disk cache {self.name!r}: index was corrupted and has been rebuilt; retry") from None
                raise StorageError(f"disk cache {self.name!r}: index error: {exc}") from None
            finally:
                self._lock_depth -= 1
                if self._lock_depth == 0:
                    fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def _flock(self) -> None:
        """Take the directory lock, polling so that a wedged holder cannot block us forever."""
        deadline = time.monotonic() + LOCK_TIMEOUT_SECONDS
        delay = 0.0005
        while True:
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise StorageError(
                        f"disk cache {self.name!r}: lock {self._root}/{LOCK_FILE} held by another process "
                        f"for more than {LOCK_TIMEOUT_SECONDS:.0f} s"
                    ) from None
                time.sleep(delay)
                delay = min(delay * 2, 0.02)

    def _ensure_index_locked(self) -> None:
        if self._index is not None and self._index.is_current():
            return
        if self._index is not None:
            self._index.close()
            self._index = None
        try:
            self._index = CacheIndex(self._index_path)
        except sqlite3.DatabaseError as exc:
            if not is_corruption(exc) and "schema version" not in str(exc):
                raise StorageError(f"disk cache {self.name!r}: cannot open index {self._index_path}: {exc}") from None
            self._reset_index_locked()
            return
        if self._index.created:
            # New (or deleted) index: whatever files are on disk cannot be verified any more.
            self._scan_locked()

    def _reset_index_locked(self) -> None:
        """Replace a damaged index by an empty one and drop the files it described."""
        if self._index is not None:
            with suppress(sqlite3.Error):
                self._index.close()
            self._index = None
        remove_index_files(self._index_path)
        self._index = CacheIndex(self._index_path)
        self._verified.clear()
        self._scan_locked()

    def _read_index(self, read: Callable[[CacheIndex], object]):
        """Run a read on the index without the directory lock when the index is healthy and
        current; otherwise (re)open, or rebuild a damaged one, under the lock."""
        self._check_process()
        with self._lock:
            if self._index is not None and self._index.is_current():
                try:
                    return read(self._index)
                except sqlite3.DatabaseError as exc:
                    if not is_corruption(exc):
                        raise StorageError(f"disk cache {self.name!r}: index read failed: {exc}") from None
            with self._critical():
                try:
                    return read(self._index)
                except sqlite3.DatabaseError as exc:
                    if not is_corruption(exc):
                        raise
                    self._reset_index_locked()
                    return read(self._index)

    def _lookup(self, name: str) -> tuple[int, bytes] | None:
        return self._read_index(lambda index: index.lookup(name))

    def _totals(self) -> tuple[int, int]:
        return self._read_index(CacheIndex.totals)

    # -- hits, misses, verification ----------------------------------------------------------

    @contextmanager
    def _name_lock(self, name: str) -> Iterator[None]:
        """Serialise threads of this process working on the same name (one fetch, not many)."""
        with self._name_locks_guard:
            entry = self._name_locks.get(name)
            if entry is None:
                entry = self._name_locks[name] = [threading.Lock(), 0]
            entry[1] += 1
        try:
            with entry[0]:
                yield
        finally:
            with self._name_locks_guard:
                entry[1] -= 1
                if entry[1] == 0 and self._name_locks.get(name) is entry:
                    del self._name_locks[name]

    def _get_slow(self, name: str, fetch: Callable[[str], None]) -> str:
        self._check_process()
        with self._name_lock(name):
            for _ in range(_VERIFY_RETRIES):
                outcome = self._verify_cached(name)
                if isinstance(outcome, str):
                    with self._counter_lock:
                        self._hits += 1
                    return outcome
                if outcome is None:
                    break
            with self._counter_lock:
                self._misses += 1
            return self._fetch_and_insert(name, fetch)

    def _verify_cached(self, name: str):
        """Path if ``name`` is cached and intact (verifying it if this process has not yet);
        None if it is not cached (or was damaged and has been dropped); _RETRY if another
        process changed it while we looked."""
        path = entry_path(self._root, name)
        record = self._verified.get(name)
        if record is not None:
            with suppress(OSError):
                st = os.stat(path)
                if st.st_ino == record[1] and st.st_size == record[2]:
                    return path  # another thread of this process just verified or fetched it
        row = self._lookup(name)
        if row is None:
            return None
        size, digest = row
        hashed = None
        try:
            with io.open(path, "rb", buffering=0) as f:
                hashed = os.fstat(f.fileno())
                intact = hashed.st_size == size and sha256_of_file(f) == digest
        except FileNotFoundError:
            intact = False
        except OSError as exc:
            raise StorageError(f"disk cache {self.name!r}: cannot read {path}: {exc.strerror or exc}") from None
        if intact:
            self._remember(name, path, hashed.st_ino, size)
            now = time.time_ns()
            if hashed.st_mtime_ns < now - self._touch_interval_ns:
                self._touch(path, now)
            return path
        return self._drop_damaged(name, row, hashed)

    def _drop_damaged(self, name: str, row: tuple[int, bytes], hashed: os.stat_result | None):
        path = entry_path(self._root, name)
        with self._critical():
            if self._index.lookup(name) != row:
                return _RETRY  # replaced or evicted meanwhile: look again
            try:
                now = os.stat(path)
            except FileNotFoundError:
                now = None
            if (now is None) != (hashed is None) or (now is not None and now.st_ino != hashed.st_ino):
                return _RETRY  # a writer finished renaming it in, or re-inserted it
            unlink_quietly(path)
            with self._index.transaction():
                self._index.delete(name)
            self._verified.pop(name, None)
            with self._counter_lock:
                self._corrupted += 1
            self._write_stats_locked()
            return None

    def _remember(self, name: str, path: str, inode: int, size: int) -> None:
        verified = self._verified
        if len(verified) >= self._verified_limit:
            for old in list(verified)[: self._verified_limit // 2]:
                verified.pop(old, None)
        verified[name] = (path, inode, size)

    @staticmethod
    def _touch(path: str, now_ns: int) -> None:
        with suppress(OSError):
            os.utime(path, ns=(now_ns, now_ns))

    # -- inserting -------------------------------------------------------------------------

    def _fetch_and_insert(self, name: str, fetch: Callable[[str], None]) -> str:
        tmp = new_tmp_path(self._tmp_dir)
        try:
            fetch(tmp)
            return self._insert_tmp(name, tmp)
        finally:
            with suppress(OSError):
                os.unlink(tmp)

    def _insert_tmp(self, name: str, tmp: str) -> str:
        try:
            st = os.lstat(tmp)
        except FileNotFoundError:
            raise StorageError(f"disk cache {self.name!r}: fetching {name!r} did not create the file it was given") from None
        if not stat.S_ISREG(st.st_mode):
            raise StorageError(f"disk cache {self.name!r}: fetching {name!r} produced something that is not a regular file")
        with io.open(tmp, "rb", buffering=0) as f:
            st = os.fstat(f.fileno())
            digest = sha256_of_file(f)
        path = entry_path(self._root, name)
        shard = os.path.dirname(path)
        with self._critical():
            os.makedirs(shard, exist_ok=True)
            with self._index.transaction():
                self._index.upsert(name, st.st_size, digest)
            try:
                now = time.time_ns()
                os.utime(tmp, ns=(now, now))  # stamped under the lock: newer than any scan
                os.replace(tmp, path)
            except OSError as exc:
                with self._index.transaction():
                    self._index.delete(name)
                raise StorageError(f"disk cache {self.name!r}: cannot store {name!r}: {exc.strerror or exc}") from None
            self._remember(name, path, st.st_ino, st.st_size)
            self._evict_locked(keep=name)
            self._write_stats_locked()
        return path

    # -- eviction and repair (under the directory lock) ------------------------------------

    def _evict_locked(self, keep: str | None) -> None:
        """Evict least recently used files until the total is <= max_bytes, never ``keep``.

        Candidates come oldest-first from the last directory scan of this process.  A candidate
        whose mtime is unchanged is still older than every file not in the list (those were
        stamped after the scan), so it is the true LRU entry; one whose mtime changed was used
        since and is skipped.  When the list runs out the directory is scanned again, so the
        cost is one scan per ~entries evictions instead of one per insert.
        """
        total, _ = self._index.totals()
        if total <= self.max_bytes:
            return
        rescanned = False
        with self._index.transaction():
            while total > self.max_bytes:
                if not self._candidates:
                    if rescanned:
                        break
                    self._scan_locked(in_transaction=True)
                    total, _ = self._index.totals()
                    rescanned = True
                    continue
                name, mtime_ns = self._candidates.popleft()
                if name == keep:
                    continue
                path = entry_path(self._root, name)
                try:
                    current = os.stat(path).st_mtime_ns
                except FileNotFoundError:
                    current = None
                if current is not None and current != mtime_ns:
                    continue  # used since the scan
                if current is not None:
                    unlink_quietly(path)
                size = self._index.delete(name)
                if size is None:
                    continue
                total -= size
                self._verified.pop(name, None)
                if current is not None:
                    with self._counter_lock:
                        self._evictions += 1

    def _scan_locked(self, in_transaction: bool = False) -> None:
        """Walk the shard directories: delete files the index does not know, forget index rows
        whose file is gone, recompute the totals and refill the LRU candidate list."""
        known = self._index.sizes()
        found: list[tuple[int, str]] = []
        for shard in shard_dirs(self._root):
            shard_name = os.path.basename(shard)
            for entry in scandir(shard):
                if entry.name not in known or entry.name[:2] != shard_name:
                    remove_entry(entry)
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                found.append((st.st_mtime_ns, entry.name))
        present = {name for _, name in found}
        missing = [name for name in known if name not in present]

        def reconcile() -> None:
            for name in missing:
                self._index.delete(name)
            self._index.recompute_totals()

        if in_transaction:
            reconcile()
        else:
            with self._index.transaction():
                reconcile()
        for name in missing:
            self._verified.pop(name, None)
        found.sort()
        self._candidates = deque((name, mtime_ns) for mtime_ns, name in found)

    # -- persisted counters ------------------------------------------------------------------

    def _write_stats_locked(self) -> None:
        """Add this process's counter deltas to the directory's cumulative counters."""
        with self._counter_lock:
            snapshot = {
                "hits": self._hits,
                "misses": self._misses,
                "evictions": self._evictions,
                "corrupted": self._corrupted,
            }
        deltas = {key: value - self._flushed[key] for key, value in snapshot.items()}
        meta = {"name": self.name, "max_bytes": str(self.max_bytes), "updated_at": repr(time.time())}
        with self._index.transaction():
            self._index.add_counters(deltas, meta)
        self._flushed = snapshot
        self._next_stats_flush_ns = time.time_ns() + self._stats_interval_ns

    def _flush_stats_opportunistically(self, now_ns: int, wait_seconds: float = 0.0) -> bool:
        """Flush counters if the locks can be had within ``wait_seconds`` (0: only if free right
        now, as on the hit path); otherwise try again on a hit a second later.  True if flushed."""
        self._next_stats_flush_ns = now_ns + 1_000_000_000
        if self._closed or os.getpid() != self._pid:
            return False
        deadline = time.monotonic() + wait_seconds
        acquired = self._lock.acquire(timeout=wait_seconds) if wait_seconds else self._lock.acquire(blocking=False)
        if not acquired:
            return False
        try:
            if self._lock_depth:
                return False
            while True:
                try:
                    fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        return False
                    time.sleep(0.005)
            self._lock_depth += 1
            try:
                self._ensure_index_locked()
                self._write_stats_locked()
                return True
            except (StorageError, OSError, sqlite3.Error):
                return False
            finally:
                self._lock_depth -= 1
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
        finally:
            self._lock.release()
