"""Open handles of a mount: the typed state behind each ``fh`` the kernel holds.

Owns ``HandleTable`` (fh -> handle) and the kinds of handle: ``FileHandle`` (one open(2) of a
file: reads the object it opened, or the file's spool once there is one; writes if
``writable``), ``ControlHandle`` (one open of a ``.lakefuse`` file: the message written so
far, the text being read) and ``DirHandle`` (one opendir: how far its listing got).  Also
``OpenFile``, what every handle of one file shares: its spool, whether it holds changes not
uploaded yet, and the metadata an upload stores.

Each handle names the part that serves it (``ops``, a ``HandleOps``, as a kernel ``struct
file`` names its ``file_operations``): a request on a handle goes straight to that code, with
no test of the handle's type on the way, and a request a kind of handle does not support gets
the ``HandleOps`` default (EBADF, or WouldBlock for the ``_nowait`` calls).
"""

from __future__ import annotations

import errno
import threading
import time
from collections import deque

from lakefuse.fs.attributes import entry_mtime_ns
from lakefuse.fs.native_reads import NativeReads, stop_all
from lakefuse.fs.nodes import Node
from lakefuse.fs.passthrough import PassthroughState
from lakefuse.fs.replies import WouldBlock
from lakefuse.fs.spool import Spool, SpoolTail
from lakefuse.graveler.model import Entry

#: how long an upload waits for the RELEASE of a kernel-written file's closed descriptors
#: (``OpenFile.await_kernel_release``): the kernel sends it as close(2) returns
RELEASE_WAIT = 0.25


class HandleOps:
    """The requests on a handle; a part serving a kind of handle overrides what it supports."""

    def read(self, h, offset: int, size: int) -> bytes:
        raise OSError(errno.EBADF, "bad file handle")

    def read_nowait(self, h, offset: int, size: int, buffer: bytearray):
        raise WouldBlock

    def write(self, h, offset: int, data: bytes) -> int:
        raise OSError(errno.EBADF, "bad file handle")

    def write_nowait(self, h, offset: int, data: bytes) -> int:
        raise WouldBlock

    def sync(self, h, any_descriptor: bool) -> None:
        """flush (close of a descriptor: ``any_descriptor`` False) or fsync (True)."""

    def flush_nowait(self, h) -> None:
        """``sync(h, False)`` if it costs only a few local system calls, else WouldBlock."""
        raise WouldBlock
    def release(self, h) -> None:
        """The handle was taken out of the table: nothing else refers to it."""

    def release_nowait(self, h) -> None:
        """``release(h)`` if it costs only a few local system calls (the handle is still in the
        table: the caller takes it out if this returns), else WouldBlock."""
        raise WouldBlock

    def readdir(self, h, offset: int, add, blocking: bool, add_name=None, caller: int = 0) -> None:
        raise OSError(errno.EBADF, "not a directory handle")


class Handle:
    __slots__ = ("ops", "node", "fh")

    def __init__(self, ops: HandleOps, node: Node):
        self.ops = ops
        self.node = node
        self.fh: int | None = None  # given by ``HandleTable.add``


