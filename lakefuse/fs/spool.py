"""Local spool files: where the bytes of a file being written on a branch live until they are
stored (on fsync, flush/close, or a commit), and from where the writer's own reads are served;
``SpoolTail`` hands the bytes appended to a spool to a background consumer while they are
still being written (to hash them, or to stream them to storage).

A spool is a file in the mount's spool directory, deleted when closed.  Storing it may move
the file itself into storage (``seal`` first).  For a repository whose storage is a local
directory a spool is made right where it becomes an object (``SpoolReserve`` with
``in_place``): storing it is giving it an entry, with no move (``Spool.in_place_address``).
A sealed spool still serves reads from its descriptor, refuses writes (its bytes are an
object's now: the caller copies them into a new spool to change them), and on close deletes
its path only if that still names the same file.
``fill_from`` copies an existing object's bytes in (for a write into the middle of, or an
append to, an existing file), in the kernel when the source is a local file, leaving its holes
holes (a sparse file stays sparse).

A spool the kernel writes into itself (FUSE passthrough writes: ``kernel_writes``) takes no
write-behind; its size and mtime are the file's (fstat), and ``signature`` tells whether it
changed since a moment the caller noted.

``Spool.adopt`` makes a spool of an uncommitted object's own file, for appends in place: the
caller (``lakefuse.fs.uploads``) decided nothing else can reference that object; writes must
not go below ``base_size`` (the bytes its staged entry names), and closing it keeps the file.

Write-behind (``write_behind``): appends may be queued for a background thread instead of
written at once, so the mount can answer a big sequential ``write(2)`` as soon as its bytes are
queued (at most ``WRITE_BEHIND_LIMIT`` bytes wait).  That thread writes whole aligned blocks
with O_DIRECT where the filesystem allows it (``_DirectAppender``): no copy into the page
cache, and nothing left for the fsync at close.  The spool stays coherent: ``size()`` counts
queued bytes, and everything that touches the file (reads, writes, truncate, fsync, storing
it) first waits until every queued byte is in the file (``drain``).  A failed background
write (a full disk) fails the spool for good: every later call raises it, so a file with lost
bytes is never stored.  ``listener(offset, data)`` sees every write, queued or not, in order.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import mmap
import os
import secrets
import signal
import threading
import time
from collections import deque
from typing import Callable

from lakefuse.errors import StorageError
from lakefuse.fs.backend import InPlaceObjects

log = logging.getLogger(__name__)

COPY_CHUNK = 4 * 1024 * 1024
_CREATE_ATTEMPTS = 16
#: empty spool files a mount keeps made ahead at first (``SpoolReserve``) ...
RESERVE_SPOOLS = 32
#: ... and at most, after bursts of creates emptied the reserve
RESERVE_SPOOLS_MOST = 4096
#: files made ahead that waited too long, deleted by the reserve's thread this many at a time
EXPIRED_BATCH = 64
#: subdirectories of the spool directory they are spread over (see ``SpoolReserve``)
RESERVE_DIRECTORIES = 8
#: a spool made where it becomes an object is stored there only this long after it was made;
#: later it is moved to a fresh address like any other spool (see ``SpoolReserve``, "In place")
IN_PLACE_SECONDS = 1800.0
#: seconds without a spool taken after which the reserve's thread stops
RESERVE_IDLE_SECONDS = 60.0
#: the reserve's thread makes a file only once no spool was taken for this long (see
#: ``SpoolReserve``: not during a burst of creates)
REFILL_QUIET_SECONDS = 0.01
_IN_PLACE_NS = int(IN_PLACE_SECONDS * 1e9)
_IN_PLACE_WAIT_NS = _IN_PLACE_NS // 2  # the reserve drops files older than this
_SYNC_FILE_RANGE_WRITE = 2  # <linux/fs.h>: start writeback of dirty pages, do not wait
#: seconds ``Spool.held_elsewhere`` asks again while the answer is "held" (see there)
HELD_PATIENCE = 0.005
#: the signal a write lease on a spool is broken with (``Spool.held_elsewhere``): the kernel
#: sends SIGIO by default, whose default action ends the process, where SIGURG's is to ignore it
LEASE_BREAK_SIGNAL = signal.SIGURG
#: bytes a spool's write-behind queue may hold; a write finding it full waits (or, from the
#: event loop, goes to a worker thread that waits)
WRITE_BEHIND_LIMIT = 16 * 1024 * 1024
#: bytes a SpoolTail holds that its consumer has not taken yet; the writer waits beyond that
TAIL_BUFFER_LIMIT = 16 * 1024 * 1024
#: O_DIRECT alignment of file offsets, lengths and memory (covers 512 and 4096-byte devices)
DIRECT_ALIGN = 4096
#: how many bytes the direct appender gathers before writing them
DIRECT_STAGE = 4 * 1024 * 1024
#: small appends queued for write-behind are gathered into pieces this big first: the writer
#: thread wakes once per piece, not once per 4 KiB ``write(2)``
GATHER_BYTES = 1024 * 1024


def _libc_sync_file_range():
    """Linux's sync_file_range(2) (not in ``os``), or None where libc has none."""
    try:
        import ctypes

        function = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    function.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    function.restype = ctypes.c_int
    return function


