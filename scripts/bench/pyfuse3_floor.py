"""The floor of any pyfuse3 filesystem on this machine: a trivial one whose directory ``dir``
holds ``--files`` names (``f000000.csv`` ...) answered from a dict, with no work per request
beyond building the reply.  mount_stat.py runs it beside lakefuse: the gap between the two is
what lakefuse itself costs per request; the gap to rclone/bindfs is the binding's.

With ``--dirs D``, ``dir`` holds D directories ``part=NNNN`` of ``--files`` names each instead
(listings.py walks it: the cost of a READDIRPLUS listing through pyfuse3 and the kernel, with
nothing behind it but one ``EntryAttributes`` per entry).

With ``--data PATH`` it also shows that file's bytes as ``data.bin`` at the root, read with
pread and kept in the kernel's page cache (keep_cache), as lakefuse does for a commit's
objects: mount_read.py re-reads it to measure what the kernel's FUSE page cache itself gives.

    python scripts/bench/pyfuse3_floor.py MOUNTPOINT [--files 10000] [--dirs 0] [--data PATH]
"""

from __future__ import annotations

import argparse
import errno
import os
import stat

import pyfuse3
import trio

DIR_INODE = 2
DATA_INODE = 1 << 40  # far above the names' inodes
DATA_NAME = b"data.bin"


class Floor(pyfuse3.Operations):
    def __init__(self, files: int, data: str | None = None, dirs: int = 0):
        super().__init__()
        self.dirs = dirs
        self.files = files
        if dirs:  # dir/part=NNNN (inodes DIR_INODE + 1 ...), then their files (inodes from _first_file)
            self.names = [f"part={d:04d}".encode() for d in range(dirs)]
            self._first_file = DIR_INODE + 1 + dirs
        else:
            self.names = [f"f{i:06d}.csv".encode() for i in range(files)]
        self.inodes = {name: DIR_INODE + 1 + i for i, name in enumerate(self.names)}
        self.data_fd = os.open(data, os.O_RDONLY) if data else None

    def _is_dir(self, inode: int) -> bool:
        return inode <= DIR_INODE or (self.dirs and inode < self._first_file)

    def _attrs(self, inode: int) -> pyfuse3.EntryAttributes:
        entry = pyfuse3.EntryAttributes()
        entry.st_ino = inode
        is_dir = self._is_dir(inode)
        entry.st_mode = (stat.S_IFDIR | 0o755) if is_dir else (stat.S_IFREG | 0o644)
        entry.st_size = 0 if is_dir else 100
        if inode == DATA_INODE:
            entry.st_size = os.fstat(self.data_fd).st_size
            entry.st_blksize = 1024 * 1024
        entry.entry_timeout = entry.attr_timeout = 86400
        return entry

    async def getattr(self, inode, ctx=None):
        return self._attrs(inode)

    async def lookup(self, parent_inode, name, ctx=None):
        if parent_inode == pyfuse3.ROOT_INODE and name == b"dir":
            return self._attrs(DIR_INODE)
        if parent_inode == pyfuse3.ROOT_INODE and name == DATA_NAME and self.data_fd is not None:
            return self._attrs(DATA_INODE)
        inode = self.inodes.get(name) if parent_inode == DIR_INODE else None
        if inode is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return self._attrs(inode)

    async def opendir(self, inode, ctx):
        return inode

    async def readdir(self, fh, start_id, token):
        if self.dirs and DIR_INODE < fh < self._first_file:  # dir/part=NNNN: its files
            first = self._first_file + (fh - DIR_INODE - 1) * self.files
            for i in range(start_id, self.files):
                inode = first + i
                if not pyfuse3.readdir_reply(token, b"f%07d.txt" % (inode - self._first_file), self._attrs(inode), i + 1):
                    return
            return
        names = [b"dir"] if fh == pyfuse3.ROOT_INODE else self.names
        for i in range(start_id, len(names)):
            inode = DIR_INODE if fh == pyfuse3.ROOT_INODE else self.inodes[names[i]]
            if not pyfuse3.readdir_reply(token, names[i], self._attrs(inode), i + 1):
                return

    async def getxattr(self, inode, name, ctx):
        raise pyfuse3.FUSEError(errno.ENOTSUP)

    async def open(self, inode, flags, ctx):
        if inode != DATA_INODE:
            raise pyfuse3.FUSEError(errno.EISDIR)
        return pyfuse3.FileInfo(fh=inode, keep_cache=True)

    async def read(self, fh, off, size):
        return os.pread(self.data_fd, size, off)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mountpoint")
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--dirs", type=int, default=0, help="dir/ holds this many directories of --files names")
    parser.add_argument("--data", default=None, help="a file to show as data.bin")
    args = parser.parse_args()
    pyfuse3.init(Floor(args.files, args.data, args.dirs), args.mountpoint, {"fsname=pyfuse3-floor", "default_permissions"})
    try:
        trio.run(pyfuse3.main)
    finally:
        pyfuse3.close(unmount=True)


if __name__ == "__main__":
    main()
