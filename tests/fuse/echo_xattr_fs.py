"""A tiny pyfuse3 filesystem for tests of the binding itself: one file ``f`` whose every
extended attribute reads ``python:<name>``, answered by its getxattr handler, with
``refused_xattr_prefixes = (b"security.",)``, except two names: ``user.spin`` reads how long
the session loop polls for the next request (``pyfuse3.request_spin_ns()``, asked for with
``spin_wait_ns`` from $ECHO_SPIN_NS), and ``user.slow`` reads ``slow`` after 5 ms in a worker
thread.  ``f`` opens with direct I/O (every read(2) is a READ) and its read handler answers
``handler``; with $ECHO_NATIVE_FILE set, each open also registers that file for the binding to
answer READs from (``pyfuse3.native_read_add``), ``user.native`` reads how many READs it
answered, and setting ``user.native-off`` takes every handle back (``native_read_remove``).
Run as ``python echo_xattr_fs.py MOUNTPOINT``; serves until unmounted."""

from __future__ import annotations

import errno
import os
import stat
import sys
import time

import pyfuse3
import trio

FILE_INODE = pyfuse3.ROOT_INODE + 1


class EchoXattrs(pyfuse3.Operations):
    refused_xattr_prefixes = (b"security.",)
    spin_wait_ns = int(os.environ.get("ECHO_SPIN_NS", "0"))

    def __init__(self):
        super().__init__()
        self.native_path = os.environ.get("ECHO_NATIVE_FILE")
        self.open_fhs: dict[int, int] = {}  # fh -> descriptor of the native file

    async def getattr(self, inode, ctx=None):
        attrs = pyfuse3.EntryAttributes()
        attrs.st_ino = inode
        attrs.st_size = 0 if inode == pyfuse3.ROOT_INODE else 4096
        attrs.st_mode = (stat.S_IFDIR | 0o755) if inode == pyfuse3.ROOT_INODE else (stat.S_IFREG | 0o644)
        attrs.entry_timeout = attrs.attr_timeout = 60
        return attrs

    async def lookup(self, parent_inode, name, ctx=None):
        if parent_inode != pyfuse3.ROOT_INODE or name != b"f":
            raise pyfuse3.FUSEError(errno.ENOENT)
        return await self.getattr(FILE_INODE)

    async def getxattr(self, inode, name, ctx):
        if name == b"user.spin":
            return str(pyfuse3.request_spin_ns()).encode()
        if name == b"user.native":
            return str(pyfuse3.native_reads_answered()).encode()
        if name == b"user.slow":
            await trio.to_thread.run_sync(time.sleep, 0.005)
            return b"slow"
        return b"python:" + name

    async def setxattr(self, inode, name, value, ctx):
        if name != b"user.native-off":
            raise pyfuse3.FUSEError(errno.ENOTSUP)
        for fh in self.open_fhs:
            pyfuse3.native_read_remove(fh)

    async def open(self, inode, flags, ctx):
        fh = len(self.open_fhs) + 1
        self.open_fhs[fh] = -1
        if self.native_path:
            fd = self.open_fhs[fh] = os.open(self.native_path, os.O_RDONLY)
            pyfuse3.native_read_add(fh, fd, os.fstat(fd).st_size)
        return pyfuse3.FileInfo(fh=fh, direct_io=True)

    async def read(self, fh, offset, size):
        return b"handler"[offset:offset + size]

    async def release(self, fh):
        pyfuse3.native_read_remove(fh)
        fd = self.open_fhs.get(fh, -1)
        if fd >= 0:
            os.close(fd)


def main(mountpoint: str) -> None:
    pyfuse3.init(EchoXattrs(), mountpoint, {"fsname=echo-xattrs"})
    try:
        trio.run(pyfuse3.main)
    finally:
        pyfuse3.close(unmount=True)


if __name__ == "__main__":
    main(sys.argv[1])
