"""A tiny pyfuse3 filesystem for tests of the binding itself: one file ``f`` whose every
extended attribute reads ``python:<name>``, answered by its getxattr handler, with
``refused_xattr_prefixes = (b"security.",)``.  Run as ``python echo_xattr_fs.py MOUNTPOINT``;
serves until unmounted."""

from __future__ import annotations

import errno
import stat
import sys

import pyfuse3
import trio

FILE_INODE = pyfuse3.ROOT_INODE + 1


class EchoXattrs(pyfuse3.Operations):
    refused_xattr_prefixes = (b"security.",)

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
        return b"python:" + name


def main(mountpoint: str) -> None:
    pyfuse3.init(EchoXattrs(), mountpoint, {"fsname=echo-xattrs"})
    try:
        trio.run(pyfuse3.main)
    finally:
        pyfuse3.close(unmount=True)


if __name__ == "__main__":
    main(sys.argv[1])
