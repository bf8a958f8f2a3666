"""``KernelBackingFiles``: registering local files with the kernel for FUSE passthrough.

Owns the two ioctls of ``/dev/fuse`` (Linux >= 6.9): ``FUSE_DEV_IOC_BACKING_OPEN`` turns an open
descriptor into a backing ID that an open reply may name (the kernel then reads, and for a file
registered writable also writes, the file itself: no READ or WRITE request reaches the daemon),
``FUSE_DEV_IOC_BACKING_CLOSE`` forgets it.  Which opens may
use one is decided by ``lakefuse.fs.passthrough``; this module only talks to the kernel.

Needs pyfuse3 as built by ``scripts/build_pyfuse3.py`` (``passthrough_session_fd``,
``FileInfo.backing_id``), a kernel that granted passthrough in FUSE_INIT, and CAP_SYS_ADMIN.
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct

import pyfuse3

_FUSE_DEV_IOC_MAGIC = 229


def _iow(number: int, size: int) -> int:
    return (1 << 30) | (size << 16) | (_FUSE_DEV_IOC_MAGIC << 8) | number


#: struct fuse_backing_map { int32 fd; uint32 flags; uint64 padding; }
_BACKING_MAP = struct.Struct("=iIQ")
FUSE_DEV_IOC_BACKING_OPEN = _iow(1, _BACKING_MAP.size)
FUSE_DEV_IOC_BACKING_CLOSE = _iow(2, 4)


_CAP_SYS_ADMIN = 21


def has_cap_sys_admin() -> bool:
    """Whether this process may register backing files (the kernel asks for CAP_SYS_ADMIN)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> _CAP_SYS_ADMIN & 1)
    except OSError:
        pass
    return False


def granted_session_fd() -> int:
    """The session's /dev/fuse descriptor if the kernel granted passthrough in FUSE_INIT,
    else -1 (also with a stock pyfuse3, which has no passthrough)."""
    probe = getattr(pyfuse3, "passthrough_session_fd", None)
    return -1 if probe is None else probe()


class KernelBackingFiles:
    """``open(path) -> backing ID``, ``register(fd) -> backing ID`` and ``close(backing ID)`` on
    one FUSE session."""

    def __init__(self, session_fd: int):
        self._session_fd = session_fd

    def open(self, path: str, size: int | None = None, read_ahead: int = 0) -> int:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:  # the kernel keeps its own reference to the file
            if size is not None and os.fstat(fd).st_size != size:
                raise OSError(errno.ESTALE, f"{path} is not {size} bytes long")
            if read_ahead > 0:  # queues the reads, does not wait for them; the same page cache
                os.posix_fadvise(fd, 0, read_ahead, os.POSIX_FADV_WILLNEED)
            return self.register(fd)
        finally:
            os.close(fd)

    def register(self, fd: int) -> int:
        """The file open as ``fd`` (the kernel writes through it if it is open for writing)."""
        backing_id = fcntl.ioctl(self._session_fd, FUSE_DEV_IOC_BACKING_OPEN,
                                 bytearray(_BACKING_MAP.pack(fd, 0, 0)), True)
        if backing_id <= 0:
            raise OSError(errno.EIO, "the kernel returned no backing ID")
        return backing_id

    def close(self, backing_id: int) -> None:
        fcntl.ioctl(self._session_fd, FUSE_DEV_IOC_BACKING_CLOSE, bytearray(struct.pack("=I", backing_id)), True)
