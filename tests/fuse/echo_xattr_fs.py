"""A tiny pyfuse3 filesystem for tests of the binding itself: one file ``f`` whose every
extended attribute reads ``python:<name>``, answered by its getxattr handler, with
``refused_xattr_prefixes = (b"security.",)``, except two names: ``user.spin`` reads how long
the session loop polls for the next request (``pyfuse3.request_spin_ns()``, asked for with
``spin_wait_ns`` from $ECHO_SPIN_NS), and ``user.slow`` reads ``slow`` after 5 ms in a worker
thread.  Run as ``python echo_xattr_fs.py MOUNTPOINT``; serves until unmounted."""

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

    async def getattr(self, inode, ctx=None):
        attrs = pyfuse3.EntryAttributes()
        attrs.st_ino = inode
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
        if name == b"user.slow":
            await trio.to_thread.run_sync(time.sleep, 0.005)
            return b"slow"
        return b"python:" + name


def main(mountpoint: str) -> None:
    pyfuse3.init(EchoXattrs(), mountpoint, {"fsname=echo-xattrs"})
    try:
        trio.run(pyfuse3.main)
    finally:
        pyfuse3.close(unmount=True)


if __name__ == "__main__":
    main(sys.argv[1])