class OpenFile:
    """The shared state of every open handle of one file node."""

    __slots__ = ("node", "lock", "handles", "_spool", "native_reads", "dirty", "entry", "mtime_ns", "metadata",
                 "content_type", "mtime_explicit", "seq_end", "tail", "uncached_writes", "passthrough",
                 "direct_handles", "unsynced", "owned", "kernel_writers", "kernel_closed", "kernel_signature",
                 "released", "spool_mappers")

    def __init__(self, node: Node, entry: Entry | None):
        self.node = node
        self.lock = threading.RLock()
        self.handles = 0
        #: handles whose reads the FUSE binding answers: fh -> its registry (see ``spool``)
        self.native_reads: dict[int, NativeReads] = {}
        self._spool: Spool | None = None
        self.dirty = False
        if entry is not None:
            self.take_entry(entry)
        else:  # a new file
            self.entry: Entry | None = None  # the object a spool starts from (the latest one opened)
            self.metadata: dict[str, str] = {}
            self.content_type: str | None = None
            self.mtime_ns = time.time_ns()
        self.mtime_explicit = False  # mtime_ns was set by utime (stored with the next upload)
        self.seq_end: int | None = None  # end of the bytes appended in order to an empty spool
        self.tail: SpoolTail | None = None  # hashing, or streaming upload, of those bytes
        self.uncached_writes = False  # written through a direct-I/O handle since the last upload
        self.passthrough = PassthroughState()
        self.direct_handles = 0  # open handles with direct I/O (see Files._new_file_handle)
        self.unsynced = False  # last uploaded without ``durable``: an fsync(2) must sync storage
        self.owned = None  # the record of the object whose own file ``spool`` is (Spool.adopt)
        #: open handles whose writes the kernel makes into ``spool`` itself (passthrough
        #: writes): while there are any, the file may change without the mount seeing it
        self.kernel_writers = 0
        #: how many of those were closed: a FLUSH came (a stock pyfuse3 sends one at every
        #: close(2); their RELEASE is on its way, unless a dup(2) is still open), or their
        #: RELEASE came and is being served (``Files.release_nowait``)
        self.kernel_closed = 0
        #: notified under ``lock`` when a handle is released
        self.released = threading.Condition(self.lock)
        #: open read-write handles naming ``spool`` as the backing file (they may map it)
        self.spool_mappers = 0
        #: ``spool.signature()`` when its bytes were last stored (None: not since it was made)
        self.kernel_signature: tuple[int, int, int] | None = None

    def take_entry(self, entry: Entry) -> None:
        """The file is now ``entry`` (opened, or its metadata changed): a spool starts from its
        bytes, and its metadata, content type and mtime are the entry's."""
        self.entry = entry
        self.metadata = dict(entry.metadata)
        self.content_type = entry.content_type
        self.mtime_ns = entry_mtime_ns(entry)

    @property
    def spool(self) -> Spool | None:
        """The file's bytes being written (None: the object ``entry``).  Setting one first takes
        back the handles whose reads the FUSE binding answers from the object
        (``lakefuse.fs.native_reads``): from now on the file's bytes may differ."""
        return self._spool

    @spool.setter
    def spool(self, spool: Spool | None) -> None:
        self._spool = spool
        if spool is not None and self.native_reads:
            stop_all(self)

    def size(self) -> int:
        if self.spool is not None:
            return self.spool.size()
        return self.entry.size if self.entry is not None else 0

    def kernel_may_change_spool(self) -> bool:
        """Whether the kernel may change ``spool`` without the mount seeing it (the file must
        then be stored again later): a handle it writes for is open, a read-write handle names
        the spool as the file's backing file, or a mapping made through such a handle may
        outlive it (``lakefuse.fs.mapped``).  The kernel maps a file in passthrough mode
        through that backing file, whatever handle the mmap(2) came through, so a shared
        writable mapping writes into the spool itself."""
        spool = self.spool
        if spool is None or not spool.kernel_writes or spool.sealed:
            return False
        return self.kernel_writers > 0 or self.spool_mappers > 0 or (spool.mappable and spool.held_elsewhere())

    def spool_is_backing(self) -> bool:
        """Whether a handle names ``spool`` as the file's backing file.  Every later open of
        the file must name it too, and an mmap(2) through any of them maps it, so storing the
        file then stores a copy and the spool stays the file's: moved into storage, it would
        be a stored object that such a mapping changes, and the file would be backed by a file
        that is no longer its own (a mapping faults past the object's end)."""
        spool = self.spool
        return spool is not None and self.passthrough.backing_id != 0 and self.passthrough.path == spool.path

    def await_kernel_release(self, timeout: float) -> bool:
        """For a file the kernel writes whose every writing descriptor was closed already
        (``kernel_closed``), wait up to ``timeout`` s (under ``lock``, never on the event loop)
        for those releases, which store the spool.  Whether they came and left nothing to
        store."""
        if self.kernel_writers == 0 or self.kernel_closed < self.kernel_writers:
            return False
        self.released.wait_for(lambda: self.kernel_writers == 0, timeout=timeout)
        return self.kernel_writers == 0 and not self.dirty

    def current_mtime_ns(self) -> int:
        """The file's mtime: a spool the kernel writes into has the time of its last write
        (unless a utime set one since)."""
        spool = self.spool
        if spool is not None and spool.kernel_writes and not spool.sealed and not self.mtime_explicit:
            written = spool.write_time_ns()
            if written is not None:
                return written
        return self.mtime_ns


