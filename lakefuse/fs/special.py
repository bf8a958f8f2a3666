"""Entries that are neither regular files nor directories: ``Special`` serves symlink, readlink
and the mknod of FIFOs, sockets and devices, and refuses hard links.

Each is an object whose user metadata says what it is (``lakefuse.posix``: ``lakefuse-type``,
a link's ``lakefuse-target``, a device's ``lakefuse-rdev``), with the mode and owner every new
entry gets.  A link's object holds its target, so its size is the target's length and a reader
that knows nothing of links (a lakeFS client, ``lakefuse fs cat``) sees the target; the others
are empty.  Like a closed new file, one is stored at once and staged with the stager's next
batch (``tar x`` of a tree full of links pays one transaction per batch), and ``Unstaged``
answers for it meanwhile.  Once the kernel knows the type it serves FIFOs, sockets and devices
itself: no read or write of them reaches the mount.  readlink answers from the entry's
metadata, on the event loop when the node's stat is in memory.  Hard links: EPERM (an object
has one key, and a second key to the same bytes would be a copy that drifts on the first
write; see docs/mount.md).
"""

from __future__ import annotations

import errno
import stat as stat_mode
import time

from lakefuse.fs.attributes import DEFAULT_FILE_MODE, NodeAttributes, mode_metadata
from lakefuse.fs.inodes import Inodes, refuse_control_dir_name
from lakefuse.fs.nodes import Node, NodeKind
from lakefuse.fs.replies import Attributes, WouldBlock
from lakefuse.fs.state import MountState
from lakefuse.fs.tree import PathStat, check_name, decode_name, join
from lakefuse.fs.uploads import Uploader
from lakefuse.posix import DEVICE_FORMATS, TYPE_KEY, SYMLINK, special_metadata, symlink_target

#: the longest symbolic link target, in bytes (PATH_MAX without its terminating null)
MAX_TARGET_BYTES = 4095
#: what mknod makes here besides regular files (which are created like any file)
SPECIAL_FORMATS = (stat_mode.S_IFIFO, stat_mode.S_IFSOCK) + DEVICE_FORMATS


class Special:
    def __init__(self, state: MountState, inodes: Inodes, attributes: NodeAttributes, uploader: Uploader):
        self._state = state
        self._inodes = inodes
        self._attrs = attributes.get
        self._mode_and_group = attributes.mode_and_group
        self._uploader = uploader

    def symlink(self, parent: Node, name: bytes | str, target: bytes | str, uid: int | None = None,
                gid: int | None = None) -> Attributes:
        raw = target if isinstance(target, bytes) else target.encode("utf-8")
        if not raw:
            raise OSError(errno.ENOENT, "empty symbolic link target")
        if len(raw) > MAX_TARGET_BYTES:
            raise OSError(errno.ENAMETOOLONG, "symbolic link target longer than PATH_MAX")
        text = decode_name(raw)  # EILSEQ unless UTF-8, like names
        if "\0" in text:
            raise OSError(errno.EINVAL, "symbolic link target with a null byte")
        return self._make(parent, name, special_metadata(stat_mode.S_IFLNK, target=text), raw, uid, gid)

    def mknod(self, parent: Node, name: bytes | str, mode: int, rdev: int = 0, uid: int | None = None,
              gid: int | None = None) -> Attributes:
        fmt = stat_mode.S_IFMT(mode)
        if fmt not in SPECIAL_FORMATS:
            raise OSError(errno.EPERM, f"mknod of file type {fmt:o} is not supported")
        metadata = special_metadata(fmt, device=rdev)
        metadata.update(mode_metadata(mode, DEFAULT_FILE_MODE))
        return self._make(parent, name, metadata, b"", uid, gid)

    def readlink(self, node: Node, blocking: bool = True) -> bytes:
        if node.kind is not NodeKind.FILE:
            raise OSError(errno.EINVAL, "not a symbolic link")
        self._inodes.refresh(node, blocking)
        entry = node.stat.entry if node.stat is not None else None
        metadata = entry.metadata if entry is not None else None
        target = symlink_target(metadata)
        if target is not None:
            return target.encode("utf-8")
        if not metadata or metadata.get(TYPE_KEY) != SYMLINK:
            raise OSError(errno.EINVAL, "not a symbolic link")
        # a link some other writer made without its target in the metadata: its bytes are it
        if not blocking:
            raise WouldBlock
        reader = self._state.backend.open_reader(node.tree.repo, entry)
        try:
            return reader.read(0, min(entry.size, MAX_TARGET_BYTES))
        finally:
            reader.close()

    @staticmethod
    def link(*args) -> None:
        raise OSError(errno.EPERM, "hard links are not supported (an object has one key)")

    def _make(self, parent: Node, name: bytes | str, metadata: dict[str, str], data: bytes, uid: int | None,
              gid: int | None) -> Attributes:
        tree = self._inodes.writable_tree(parent)
        if parent.kind is not NodeKind.DIR:
            raise OSError(errno.ENOTDIR, "not a directory")
        name = check_name(decode_name(name))
        refuse_control_dir_name(parent, name, errno.EEXIST)
        path = join(parent.path, name)
        stat, _ = self._inodes.stat_path(tree, path, True)
        if stat is not None:
            raise OSError(errno.EEXIST, path)
        if uid is not None:
            parent_mode, parent_gid = self._mode_and_group(parent)
            metadata.update(self._state.owners.new_entry(uid, gid, parent_mode, parent_gid))
        entry = self._uploader.store_bytes(tree, data, metadata, mtime=int(time.time()))
        stat = PathStat(False, entry)
        node = self._inodes.tree_node(tree, path, stat, tree.remember(path, stat, pending=True), lookups=1)
        self._state.unstaged.add(node)  # before the stager may write it (its write takes it out)
        self._state.stager.put(tree, path, entry)
        self._inodes.dir_changed(tree, parent.path)
        return self._attrs(node)