_sync_file_range = _libc_sync_file_range()


def _pwrite_all(fd: int, data, offset: int) -> int:
    view = memoryview(data)
    done = 0
    while done < len(view):
        done += os.pwrite(fd, view[done:], offset + done)
    return done


class _DirectAppender:
    """Appends to one file from one thread: bytes gather in an aligned buffer, whole aligned
    blocks go to the file through an O_DIRECT descriptor, the rest (the partial block at
    either end) through the ordinary one when ``sync`` is asked for.  Appends that do not
    continue the previous one are fine too (the staged bytes are synced first)."""

    def __init__(self, path: str, fd: int):
        self.fd = fd
        self.direct_fd = os.open(path, os.O_WRONLY | os.O_DIRECT | os.O_CLOEXEC)  # OSError if unsupported
        self.buffer = mmap.mmap(-1, DIRECT_STAGE + DIRECT_ALIGN)
        self.view = memoryview(self.buffer)
        self.start = 0  # file offset of the first staged byte
        self.head = 0  # its position in the buffer: start % DIRECT_ALIGN, so blocks line up
        self.length = 0  # bytes staged

    @property
    def staged(self) -> int:
        return self.length

    def append(self, offset: int, data: bytes) -> None:
        if offset != self.start + self.length:
            self.sync()
            self.start, self.head = offset, offset % DIRECT_ALIGN
        source = memoryview(data)
        taken = 0
        while taken < len(source):
            end = self.head + self.length
            room = len(self.buffer) - end
            if room == 0:
                self._write_blocks()
                continue
            n = min(room, len(source) - taken)
            self.view[end:end + n] = source[taken:taken + n]
            self.length += n
            taken += n
        if self.head + self.length >= DIRECT_STAGE:
            self._write_blocks()

    def _write_blocks(self) -> None:
        """Write every whole block staged; keep the partial last one."""
        end = self.head + self.length
        position = self.head
        if self.head:  # the first block starts with bytes that are not ours: not direct
            first_end = min(DIRECT_ALIGN, end)
            _pwrite_all(self.fd, self.view[self.head:first_end], self.start)
            position = first_end
        whole_end = end - end % DIRECT_ALIGN
        if whole_end > position:
            file_offset = self.start + (position - self.head)
            try:
                _pwrite_all(self.direct_fd, self.view[position:whole_end], file_offset)
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                # the filesystem wants another alignment after all: ordinary writes from now on
                _pwrite_all(self.fd, self.view[position:whole_end], file_offset)
                os.close(self.direct_fd)
                self.direct_fd = self.fd
            position = whole_end
        rest = end - position  # bytes of a partial last block (position is then aligned)
        new_start = self.start + (position - self.head)
        new_head = new_start % DIRECT_ALIGN
        if rest:
            self.view[new_head:new_head + rest] = self.view[position:end]
        self.start, self.head, self.length = new_start, new_head, rest

    def sync(self) -> None:
        """Put every staged byte in the file (through the page cache)."""
        if self.length:
            _pwrite_all(self.fd, self.view[self.head:self.head + self.length], self.start)
        self.start += self.length
        self.head, self.length = self.start % DIRECT_ALIGN, 0

    def close(self) -> None:
        if self.direct_fd != self.fd:
            os.close(self.direct_fd)
        try:
            self.view.release()
            self.buffer.close()
        except BufferError:
            pass  # a view of it is still referenced somewhere: the garbage collector frees it


def copy_data(source: int, target: int, size: int) -> None:
    """Copy bytes ``[0, size)`` of descriptor ``source`` to the same offsets of ``target`` (an
    empty file), in the kernel: only the ranges holding data, so holes stay holes."""
    os.ftruncate(target, size)
    offset = 0
    while offset < size:
        try:
            start = os.lseek(source, offset, os.SEEK_DATA)
            end = min(size, os.lseek(source, start, os.SEEK_HOLE))
        except OSError as exc:
            if exc.errno == errno.ENXIO:
                return  # a hole up to the end
            if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
                raise
            start, end = offset, size  # no SEEK_DATA here: copy everything
        if start >= size:
            return
        position = start
        while position < end:
            copied = os.copy_file_range(source, target, end - position, position, position)
            if copied == 0:
                raise OSError(errno.EIO, f"the source ended at {position} of {size} bytes")
            position += copied
        offset = end


