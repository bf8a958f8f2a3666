"""The floor of a pyfuse3 filesystem over local files: a read-write mirror of a local directory
that does nothing per request but the one system call it stands for (``os.open``, ``os.pread``,
``os.pwrite``, ``os.rename``, ...), with libfuse's default caching (entries and attributes kept
1 s, missing names not kept), as bindfs does in C.  small_files.py and many_small_reads.py run
it beside bindfs and lakefuse: the gap between it and bindfs is what the binding (pyfuse3, trio,
Python) costs per request; the gap between lakefuse and it is what lakefuse itself costs.

No passthrough and no kernel cache of file pages (every read and write is a request, as with
bindfs); inode numbers are its own; nothing is forgotten (a benchmark's lifetime).

    python scripts/bench/pyfuse3_mirror.py SOURCE MOUNTPOINT
"""

from __future__ import annotations

import argparse
import errno
import os
import stat

import pyfuse3
import trio

#: seconds the kernel keeps an entry or its attributes (libfuse's default, and bindfs's)
TIMEOUT = 1.0


def _errors(fn):
    """An OSError of the system call becomes the request's errno."""
    async def handler(*args, **kwargs):
        try:
            return await fn(*args, **kwargs)
        except OSError as exc:
            raise pyfuse3.FUSEError(exc.errno or errno.EIO) from None
    handler.__name__ = fn.__name__
    return handler


class Mirror(pyfuse3.Operations):
    supports_dot_lookup = False

    def __init__(self, source: str):
        super().__init__()
        self._paths = {pyfuse3.ROOT_INODE: source}
        self._inodes = {source: pyfuse3.ROOT_INODE}
        self._next = pyfuse3.ROOT_INODE + 1

    def _path(self, parent: int, name: bytes) -> str:
        return os.path.join(self._paths[parent], os.fsdecode(name))

    def _inode(self, path: str) -> int:
        inode = self._inodes.get(path)
        if inode is None:
            inode = self._inodes[path] = self._next
            self._paths[inode] = path
            self._next += 1
        return inode

    def _attrs(self, path: str, st: os.stat_result | None = None) -> pyfuse3.EntryAttributes:
        st = st if st is not None else os.lstat(path)
        attrs = pyfuse3.EntryAttributes()
        attrs.st_ino = self._inode(path)
        attrs.st_mode, attrs.st_nlink, attrs.st_uid, attrs.st_gid = st.st_mode, st.st_nlink, st.st_uid, st.st_gid
        attrs.st_rdev, attrs.st_size, attrs.st_blocks, attrs.st_blksize = st.st_rdev, st.st_size, st.st_blocks, 4096
        attrs.st_atime_ns, attrs.st_mtime_ns, attrs.st_ctime_ns = st.st_atime_ns, st.st_mtime_ns, st.st_ctime_ns
        attrs.entry_timeout = attrs.attr_timeout = TIMEOUT
        return attrs

    @_errors
    async def lookup(self, parent_inode, name, ctx=None):
        return self._attrs(self._path(parent_inode, name))

    @_errors
    async def getattr(self, inode, ctx=None):
        return self._attrs(self._paths[inode])

    @_errors
    async def setattr(self, inode, attr, fields, fh, ctx):
        path = self._paths[inode]
        if fields.update_size:
            if fh is not None:
                os.ftruncate(fh, attr.st_size)
            else:
                os.truncate(path, attr.st_size)
        if fields.update_mode:
            os.chmod(path, stat.S_IMODE(attr.st_mode), follow_symlinks=False)
        if fields.update_uid or fields.update_gid:
            os.chown(path, attr.st_uid if fields.update_uid else -1, attr.st_gid if fields.update_gid else -1,
                     follow_symlinks=False)
        if fields.update_atime or fields.update_mtime:
            st = os.lstat(path)
            os.utime(path, ns=(attr.st_atime_ns if fields.update_atime else st.st_atime_ns,
                               attr.st_mtime_ns if fields.update_mtime else st.st_mtime_ns), follow_symlinks=False)
        return self._attrs(path)

    @_errors
    async def readlink(self, inode, ctx):
        return os.fsencode(os.readlink(self._paths[inode]))

    @_errors
    async def opendir(self, inode, ctx):
        return inode

    @_errors
    async def readdir(self, fh, start_id, token):
        directory = self._paths[fh]
        names = sorted(os.listdir(directory))
        for i in range(start_id, len(names)):
            path = os.path.join(directory, names[i])
            if not pyfuse3.readdir_reply(token, os.fsencode(names[i]), self._attrs(path), i + 1):
                return

    async def releasedir(self, fh):
        pass

    @_errors
    async def mkdir(self, parent_inode, name, mode, ctx):
        path = self._path(parent_inode, name)
        os.mkdir(path, mode)
        return self._attrs(path)

    @_errors
    async def rmdir(self, parent_inode, name, ctx):
        path = self._path(parent_inode, name)
        os.rmdir(path)
        self._inodes.pop(path, None)

    @_errors
    async def unlink(self, parent_inode, name, ctx):
        path = self._path(parent_inode, name)
        os.unlink(path)
        self._inodes.pop(path, None)

    @_errors
    async def symlink(self, parent_inode, name, target, ctx):
        path = self._path(parent_inode, name)
        os.symlink(os.fsdecode(target), path)
        return self._attrs(path)

    @_errors
    async def rename(self, parent_inode_old, name_old, parent_inode_new, name_new, flags, ctx):
        old, new = self._path(parent_inode_old, name_old), self._path(parent_inode_new, name_new)
        os.rename(old, new)
        self._inodes.pop(new, None)  # the entry it replaced, if any
        if os.path.isdir(new):  # the paths under it move too
            moved = [path for path in self._inodes if path == old or path.startswith(old + "/")]
        else:
            moved = [old] if old in self._inodes else []
        for path in moved:
            inode = self._inodes.pop(path)
            renamed = new + path[len(old):]
            self._inodes[renamed] = inode
            self._paths[inode] = renamed

    @_errors
    async def open(self, inode, flags, ctx):
        return pyfuse3.FileInfo(fh=os.open(self._paths[inode], flags & ~os.O_CREAT))

    @_errors
    async def create(self, parent_inode, name, mode, flags, ctx):
        path = self._path(parent_inode, name)
        fd = os.open(path, flags | os.O_CREAT, mode)
        return pyfuse3.FileInfo(fh=fd), self._attrs(path, os.fstat(fd))

    @_errors
    async def read(self, fh, off, size):
        return os.pread(fh, size, off)

    @_errors
    async def write(self, fh, off, buf):
        return os.pwrite(fh, buf, off)

    async def flush(self, fh):
        pass

    @_errors
    async def fsync(self, fh, datasync):
        (os.fdatasync if datasync else os.fsync)(fh)

    @_errors
    async def release(self, fh):
        os.close(fh)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source")
    parser.add_argument("mountpoint")
    args = parser.parse_args()
    pyfuse3.init(Mirror(os.path.abspath(args.source)), args.mountpoint,
                 {"fsname=pyfuse3-mirror", "default_permissions"})
    try:
        trio.run(pyfuse3.main)
    finally:
        pyfuse3.close(unmount=True)


if __name__ == "__main__":
    main()