class FileHandle(Handle):
    """One open(2): reads the object it opened (``entry``) until the file gets a spool.
    ``direct_io``: the kernel sends this handle's writes without keeping them in its page
    cache (see ``lakefuse.fs.files.writes_from_empty_only``); ``passthrough``: the handle
    names its file's backing file (see ``lakefuse.fs.passthrough``); ``kernel_writes``: that
    backing file is the file's spool, and the kernel writes into it itself."""

    __slots__ = ("open_file", "writable", "entry", "reader", "lock", "direct_io", "passthrough", "kernel_writes",
                 "maps_spool", "closed", "shares")

    def __init__(self, ops: HandleOps, open_file: OpenFile, writable: bool, entry: Entry | None,
                 direct_io: bool = False):
        super().__init__(ops, open_file.node)
        self.open_file = open_file
        self.writable = writable
        self.entry = entry
        self.reader = None
        self.lock = threading.Lock()
        self.direct_io = direct_io
        self.passthrough = False
        self.kernel_writes = False
        self.maps_spool = False  # read-write, naming the spool as backing file: it may map it
        self.closed = False  # a FLUSH came: a descriptor of it was closed
        #: how many kernel handles this one stands for: more than one for the handles of a
        #: branch file the FUSE binding opened and handed over (``Files.take_native_handles``)
        self.shares = 1


class ControlHandle(Handle):
    """One open of a ``.lakefuse`` file: what was written (a commit message) and the text a
    read started (kept while the reader goes on from offsets past 0)."""

    __slots__ = ("written", "dirty", "snapshot")

    def __init__(self, ops: HandleOps, node: Node):
        super().__init__(ops, node)
        self.written = bytearray()
        self.dirty = False
        self.snapshot: bytes | None = None


class DirHandle(Handle):
    """One opendir: the listing so far (see ``lakefuse.fs.readdir``)."""

    __slots__ = ("static", "emitted", "names", "buffer", "after", "exhausted", "extras_done", "lock", "opened",
                 "kernel_token")

    def __init__(self, ops: HandleOps, node: Node):
        super().__init__(ops, node)
        self.static: list[tuple[str, Node]] | None = None  # small listings, computed at once
        #: position -> (key to resume after, name); key None: '.', '..' or a file being written
        self.emitted: list[tuple[str | None, str]] = []
        self.names: set[str] = set()
        self.buffer: deque = deque()
        self.after = ""
        self.exhausted = False
        self.extras_done = False
        self.lock = threading.Lock()
        self.opened = time.monotonic()  # files staged since may be missing from its pages
        #: a branch listing served to the kernel from its start (``Tree.listing_for_kernel``)
        self.kernel_token: object | None = None


class HandleTable:
    """fh -> handle; thread-safe (the mount's lock for changes, none for reads)."""

    def __init__(self, lock: threading.Lock):
        self._lock = lock
        self._handles: dict[int, Handle] = {}
        self._next_fh = 1
        #: ``get(fh)``: the handle or None; a plain dict read (every read and write asks)
        self.get = self._handles.get

    def add(self, handle: Handle) -> int:
        with self._lock:
            fh = self._next_fh
            self._next_fh += 1
            self._handles[fh] = handle
            handle.fh = fh
            return fh

    def put(self, fh: int, handle: Handle) -> None:
        """``handle`` under a number the table did not give (a handle the FUSE binding opened:
        ``lakefuse.fs.native_answers``)."""
        with self._lock:
            self._handles[fh] = handle
            handle.fh = fh

    def pop(self, fh: int) -> Handle | None:
        with self._lock:
            return self._handles.pop(fh, None)

    def all(self) -> list[Handle]:
        """Every open handle (a copy)."""
        with self._lock:
            return list(self._handles.values())
