"""Object bytes for the mount: how a read of an immutable object is served.

- ``LocalFileReader``: an object of a ``local`` storage namespace is already a file on local
  disk; it is read with ``os.pread`` (the kernel's page cache is the cache; copying it into
  another cache would only halve throughput).  On the event loop (``read_nowait``) bytes the
  page cache holds are answered from a read-only memory map of the file, so the reply to the
  kernel is the only copy; bytes it does not hold go to a thread that may wait for the disk.
- ``BlockCache`` / ``CachedObjectReader``: objects of remote storage (S3) are read in
  fixed-size blocks kept in a block store (``DiskBlockStore`` over ``lakefuse.cache.DiskCache``,
  or ``RamBlockStore``), keyed by (object identity, block index).  Sequential reads grow a
  read-ahead window (1, 2, 4, ... blocks) fetched in a thread pool; a random read fetches only
  the blocks it touches.  Blocks being fetched are shared, never fetched twice.

Every reader is thread-safe.
"""

from __future__ import annotations

import collections
import concurrent.futures
import ctypes
import ctypes.util
import hashlib
import mmap
import os
import threading
from typing import Callable

from lakefuse.errors import ObjectNotFound, StorageError

DEFAULT_BLOCK_SIZE = 1024 * 1024
DEFAULT_MAX_WINDOW_BLOCKS = 32
DEFAULT_WORKERS = 8


def _load_mincore():
    """libc's ``mincore(addr, length, vec)``, or None where ctypes cannot find it."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        mincore = libc.mincore
    except (OSError, AttributeError):
        return None
    mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte))
    mincore.restype = ctypes.c_int
    return mincore


_mincore = _load_mincore()
_PAGE = mmap.PAGESIZE

#: how much of a local object's file the kernel is asked to read in when it is first opened
#: (``read_ahead_bytes``): of one the mount serves (``lakefuse.fs.files``), what its first READs
#: ask for; of one the kernel reads, what its reader's first read(2) does (``Passthrough.open``);
#: of the next files of a cold walk, both (``lakefuse.fs.siblings``).  A file of up to
#: WHOLE_FILE_BYTES is read in whole: small files are read whole, and the kernel's first READs of
#: one over 128 KiB ask for more than that (asking for 128 KiB, a cold ``grep -r`` found the
#: first READ of each such file uncached, and sent it to a worker thread).  Of a bigger file,
#: which may be read anywhere (a Parquet footer), the first READ_AHEAD_BYTES.
READ_AHEAD_BYTES = 128 * 1024
WHOLE_FILE_BYTES = 1024 * 1024


def read_ahead_bytes(size: int) -> int:
    """How many of a file's first bytes its first open has the kernel read in."""
    return size if size <= WHOLE_FILE_BYTES else READ_AHEAD_BYTES


class MappedFile:
    """A read-only view of a whole immutable file through ``mmap``, and which of its pages the
    page cache holds (``mincore``), so that bytes can be handed out without copying them and
    without ever waiting for the disk.  Objects of a storage namespace are never modified or
    truncated, so the mapping stays valid while it is open."""

    def __init__(self, fd: int, size: int):
        # MAP_PRIVATE with write permission only so that ctypes can tell the address; nothing
        # ever writes to it, so every page stays the page cache's own
        self._map = mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        self._address = ctypes.addressof(ctypes.c_char.from_buffer(self._map))
        self._view = memoryview(self._map).toreadonly()
        self.size = size

    def resident(self, offset: int, size: int) -> bool:
        """Whether every page of ``[offset, offset + size)`` is in the page cache."""
        start = offset - offset % _PAGE
        pages = (offset + size - start + _PAGE - 1) // _PAGE
        vec = (ctypes.c_ubyte * pages)()
        if _mincore(self._address + start, pages * _PAGE, vec) != 0:
            return False
        return 0 not in bytes(vec)

    def view(self, offset: int, size: int) -> memoryview:
        return self._view[offset : offset + size]

    def close(self) -> None:
        try:
            self._view.release()
            self._map.close()
        except BufferError:  # a reply still holds a view: unmapped when the last one goes
            pass