def _create_spool_file(directory: str, new_name: Callable[[], str] | None = None,
                       make_directory: bool = False) -> tuple[str, int]:
    """A new empty file in ``directory`` of a random name, or of one ``new_name`` makes:
    (path, read-write descriptor).  ``make_directory``: (re)create the directory if it is
    missing (storage's ``data/``, which removing its last object removes)."""
    # 0o666 less the umask, like the local block adapter's objects: a spool may become one
    path = None
    for _ in range(_CREATE_ATTEMPTS):
        if path is None:
            path = os.path.join(directory, f"spool-{secrets.token_hex(8)}" if new_name is None else new_name())
        try:
            return path, os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        except FileExistsError:
            path = None  # another name
            continue
        except FileNotFoundError as exc:
            if not make_directory:
                raise StorageError(f"cannot create a spool file in {directory}: {exc.strerror}") from None
            try:
                os.makedirs(directory, exist_ok=True)
            except OSError as made:
                raise StorageError(f"cannot create a spool file in {directory}: {made.strerror}") from None
            continue  # the same name, in the directory made again
        except OSError as exc:
            raise StorageError(f"cannot create a spool file in {directory}: {exc.strerror}") from None
    raise StorageError(f"cannot create a spool file in {directory}: every name tried exists")


class SpoolReserve:
    """New spools for one spool directory, their files made ahead by a thread of its own.

    Creating a file costs a local filesystem anything from 20 µs to a millisecond of CPU (ext4
    without a journal scans the inodes freed in the last minute for one it may reuse, and a
    mount that deletes many files frees many).  A FUSE create made its spool on the event loop,
    which answers every request of the mount one after the other; taking a file made ahead
    leaves that work to the other core.  ``RESERVE_SPOOLS`` wait at first; when none is left
    (a burst of creates) ``new`` makes one itself, and the reserve doubles, up to
    ``RESERVE_SPOOLS_MOST``: a ``git clone`` of 300 files takes about 900 spools in under a
    second (files and directory markers), more than the thread makes meanwhile, and with 32
    waiting a twelfth of the event loop's time went into making the rest (``git clone`` took
    15% less with the reserve grown), and 2,000 creates 10% less with 4,096 than with 1,024
    (14 rounds).  Refilled while the mount is idle, a grown reserve takes the next burst
    whole.  The reserve holds paths, not descriptors,
    and its thread stops after a minute without work.  ``close`` deletes the waiting files;
    those a killed process leaves are removed with its spool directory by the next mount.

    The files are spread over ``RESERVE_DIRECTORIES`` subdirectories: a create holds its
    directory locked while the filesystem picks an inode, and storing a file renames its spool
    out of that directory (with one directory, a store waited for the create in progress and
    took twice as long).  ``new`` hands out the file made last: the thread is making the next
    one in another directory.  Taking the oldest (first made, first out) kept the two in step
    in the same directory, the reserve's size being a multiple of their number, and storing a
    file took 220 µs instead of 90–110.

    The thread makes files only while no spool is being taken (none for
    ``REFILL_QUIET_SECONDS``): during a burst of creates the reserve empties, and ``new`` makes
    the rest itself.  Each of the thread's system calls lets go of the interpreter lock and
    takes it back, and each time the event loop, coming back from a system call of its own,
    waited for it: making a file cost the thread 60-80 µs of CPU (20 µs of system calls), and
    a create cost the event loop as much, where making its spool itself costs it 15 µs.
    Creating 2,000 files through a mount took 502 µs each instead of 588, in one process
    (``scripts/bench/create_path.py``) 254 µs instead of 308.

    In place (``in_place``, for a repository whose storage is a local directory): the files
    are made in the storage's data directory, each named as a fresh object address, so storing
    one is only giving it an entry (``Catalog.store_in_place``), not a rename into storage: the
    rename, a directory entry removed and one added under both directories' locks, was the
    dearest system call of a small file's store (36 µs of 100).  This is lakeFS's own way
    (a client writes an object at an address the server gave it, then links it), and the same
    rule keeps it safe from garbage collection: ``lakefuse gc`` deletes an unreferenced object
    only once it is older than its ``--min-age``, so a file may become an object where it lies
    only until ``IN_PLACE_SECONDS`` after it was made; a file written longer is moved to a
    fresh address at its store like any spool (``Spool.in_place_address``), and the reserve
    drops files that waited half as long.  One address prefix, one directory: no
    subdirectories (nothing is renamed out of it).  Files a killed mount leaves there are
    unreferenced objects that ``lakefuse gc`` collects."""

    def __init__(self, directory: str, size: int = 0, in_place: InPlaceObjects | None = None):
        """``size``: keep that many files made ahead, always (0: from ``RESERVE_SPOOLS``,
        growing).  ``in_place``: make the files where they become objects (``directory`` is
        then its directory)."""
        self.in_place = in_place
        self.directory = directory if in_place is None else in_place.directory
        self._size = size if size > 0 else RESERVE_SPOOLS
        self._most = size if size > 0 else RESERVE_SPOOLS_MOST
        #: (path, mtime) of each file made ahead: paths only, a mount holds no descriptor for them
        self._ready: deque[tuple[str, int]] = deque()
        self._wanted = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._made = 0
        self._subdirectories: set[int] = set()
        self._last_taken = 0.0  # time.monotonic() of the last ``new``
        self._closing = threading.Event()  # wakes the thread out of its wait for quiet
        #: files made ahead that waited too long (``_expire``), for the thread to delete
        self._expired: deque[deque[tuple[str, int]]] = deque()

    def new(self) -> "Spool":
        """An empty spool: one made ahead if one waits, else made now."""
        now_ns = time.time_ns()
        while True:
            try:
                path, made_mtime_ns = self._ready.pop()  # the newest: see the class's docstring
            except IndexError:
                if self._made and self._size < self._most:  # emptied by a burst: keep more
                    self._size = min(self._size * 2, self._most)
                path, fd = self._make_file()
                made_mtime_ns = None  # just made: its mtime is the create's
                made_ns = now_ns
                break
            made_ns = made_mtime_ns
            if self.in_place is not None and now_ns - made_ns > _IN_PLACE_WAIT_NS:
                self._expire(path)  # too old to become an object where it lies, and so are the rest
                continue
            try:  # an open without O_CREAT: a few microseconds
                fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
                break
            except OSError:
                continue  # deleted by hand meanwhile: the next one
        self._last_taken = time.monotonic()
        if len(self._ready) <= self._size // 2 and not self._closed:
            self._ask_for_more()
        spool = Spool.__new__(Spool)
        spool._start(path, fd, 0)
        spool.made_mtime_ns = made_mtime_ns
        if self.in_place is not None:
            spool.in_place = self.in_place
            spool.made_ns = made_ns
        return spool

    def _expire(self, path: str) -> None:
        """``path``, the newest file waiting, is too old to be taken: so is every other one.
        The thread deletes them (once no spool is being taken): the event loop only lets go of
        them, whatever their number."""
        stale, self._ready = self._ready, deque()
        stale.append((path, 0))
        self._expired.append(stale)
        self._ask_for_more()

    def waiting(self) -> int:
        """How many spool files wait."""
        return len(self._ready)

    def size(self) -> int:
        """How many spool files the reserve keeps made ahead now."""
        return self._size

    def _ask_for_more(self) -> None:
        self._wanted.set()  # before looking for the thread: one about to stop sees it (``_fill``)
        if self._thread is None:
            with self._start_lock:
                if self._thread is None and not self._closed:
                    self._thread = threading.Thread(target=self._fill, name="lakefuse-spool-reserve",
                                                    daemon=True)
                    self._thread.start()

    def _fill(self) -> None:
        while not self._closed:
            if not self._wanted.wait(RESERVE_IDLE_SECONDS):
                with self._start_lock:  # idle: stop (the next ``new`` starts another)
                    if not self._wanted.is_set():
                        self._thread = None
                        return
                continue
            self._wanted.clear()
            while self._expired and not self._closed:
                busy_for = REFILL_QUIET_SECONDS - (time.monotonic() - self._last_taken)
                if busy_for > 0:  # spools are being taken: not now
                    self._closing.wait(busy_for)
                    continue
                stale = self._expired[0]
                self._discard(stale, EXPIRED_BATCH)  # a few at a time: a burst may begin meanwhile
                if not stale:
                    self._expired.popleft()
            while not self._closed and len(self._ready) < self._size:
                busy_for = REFILL_QUIET_SECONDS - (time.monotonic() - self._last_taken)
                if busy_for > 0:  # spools are being taken: not now (see the class's docstring)
                    self._closing.wait(busy_for)
                    continue
                self._made += 1
                try:
                    path, fd = self._make_file(self._made % RESERVE_DIRECTORIES)
                except (StorageError, OSError):
                    break  # a full disk: ``new`` makes its own and reports it
                try:
                    made_mtime_ns = os.fstat(fd).st_mtime_ns
                finally:
                    os.close(fd)
                self._ready.append((path, made_mtime_ns))
                if self._closed:  # ``close`` may have emptied the queue before this append
                    self._discard_waiting()

    def _make_file(self, subdirectory: int | None = None) -> tuple[str, int]:
        """A new empty file: in place, named as a fresh object address; else in the spool
        directory, or in its subdirectory number ``subdirectory`` (the thread's)."""
        if self.in_place is not None:
            return _create_spool_file(self.directory, self.in_place.new_name, make_directory=True)
        return _create_spool_file(self.directory if subdirectory is None else self._subdirectory(subdirectory))

    def _subdirectory(self, number: int) -> str:
        path = os.path.join(self.directory, f"ahead-{number}")
        if number not in self._subdirectories:
            os.makedirs(path, exist_ok=True)
            self._subdirectories.add(number)
        return path

    def close(self) -> None:
        """Stop making spool files and delete the waiting ones."""
        self._closed = True
        self._wanted.set()
        self._closing.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout=5)
        self._discard_waiting()

    def _discard_waiting(self) -> None:
        self._discard(self._ready)
        while self._expired:
            self._discard(self._expired.popleft())

    @staticmethod
    def _discard(files: deque[tuple[str, int]], most: int | None = None) -> None:
        """Delete the files (``most``: at most that many of them)."""
        while most is None or most > 0:
            try:
                path, _ = files.popleft()
            except IndexError:
                return
            with contextlib.suppress(OSError):
                os.unlink(path)
            if most is not None:
                most -= 1


