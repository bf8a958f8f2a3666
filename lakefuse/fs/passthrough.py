"""Passthrough: which opens of a file the kernel serves by reading a local file itself.

An object of a storage namespace on this machine is an immutable local file.  With FUSE
passthrough the kernel reads such a file directly: no READ request reaches the mount, and the
bytes are cached once, in the local filesystem's page cache (in large folios, where a FUSE
file's own page cache holds 4 KiB pages), so reads run at the speed of reading the file itself.

The kernel's rules shape the bookkeeping here (Linux ``fs/fuse/iomode.c``):

- an inode is either in *cached* mode (opens without passthrough or direct I/O) or in
  *passthrough* mode (one backing file, shared by every open), never both;
- while it is in passthrough mode every open must name that same backing file, or it fails
  with EIO; ``direct_io`` on such an open sends its reads and writes to the mount after all.

So, per open file (``PassthroughState``, one per ``OpenFile``):

- a read-only open of an unmodified object with a local file, when no other handle of the file
  is open, registers that file (``BackingFiles.open``) and is served by the kernel;
- while a backing file is registered, every further open names it: a read of the same object
  is served by the kernel too; anything else (a write, a truncate, a read after the object
  changed) gets ``direct_io`` and is served by the mount as usual;
- the backing file is released (``BackingFiles.close``) with the last handle that named it.

RELEASE is asynchronous: the kernel leaves the inode's mode at close(2), and its RELEASE reaches
the mount later, possibly after the next OPEN.  The counts here therefore only ever lag behind
the kernel's (a handle the mount still counts may be closed there, never the other way round),
and each answer is one the kernel accepts either way: while any handle that named the backing
file is still counted, the kernel may hold it, so every open names it (and it stays registered,
so the kernel can also take it up afresh); a new backing file, or an open without passthrough,
only when the mount counts no such handle, when the kernel holds none either.  No answer is
safe without that count: the kernel refuses an open without passthrough while it holds a
backing file, ``direct_io`` or not (``fuse_file_io_open``), and one naming another backing file.
That needs every handle of the file counted in the same ``PassthroughState`` (its
``OpenFile``), also an OPEN served while the RELEASE of the file's last handle is
(``lakefuse.fs.files.Files._join_open_file``).

A handle served by the kernel reads the bytes it opened until it is closed, even if the file is
written meanwhile through another handle, as with any object a handle opened before the change.

Writes (``open_for_writes``): a lone open (write-only or read-write, not appending) that
creates or truncates a file on a branch whose storage is on this machine registers the file's
*spool* (``lakefuse.fs.spool``) read-write, and the kernel writes into it itself: ``dd bs=4k``,
Hadoop's 4.6 KiB pieces, ``cp`` and ``mkstemp`` files run at the local disk's speed, with no
WRITE request reaching the mount.  Every later open of the file names the spool too (with
``direct_io``: the mount serves it, from the same spool, so it reads the newest bytes), and an
mmap(2) through any of them maps the spool itself, also after the handle is released: so the
spool stays the file's while anything may still write into it (``OpenFile.kernel_may_change_spool``,
``lakefuse.fs.mapped``).  What the mount makes of such a spool (its size from fstat, a copy
stored while the kernel may still write) is ``lakefuse.fs.uploads``'s.
"""

from __future__ import annotations

import errno
import logging
from dataclasses import dataclass
from typing import NamedTuple, Protocol

log = logging.getLogger(__name__)

#: errors of registering a backing file that mean this mount cannot use passthrough at all
_UNSUPPORTED = {errno.EPERM, errno.ENOTTY, errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS}


class BackingFiles(Protocol):
    """The kernel side (``lakefuse.fuse.passthrough.KernelBackingFiles``)."""

    def open(self, path: str, size: int | None = None, read_ahead: int = 0) -> int:
        """Register the file at ``path`` for reading; its backing ID (> 0).  OSError on failure,
        ESTALE if ``size`` is given and the file is not that size.  ``read_ahead``: have the
        kernel start reading that many of its first bytes in, without waiting for them."""

    def register(self, fd: int) -> int:
        """Register the file open as ``fd`` (read-write: the kernel also writes into it); its
        backing ID (> 0).  OSError on failure."""

    def close(self, backing_id: int) -> None: ...


@dataclass(slots=True)
class PassthroughState:
    """The backing file registered for one open file, and how many handles name it."""

    backing_id: int = 0
    path: str | None = None
    handles: int = 0


class Grant(NamedTuple):
    """What an open answers: ``backing_id`` (0: none) and whether the mount must still serve
    the handle's reads and writes (``direct_io``)."""

    backing_id: int = 0
    direct_io: bool = False


NO_GRANT = Grant()


class Passthrough:
    """Decides and records passthrough for opens; thread-safe under the caller's per-file lock."""

    def __init__(self, backings: BackingFiles):
        self._backings = backings
        self.enabled = True

    def open(self, state: PassthroughState, local_file: str | None, *, alone: bool,
             size: int | None = None, read_ahead: int = 0) -> Grant:
        """A new handle of a file.  ``local_file``: the immutable local file holding exactly the
        bytes this handle reads, or None (a write, a changed or remote object); ``alone``: no
        other handle of the file is open; ``size``: the object's size, which the local file
        must have (an append in place cut short leaves it longer: the kernel would read past
        the object); ``read_ahead``: how many of its first bytes to have the kernel start
        reading in when it registers the file: the reader's first read(2) then usually finds
        them cached or on their way instead of starting the disk read itself (a cold
        ``find | xargs cat`` of 4,000 small commit files took a third less time)."""
        if state.backing_id:
            state.handles += 1
            return Grant(state.backing_id, direct_io=local_file is None or local_file != state.path)
        if local_file is None or not alone or not self.enabled:
            return NO_GRANT
        return self._register(state, local_file, lambda: self._backings.open(local_file, size, read_ahead), "reads")

    def open_for_writes(self, state: PassthroughState, spool_path: str, spool_fd: int) -> Grant:
        """The file's only handle, which writes from empty: the kernel writes into the spool
        (``spool_fd``, open read-write, at ``spool_path``) itself, or NO_GRANT (the mount
        serves the handle as usual)."""
        if state.backing_id or not self.enabled:
            return NO_GRANT
        return self._register(state, spool_path, lambda: self._backings.register(spool_fd), "writes")

    def _register(self, state: PassthroughState, path: str, register, what: str) -> Grant:
        """The first handle's grant: ``register()`` the backing file, or NO_GRANT (an error that
        means the mount cannot use passthrough at all turns it off)."""
        try:
            backing_id = register()
        except OSError as exc:
            if exc.errno in _UNSUPPORTED:
                self.enabled = False
                log.warning("passthrough disabled for this mount: %s", exc)
            else:
                log.debug("no passthrough %s of %s: %s", what, path, exc)
            return NO_GRANT
        log.debug("the kernel %s %s itself (backing file %d)", what, path, backing_id)
        state.backing_id, state.path, state.handles = backing_id, path, 1
        return Grant(backing_id)

    def release(self, state: PassthroughState) -> None:
        """A handle that named the backing file is closed."""
        state.handles -= 1
        if state.handles > 0 or not state.backing_id:
            return
        backing_id, state.backing_id, state.path = state.backing_id, 0, None
        try:
            self._backings.close(backing_id)
        except OSError as exc:
            log.warning("releasing backing file %d: %s", backing_id, exc)