class LocalFileReader:
    #: files at least this big are memory-mapped for replies from the event loop (smaller
    #: ones cost more to map than to copy)
    MAP_MIN_BYTES = 1024 * 1024

    def __init__(self, path: str, fd: int | None = None):
        """``fd``: the file at ``path``, opened read-only already (the reader closes it)."""
        if fd is None:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                raise ObjectNotFound(f"object data missing from local storage: {path}") from None
            except OSError as exc:
                raise StorageError(f"cannot open {path}: {exc.strerror}") from None
        self._fd = fd
        self.path = path
        self._mapped: MappedFile | None = None
        self._map_tried = False
        self._lock = threading.Lock()

    def fileno(self) -> int:
        return self._fd

    def read(self, offset: int, size: int) -> bytes:
        data = os.pread(self._fd, size, offset)
        if len(data) == size or not data:
            return data
        parts = [data]
        got = len(data)
        while got < size:
            more = os.pread(self._fd, size - got, offset + got)
            if not more:
                break
            parts.append(more)
            got += len(more)
        return b"".join(parts)

    def _mapping(self) -> MappedFile | None:
        if self._map_tried:
            return self._mapped
        with self._lock:
            if not self._map_tried and self._fd >= 0:
                try:
                    size = os.fstat(self._fd).st_size
                    if _mincore is not None and size >= self.MAP_MIN_BYTES:
                        self._mapped = MappedFile(self._fd, size)
                except (OSError, ValueError, TypeError):
                    self._mapped = None  # e.g. mmap refused: copy instead
                self._map_tried = True
        return self._mapped

    def read_nowait(self, offset: int, size: int, buffer: bytearray) -> memoryview | None:
        """The bytes if all of them are in the page cache, else None: never waits for the
        disk, so it may run on an event loop.  A view of the file's mapping (no copy) or of
        ``buffer``; valid until the next call."""
        mapped = self._mapping()
        if mapped is not None and offset + size <= mapped.size:
            return mapped.view(offset, size) if mapped.resident(offset, size) else None
        view = memoryview(buffer)[:size]
        try:
            got = os.preadv(self._fd, [view], offset, os.RWF_NOWAIT)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError:
            return None  # e.g. RWF_NOWAIT unsupported here: the blocking path reports real errors
        return view[:got] if got == size else None

    def will_need(self, offset: int, size: int) -> None:
        """Have the kernel start reading these bytes into the page cache; returns at once
        (``posix_fadvise(WILLNEED)`` queues the reads, it does not wait for them)."""
        try:
            os.posix_fadvise(self._fd, offset, size, os.POSIX_FADV_WILLNEED)
        except OSError:
            pass  # a hint: the read itself reports real errors

    def close(self) -> None:
        with self._lock:
            fd, self._fd = self._fd, -1
            mapped, self._mapped = self._mapped, None
            self._map_tried = True
        if mapped is not None:
            mapped.close()
        if fd >= 0:
            os.close(fd)


# ---------------------------------------------------------------------------- block stores