class Spool:
    def __init__(self, directory: str):
        path, fd = _create_spool_file(directory)
        self._start(path, fd, 0)

    @classmethod
    def adopt(cls, path: str, size: int) -> "Spool":
        """A spool of the existing file ``path`` (an uncommitted object's), holding ``size``
        bytes that stay as they are: only writes at or after ``base_size`` may follow.  OSError
        if it cannot be opened or holds fewer bytes."""
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        try:
            if os.fstat(fd).st_size < size:
                raise OSError(errno.EIO, f"{path} is shorter than its entry")
            os.ftruncate(fd, size)  # bytes an interrupted earlier append left beyond the entry
        except BaseException:
            os.close(fd)
            raise
        spool = cls.__new__(cls)
        spool._start(path, fd, size)
        spool.adopted = True
        return spool

    def _start(self, path: str, fd: int, size: int) -> None:
        self.fd = fd
        self.path = path
        self.closed = False
        self._fd_closed = False  # set by ``close`` under ``_cond``, with the descriptor closed
        self.sealed = False
        #: a spool of an object's own file (``adopt``): appends only, its file is kept at close
        self.adopted = False
        #: storage took the file (``handed_over``): its path is not the spool's any more
        self._handed_over = False
        self.base_size = size
        self._size = size  # tracked (queued bytes included): asking never touches the descriptor
        #: the kernel writes into the file too (FUSE passthrough writes): its size and mtime
        #: are the file's, asked with fstat
        self.kernel_writes = False
        #: a read-write handle named the file as the kernel's backing file: a shared mapping
        #: made through it may write into the file after the handle's release (see
        #: ``held_elsewhere``)
        self.mappable = False
        #: the mtime of a file made ahead (``SpoolReserve``) when it was made: while the file
        #: still has it, nothing was written into it since (see ``write_time_ns``)
        self.made_mtime_ns: int | None = None
        #: made where it becomes an object (``SpoolReserve`` in place): where that is, and when
        #: the file was made (``time.time_ns()``)
        self.in_place: InPlaceObjects | None = None
        self.made_ns = 0
        self.listener: Callable[[int, bytes], None] | None = None
        # write-behind: (offset, bytes) in order, their total, the thread writing them, whether
        # it holds staged bytes not in the file yet, and the error that failed the spool
        self._cond = threading.Condition()
        self._queue: deque[tuple[int, bytes]] = deque()
        self._queued = 0
        self._gather = bytearray()  # small appends not queued yet (at ``_gather_offset``)
        self._gather_offset = 0
        self._writer: threading.Thread | None = None
        self._unsynced = False
        self._sync_wanted = False
        self._stopping = False
        self._failure: OSError | None = None

    def fileno(self) -> int:
        self.drain()
        return self.fd

    def read(self, offset: int, size: int) -> bytes:
        self.drain()
        return os.pread(self.fd, size, offset)

    def write(self, offset: int, data: bytes) -> int:
        self._check_writable()
        self.drain()
        done = _pwrite_all(self.fd, data, offset)
        if offset + done > self._size:
            self._size = offset + done
        if self.listener is not None:
            self.listener(offset, data)
        return done

    def write_behind(self, offset: int, data: bytes, block: bool = True) -> bool:
        """Queue ``data`` for the background writer (``data`` must not change afterwards).
        With the queue full: wait for room, or (``block=False``) return False, queueing
        nothing.  Raises the error of an earlier background write."""
        self._check_writable()
        with self._cond:
            self._check_failure()
            gather = self._gather
            piece = min(GATHER_BYTES, WRITE_BEHIND_LIMIT // 4)  # the queue's bound stays the bound
            small = len(data) < piece
            if small and (not gather or offset == self._gather_offset + len(gather)) \
                    and len(gather) + len(data) < piece:
                if not gather:
                    self._gather_offset = offset
                gather += data  # queued with the next piece (or at the next drain)
            else:
                while self._queued >= WRITE_BEHIND_LIMIT:
                    if not block:
                        return False
                    self._cond.wait()
                    self._check_failure()
                self._queue_gathered()
                if small:
                    self._gather_offset = offset
                    self._gather += data
                else:
                    self._queue_piece(offset, data)
            if offset + len(data) > self._size:
                self._size = offset + len(data)
        return True

    def _queue_gathered(self) -> None:
        """Queue the gathered small appends (under ``_cond``)."""
        if self._gather:
            gathered, self._gather = bytes(self._gather), bytearray()
            self._queue_piece(self._gather_offset, gathered)

    def _queue_piece(self, offset: int, data: bytes) -> None:
        self._queue.append((offset, data))
        self._queued += len(data)
        if self._writer is None:
            self._writer = threading.Thread(target=self._write_queued, name="lakefuse-write-behind", daemon=True)
            self._writer.start()
        self._cond.notify_all()

    def drain(self) -> None:
        """Wait until every queued byte is in the file; raise the error that failed it."""
        if self._writer is None and not self._gather:
            return
        with self._cond:
            self._queue_gathered()
            self._sync_wanted = True
            self._cond.notify_all()
            while (self._queue or self._unsynced) and self._failure is None:
                self._cond.wait()
            self._sync_wanted = False
            self._check_failure()

    def _check_failure(self) -> None:
        if self._failure is not None:
            raise OSError(self._failure.errno or errno.EIO,
                          f"writing the spool failed earlier: {self._failure.strerror}")

    def _write_queued(self) -> None:
        """The write-behind thread: queued appends into the file, in order."""
        try:
            appender = _DirectAppender(self.path, self.fd)
        except OSError:
            appender = None  # no O_DIRECT here (tmpfs): ordinary writes
        try:
            while True:
                with self._cond:
                    while not self._queue and not self._stopping and not (self._sync_wanted and self._unsynced):
                        self._cond.wait()
                    if self._queue:
                        offset, data = self._queue[0]
                    elif self._stopping:
                        return
                    else:
                        offset, data = -1, b""  # a sync
                try:
                    if offset < 0:
                        appender.sync()
                    elif appender is not None:
                        appender.append(offset, data)
                    else:
                        _pwrite_all(self.fd, data, offset)
                    listener = self.listener
                    if listener is not None and offset >= 0:
                        listener(offset, data)
                except OSError as exc:
                    with self._cond:
                        self._failure = OSError(exc.errno, exc.strerror)  # not its frames: they hold buffers
                        self._queue.clear()
                        self._gather = bytearray()
                        self._queued = 0
                        self._cond.notify_all()
                    return
                with self._cond:
                    if offset >= 0:
                        self._queue.popleft()
                        self._queued -= len(data)
                    self._unsynced = appender is not None and appender.staged > 0
                    self._cond.notify_all()
        finally:
            if appender is not None:
                appender.close()

    def truncate(self, size: int) -> None:
        self._check_writable()
        self.drain()
        if size == self._size and not self.kernel_writes:
            return  # e.g. a new spool emptied for O_TRUNC: ext4 would flush it at close for nothing
        os.ftruncate(self.fd, size)
        self._size = size

    def size(self) -> int:
        if self.kernel_writes:
            st = self._file_stat()
            if st is not None:
                return st.st_size
        return self._size

    def _file_stat(self) -> os.stat_result | None:
        """fstat of the file, or None once ``close`` closed the descriptor.  The event loop
        asks a file's size and mtime without the file's lock, while a worker thread may be
        storing and closing its spool (a RELEASE of a file bigger than what the event loop
        stores itself): ``close`` closes the descriptor under the same lock, so this never looks
        at a closed descriptor (EBADF, which ``rsync`` met as the stat of its temporary file) or
        at one the number was reused for."""
        with self._cond:
            if self._fd_closed:
                return None
            return os.fstat(self.fd)

    def write_time_ns(self, mtime_ns: int | None = None) -> int | None:
        """The time of the last write into the file (its mtime; ``mtime_ns``: one just read
        with fstat), or None if it was made ahead and nothing was written into it since: its
        mtime is then when the reserve made it, up to a minute before the file it holds was
        created."""
        if mtime_ns is None:
            st = self._file_stat()
            if st is None:  # closed: the file's mtime is what storing it recorded
                return None
            mtime_ns = st.st_mtime_ns
        return None if mtime_ns == self.made_mtime_ns else mtime_ns

    def signature(self) -> tuple[int, int, int]:
        """(size, mtime, ctime) of the file: changes with every write and truncate, by the
        kernel or through the mount (``kernel_writes``: what the mount cannot see otherwise)."""
        st = os.fstat(self.fd)
        return st.st_size, st.st_mtime_ns, st.st_ctime_ns

    def held_elsewhere(self, patience: float = HELD_PATIENCE) -> bool:
        """Whether a file other than the spool's own descriptor is open on it: the kernel's
        backing file of a passthrough handle, kept alive by a mapping made through that handle
        after the handle itself was released (a write lease is granted only to the file's only
        opener).  True too where leases cannot tell (they are disabled): the safe answer.

        The kernel sends a handle's RELEASE just before it closes the handle's backing file
        (the closing process does that on its way back from close(2)), so right after a
        RELEASE the answer may be a passing "held": asked again for up to ``patience`` s.

        An open of the file in the instant the lease is held breaks it with a signal to this
        process: ``LEASE_BREAK_SIGNAL``, which ends no process that has not asked for it (the
        kernel's default, SIGIO, ends it; the mount ignores SIGIO as well)."""
        deadline = None
        while True:
            try:
                # before each lease: giving one back resets the descriptor's signal to SIGIO
                fcntl.fcntl(self.fd, fcntl.F_SETSIG, LEASE_BREAK_SIGNAL)
                fcntl.fcntl(self.fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
            except OSError as exc:
                if exc.errno != errno.EAGAIN:
                    log.debug("no write lease on spool %s: %s", self.path, exc)
                    return True
                now = time.monotonic()
                deadline = deadline or now + patience
                if now >= deadline:
                    return True
                time.sleep(0.0002)
                continue
            fcntl.fcntl(self.fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
            return False

    def fsync(self) -> None:
        self.drain()
        os.fsync(self.fd)

    def start_writeback(self, offset: int, length: int) -> None:
        """Have the kernel start writing this range to disk now, without waiting: a later
        fsync (storing the spool) then finds little left to write.  Best effort."""
        if _sync_file_range is not None and not self.closed:
            _sync_file_range(self.fd, offset, length, _SYNC_FILE_RANGE_WRITE)

    def seal(self) -> None:
        """Before the file is moved into storage: no more writes, and ``path`` may go away."""
        self.drain()
        self.sealed = True

    def _check_writable(self) -> None:
        if self.sealed:
            raise StorageError("internal error: write to a spool whose file was handed to storage")

    def fill_from(self, reader, size: int) -> None:
        """Copy ``size`` bytes of an object (a ``DataReader``, or another spool) to the start
        of the spool."""
        self._check_writable()
        self.drain()
        source_fd = getattr(reader, "fileno", None)
        if source_fd is not None and self._size == 0:
            try:
                copy_data(source_fd(), self.fd, size)
                self._size = size
                return
            except OSError:
                os.ftruncate(self.fd, 0)  # fall back to reads
        offset = 0
        while offset < size:
            chunk = reader.read(offset, min(COPY_CHUNK, size - offset))
            if not chunk:
                break
            self.write(offset, chunk)
            offset += len(chunk)

    @property
    def address(self) -> str | None:
        """The address of the object a spool made in place is (or would be), else None."""
        return None if self.in_place is None else self.in_place.prefix + os.path.basename(self.path)

    def in_place_address(self, site: InPlaceObjects | None) -> str | None:
        """The address of the object this spool's file is where it lies, if storing it may
        give it an entry there (``SpoolReserve``, "In place"): made by ``site`` (the storing
        repository's) less than ``IN_PLACE_SECONDS`` ago, and neither handed over nor an
        adopted object's file."""
        if site is None or self.in_place is not site or self._handed_over or self.adopted:
            return None
        if time.time_ns() - self.made_ns >= _IN_PLACE_NS:
            return None
        return self.address

    def handed_over(self, size: int) -> None:
        """Storage took the file itself (moved it, or copied it and removed the path), ``size``
        bytes long: ``close`` then closes the descriptor and leaves the path alone, without a
        look at it (nor an fstat for the size: the file is an object now, it no longer grows)."""
        self._handed_over = True
        self._size = size

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        writer = self._writer
        if writer is not None:
            with self._cond:
                self._stopping = True
                self._queue.clear()  # the spool is going away: its queued bytes with it
                self._gather = bytearray()
                self._queued = 0
                self._cond.notify_all()
            writer.join()
        try:
            ours = (not self.adopted and not self._handed_over
                    and (not self.sealed or _names_file(self.path, os.fstat(self.fd))))
        except OSError:
            ours = False
        try:
            with self._cond:  # see ``_file_stat``
                if self.kernel_writes and not self._handed_over:  # what ``size`` answers from now on
                    with contextlib.suppress(OSError):
                        self._size = os.fstat(self.fd).st_size
                self._fd_closed = True
                os.close(self.fd)
        finally:
            if ours:
                try:
                    os.unlink(self.path)
                except OSError:
                    pass


def _names_file(path: str, st: os.stat_result) -> bool:
    try:
        at_path = os.lstat(path)
    except OSError:
        return False
    return (at_path.st_dev, at_path.st_ino) == (st.st_dev, st.st_ino)


class SpoolTail:
    """A spool's bytes, from the start, for a background thread running ``consume(stream)``
    (hashing, or a streaming upload) while the file is still being appended to: the first
    ``available`` bytes are read from the file, the rest arrive through ``feed`` (the spool's
    listener) as they are written, straight from memory.  ``finish()`` ends the stream and
    returns what ``consume`` returned (``consumed`` bytes were read); ``abort()`` makes the
    stream fail (a write that was not an append, a truncate, an unlink), and the caller then
    stores the spool the ordinary way."""

    def __init__(self, spool: Spool, available: int, consume, name: str = "lakefuse-spool-tail"):
        self._spool = spool
        self._cond = threading.Condition()
        self._in_file = available  # bytes to read from the file first
        self._fed_end = available  # where the next fed bytes must start
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._position = 0
        self._finished = False
        self._aborted = False
        self.result = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(consume,), name=name, daemon=True)
        self._thread.start()

    @property
    def consumed(self) -> int:
        return self._position

    # the stream ``consume`` reads ---------------------------------------------------------

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        if self._position < self._in_file:
            length = self._in_file - self._position
            if size is not None and size >= 0:
                length = min(size, length)
            data = os.pread(self._spool.fd, length, self._position)
            if not data:
                raise StorageError("spool tail: the spool is shorter than it was")
            self._position += len(data)
            return data
        with self._cond:
            while not self._aborted and not self._chunks and not self._finished:
                self._cond.wait()
            if self._aborted:
                raise StorageError("spool tail abandoned: the file changed other than by appending")
            if not self._chunks:
                return b""
            chunk = self._chunks[0]
            if size is None or size < 0 or size >= len(chunk):
                self._chunks.popleft()
                data = chunk
            else:
                data, self._chunks[0] = chunk[:size], chunk[size:]
            self._buffered -= len(data)
            self._position += len(data)
            self._cond.notify_all()
        return data

    # the writer's side ----------------------------------------------------------------

    def feed(self, offset: int, data: bytes) -> None:
        """Bytes written at ``offset``: queued for the consumer if they continue the stream
        (waits while the consumer is ``TAIL_BUFFER_LIMIT`` behind), else the stream fails."""
        with self._cond:
            if self._aborted or self._finished:
                return
            if offset != self._fed_end:
                self._aborted = True
                self._cond.notify_all()
                return
            while self._buffered >= TAIL_BUFFER_LIMIT and not self._aborted:
                self._cond.wait()
            self._chunks.append(bytes(data))  # no copy of the bytes the mount queued
            self._buffered += len(data)
            self._fed_end += len(data)
            self._cond.notify_all()

    def finish(self):
        with self._cond:
            self._finished = True
            self._cond.notify_all()
        self._thread.join()
        if self.error is not None:
            raise self.error
        return self.result

    def abort(self) -> None:
        with self._cond:
            self._aborted = True
            self._cond.notify_all()
        self._thread.join()

    def _run(self, consume) -> None:
        try:
            self.result = consume(self)
        except BaseException as exc:  # noqa: BLE001 - reported by finish()
            self.error = exc
        finally:
            with self._cond:  # whatever happened, nobody feeds a stream that nobody reads
                self._aborted = self._aborted or self.error is not None
                self._chunks.clear()
                self._buffered = 0
                self._cond.notify_all()