class RamBlockStore:
    """Blocks in memory, least recently used dropped beyond ``max_bytes``."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._blocks: collections.OrderedDict[str, bytes] = collections.OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def ensure(self, name: str, fetch: Callable[[], bytes]) -> None:
        self._get(name, fetch)

    def read(self, name: str, offset: int, size: int, fetch: Callable[[], bytes]) -> bytes:
        return self._get(name, fetch)[offset:offset + size]

    def _get(self, name: str, fetch: Callable[[], bytes]) -> bytes:
        with self._lock:
            data = self._blocks.get(name)
            if data is not None:
                self._blocks.move_to_end(name)
                return data
        data = fetch()
        with self._lock:
            if name not in self._blocks:
                self._blocks[name] = data
                self._bytes += len(data)
                while self._bytes > self.max_bytes and len(self._blocks) > 1:
                    _, old = self._blocks.popitem(last=False)
                    self._bytes -= len(old)
        return data


class DiskBlockStore:
    """Blocks as files of a ``DiskCache`` (bounded, shared between processes, verified)."""

    def __init__(self, disk_cache):
        self.disk_cache = disk_cache

    @staticmethod
    def _writer(fetch: Callable[[], bytes]) -> Callable[[str], None]:
        def write(tmp_path: str) -> None:
            data = fetch()
            with open(tmp_path, "wb") as f:
                f.write(data)
        return write

    def ensure(self, name: str, fetch: Callable[[], bytes]) -> None:
        self.disk_cache.get(name, self._writer(fetch))

    def read(self, name: str, offset: int, size: int, fetch: Callable[[], bytes]) -> bytes:
        for _ in range(3):
            path = self.disk_cache.get(name, self._writer(fetch))
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                continue  # evicted between get and open: fetch again
            try:
                return os.pread(fd, size, offset)
            finally:
                os.close(fd)
        raise StorageError(f"block {name} keeps being evicted from the disk cache (cache too small?)")


# ---------------------------------------------------------------------------- block cache

class BlockCache:
    """Read-through cache of fixed-size blocks of immutable objects, with read-ahead."""

    def __init__(self, store, *, block_size: int = DEFAULT_BLOCK_SIZE, workers: int = DEFAULT_WORKERS,
                 max_window_blocks: int = DEFAULT_MAX_WINDOW_BLOCKS):
        self.store = store
        self.block_size = block_size
        self.max_window_blocks = max_window_blocks
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="lakefuse-prefetch")
        self._inflight: dict[str, concurrent.futures.Future] = {}
        self._lock = threading.Lock()
        self.fetches = 0  # ranged GETs issued (tests and benchmarks look at it)

    def open(self, identity: str, size: int, fetch_range: Callable[[int, int], bytes]) -> "CachedObjectReader":
        """A reader of one object: ``identity`` must change whenever the bytes could
        (physical address + checksum); ``fetch_range(offset, length)`` reads the backend."""
        digest = hashlib.sha256(identity.encode("utf-8")).hexdigest()[:40]
        return CachedObjectReader(self, digest, size, fetch_range)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    # internals -------------------------------------------------------------------------

    def _fetcher(self, size: int, index: int, fetch_range) -> Callable[[], bytes]:
        start = index * self.block_size
        length = min(self.block_size, size - start)

        def fetch() -> bytes:
            self.fetches += 1
            data = fetch_range(start, length)
            if len(data) != length:
                raise StorageError(f"short read from storage: {len(data)} bytes of {length} at {start}")
            return data
        return fetch

    def _prefetch(self, name: str, fetch: Callable[[], bytes]) -> None:
        with self._lock:
            if name in self._inflight:
                return
            future = self._pool.submit(self.store.ensure, name, fetch)
            self._inflight[name] = future
        future.add_done_callback(lambda _f, name=name: self._done(name, _f))

    def _done(self, name: str, future) -> None:
        with self._lock:
            if self._inflight.get(name) is future:
                del self._inflight[name]

    def _read_block(self, name: str, offset: int, length: int, fetch: Callable[[], bytes]) -> bytes:
        with self._lock:
            future = self._inflight.get(name)
            owner = future is None
            if owner:  # this read fetches the block; concurrent readers wait for it
                future = concurrent.futures.Future()
                self._inflight[name] = future
        if owner:
            try:
                self.store.ensure(name, fetch)
                future.set_result(None)
            except BaseException as exc:
                future.set_exception(exc)
                raise
            finally:
                self._done(name, future)
        else:
            try:
                future.result()
            except Exception:  # noqa: BLE001 - the read below fetches again and reports
                pass
        return self.store.read(name, offset, length, fetch)


class CachedObjectReader:
    def __init__(self, cache: BlockCache, digest: str, size: int, fetch_range):
        self._cache = cache
        self._digest = digest
        self.size = size
        self._fetch_range = fetch_range
        self._next_offset = -1
        self._window = 0
        self._prefetched_to = -1  # highest block index already scheduled
        self._lock = threading.Lock()

    def _name(self, index: int) -> str:
        return f"{self._digest}-{index}"

    def read(self, offset: int, size: int) -> bytes:
        if offset >= self.size or size <= 0:
            return b""
        size = min(size, self.size - offset)
        cache = self._cache
        bs = cache.block_size
        first, last = offset // bs, (offset + size - 1) // bs
        with self._lock:
            sequential = offset == self._next_offset or (self._next_offset < 0 and offset == 0)
            self._next_offset = offset + size
            if sequential:
                self._window = min(max(1, self._window * 2), cache.max_window_blocks)
            else:
                self._window = 0
                self._prefetched_to = last
            window = self._window
            ahead_from = max(last + 1, self._prefetched_to + 1)
            ahead_to = min(last + window, (self.size - 1) // bs)
            if ahead_to >= ahead_from:
                self._prefetched_to = ahead_to
        for index in range(ahead_from, ahead_to + 1):
            cache._prefetch(self._name(index), cache._fetcher(self.size, index, self._fetch_range))
        parts = []
        for index in range(first, last + 1):
            start = max(offset, index * bs) - index * bs
            end = min(offset + size, (index + 1) * bs) - index * bs
            parts.append(cache._read_block(self._name(index), start, end - start,
                                           cache._fetcher(self.size, index, self._fetch_range)))
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def close(self) -> None:
        pass

