"""How a node looks to stat(2): ``NodeAttributes`` and the metadata keys behind it.

Owns the mapping from objects to file attributes: size and mtime from the entry (or the spool
of a file being written); the file type, mode, owner, device number and the three times from
the POSIX keys of its user metadata (``lakefuse.posix``: set by chmod, chown, utime, symlink
and mknod through ``lakefuse.fs.metadata`` and ``lakefuse.fs.special``); directories' from
their marker object (a ref's root: what was set through this mount), or their commit; the
owner through ``MountState.owners``; and the kernel timeouts of each kind of node.  An entry
without those keys shows what every entry showed before lakefuse kept them: a regular file or
directory with the default mode, owned by the default owner, whose three times are its mtime.
A directory's mtime and ctime also move when entries are made or removed in it through this
mount (``Tree.touch_dirs``, memory only).  Attributes of a tree node are computed once per
stat the node holds (listings and lookups of big directories ask for them again and again).
Also the POSIX rule of access(2) on those attributes (``may_access``), for a mount where the
kernel does not check permissions itself.
"""

from __future__ import annotations

import os
import stat as stat_mode
import time
from typing import TYPE_CHECKING, Iterable, Mapping

from lakefuse.fs.nodes import WRITABLE_CONTROL_FILES, Node, NodeKind
from lakefuse.fs.replies import Attributes
from lakefuse.graveler.model import Entry
from lakefuse.posix import (
    ATIME_NS_KEY,
    CTIME_NS_KEY,
    DEVICE_FORMATS,
    MODE_KEY,
    MTIME_NS_KEY,
    POSIX_KEYS,
    file_format,
    owner,
    permissions,
    rdev,
    time_ns,
    times_ns,
)
from lakefuse.posix import mtime_ns as posix_mtime_ns

if TYPE_CHECKING:
    from lakefuse.fs.state import MountState
    from lakefuse.fs.tree import PathStat

__all__ = ["ATIME_NS_KEY", "CTIME_NS_KEY", "DEFAULT_DIR_MODE", "DEFAULT_FILE_MODE", "INTERNAL_METADATA", "MODE_KEY",
           "MTIME_NS_KEY", "NodeAttributes", "clear_set_id_bits", "content_changed", "entry_mode", "entry_mtime_ns",
           "may_access", "mode_metadata"]

#: user metadata the mount keeps for itself (not shown or settable as user.* xattrs)
INTERNAL_METADATA = POSIX_KEYS
DEFAULT_FILE_MODE = 0o644
DEFAULT_DIR_MODE = 0o755
_REG, _DIR, _LNK = stat_mode.S_IFREG, stat_mode.S_IFDIR, stat_mode.S_IFLNK


def entry_mtime_ns(entry: Entry) -> int:
    return posix_mtime_ns(entry.metadata, entry.mtime)


def entry_mode(entry: Entry | None, default: int) -> int:
    return permissions(entry.metadata if entry is not None else None, default)


def clear_set_id_bits(metadata: dict[str, str], always: bool = True) -> bool:
    """What a write, truncate or chown does to a file's mode, as Linux does: the set-user-ID
    bit goes, and the set-group-ID bit where group execute is set (the kernel leaves this to
    the mount: FUSE_HANDLE_KILLPRIV_V2).  Unlike Linux, also for a writer with CAP_FSETID (a
    FUSE write does not say who wrote).  Whether the mode changed."""
    value = metadata.get(MODE_KEY)
    if value is None:
        return False
    try:
        mode = int(value, 8)
    except ValueError:
        return False
    kept = mode & ~stat_mode.S_ISUID
    if mode & stat_mode.S_IXGRP:
        kept &= ~stat_mode.S_ISGID
    if kept != mode:
        metadata[MODE_KEY] = format(kept, "o")
        return True
    return False


def content_changed(metadata: dict[str, str], mtime_ns_before: int | None) -> None:
    """What a write or truncate does to an open file's POSIX keys: the set-ID bits are cleared
    (``clear_set_id_bits``), the ctime becomes the new mtime (its key goes), and the atime stays
    what it was - stored as the previous mtime, when it was implied by it (``mtime_ns_before``:
    None for a file written since its last upload, whose keys are already right)."""
    if metadata:
        clear_set_id_bits(metadata)
        metadata.pop(CTIME_NS_KEY, None)
    if mtime_ns_before is not None and ATIME_NS_KEY not in metadata:
        metadata[ATIME_NS_KEY] = str(mtime_ns_before)


def mode_metadata(mode: int, default: int) -> dict[str, str]:
    """User metadata holding the permission bits of ``mode`` (none for the default ones)."""
    perms = mode & 0o7777
    return {} if perms == default else {MODE_KEY: format(perms, "o")}


def may_access(attrs: Attributes, mode: int, uid: int, gid: int, groups: Iterable[int] = ()) -> bool:
    """Whether a caller (``uid``, its ``gid`` and supplementary ``groups``) may do ``mode``
    (``os.R_OK | os.W_OK | os.X_OK``; 0 asks whether the node exists) to a node with ``attrs``,
    by the kernel's rule (generic_permission): root may do anything but execute a file that no
    one may execute; anyone else is held to the owner's, the group's or the others' bits,
    whichever class comes first."""
    mode &= 0o7
    if uid == 0:
        return not (mode & os.X_OK) or stat_mode.S_ISDIR(attrs.mode) or bool(attrs.mode & 0o111)
    if uid == attrs.uid:
        allowed = attrs.mode >> 6
    elif gid == attrs.gid or attrs.gid in groups:
        allowed = attrs.mode >> 3
    else:
        allowed = attrs.mode
    return mode & allowed & 0o7 == mode


class NodeAttributes:
    def __init__(self, state: MountState):
        self._state = state
        self._owners = state.owners

    def get(self, node: Node) -> Attributes:
        """The attributes of ``node``; those of a tree file or directory are computed once per
        stat (listings and lookups of big directories ask for them again and again)."""
        cached = node.attrs_cache
        stat = node.stat
        if cached is not None and cached[0] is stat and node.open_file is None:
            return cached[1]
        attrs = self._compute(node)
        if stat is not None and node.open_file is None and node.path and node.kind in (NodeKind.FILE, NodeKind.DIR):
            node.attrs_cache = (stat, attrs)
        return attrs

    def listed(self, node: Node, stat: PathStat) -> Attributes:
        """The attributes of ``node`` for an entry of a listing that says ``stat``: the kept
        ones if fresh, else computed and not kept (a listing's entries are each asked for once,
        mostly: the kernel keeps their attributes, and kept ones would cost the node ~400
        bytes).  A file's node made by the listing keeps no stat (``Inodes.tree_node``): its
        attributes are the listing's."""
        cached = node.attrs_cache
        if cached is not None and cached[0] is node.stat and node.open_file is None:
            return cached[1]
        if node.stat is None and node.kind is NodeKind.FILE:
            return self._file(node, self._state.refs.ttl(node.tree), stat)
        return self._compute(node)

    def _compute(self, node: Node) -> Attributes:
        state = self._state
        kind = node.kind
        tree = node.tree
        ttl = state.refs.ttl(tree)
        if kind is NodeKind.FILE:
            return self._file(node, ttl)
        if kind is NodeKind.CONTROL_FILE:
            mode = 0o644 if node.name in WRITABLE_CONTROL_FILES else 0o444
            return Attributes(node.ino, _REG | mode, 0, time.time_ns(), state.uid, state.gid, 0.0, 0.0)
        # directories
        if kind is NodeKind.DIR:
            return self._directory(node, ttl)
        if kind in (NodeKind.REPOSITORIES, NodeKind.REPOSITORY):
            ttl = state.branch_ttl
        else:  # control dir
            ttl = 0.0
        return Attributes(node.ino, _DIR | DEFAULT_DIR_MODE, 0, state.mount_time_ns, state.uid, state.gid, ttl, ttl)

    def listed_file(self, ino: int, tree, stat: PathStat) -> Attributes:
        """The attributes of a listed file without a node (``InodeTable.add_listed``)."""
        return self._file_attributes(ino, True, None, self._state.refs.ttl(tree), stat)

    def _file(self, node: Node, ttl: float, stat: PathStat | None = None) -> Attributes:
        return self._file_attributes(node.ino, node.attached, node.open_file, ttl,
                                     node.stat if stat is None else stat)

    def _file_attributes(self, ino: int, attached: bool, of, ttl: float, stat: PathStat | None) -> Attributes:
        entry = stat.entry if stat is not None else None
        if of is not None and (of.spool is not None or of.dirty or entry is None):
            metadata: Mapping[str, str] = of.metadata
            size = of.size()
            mtime = of.current_mtime_ns()  # a spool the kernel writes: its last write
            atime, ctime = time_ns(metadata, ATIME_NS_KEY, mtime), time_ns(metadata, CTIME_NS_KEY, mtime)
        elif entry is not None:
            metadata = entry.metadata
            size = entry.size
            atime, mtime, ctime = times_ns(metadata, entry.mtime) if metadata else (entry.mtime * 1_000_000_000,) * 3
        else:
            metadata, size = {}, 0
            atime = mtime = ctime = self._state.mount_time_ns
        if not metadata:  # every entry written before lakefuse kept POSIX attributes, and most since
            owners = self._owners
            return Attributes(ino, _REG | DEFAULT_FILE_MODE, size, mtime, owners.uid, owners.gid, ttl, ttl,
                              nlink=1 if attached else 0, atime_ns=atime, ctime_ns=ctime)
        fmt = file_format(metadata)
        uid, gid = self._owners.shown(*owner(metadata))
        perms = 0o777 if fmt == _LNK else permissions(metadata, DEFAULT_FILE_MODE)  # a link's mode means nothing
        return Attributes(ino, fmt | perms, size, mtime, uid, gid, ttl, ttl,
                          nlink=1 if attached else 0, atime_ns=atime, ctime_ns=ctime,
                          rdev=rdev(metadata) if fmt in DEVICE_FORMATS else 0)

    def mode_and_group(self, directory: Node) -> tuple[int, int]:
        """The mode and group ``directory`` shows: what a new entry in it inherits (its group,
        when the directory is set-group-ID).  ``get`` without the times, which every entry
        made in the directory changes (a create would compute them again for nothing)."""
        cached = directory.attrs_cache
        if directory.kind is not NodeKind.DIR or (cached is not None and cached[0] is directory.stat):
            attrs = self.get(directory)
            return attrs.mode, attrs.gid
        metadata = self._directory_metadata(directory)
        return _DIR | permissions(metadata, DEFAULT_DIR_MODE), self._owners.shown(*owner(metadata))[1]

    @staticmethod
    def _directory_metadata(node: Node) -> Mapping[str, str] | None:
        """The user metadata a directory's attributes come from: its marker's, or for a ref's
        root what was set through this mount (``Tree.root_metadata``); None: neither."""
        if node.stat is not None and node.stat.entry is not None:
            return node.stat.entry.metadata
        tree = node.tree
        if node.path == "" and tree is not None and tree.root_metadata:
            return tree.root_metadata
        return None

    def _directory(self, node: Node, ttl: float) -> Attributes:
        state = self._state
        tree = node.tree
        marker = node.stat.entry if node.stat is not None else None
        metadata = self._directory_metadata(node)
        if marker is not None:
            atime, mtime, ctime = times_ns(metadata, marker.mtime)
        elif metadata is not None:  # a ref's root
            mtime = time_ns(metadata, MTIME_NS_KEY, state.mount_time_ns)
            atime, ctime = time_ns(metadata, ATIME_NS_KEY, mtime), time_ns(metadata, CTIME_NS_KEY, mtime)
        else:
            mtime = state.mount_time_ns
            if tree is not None and not tree.is_branch and tree.ref.commit_time:
                mtime = tree.ref.commit_time * 1_000_000_000
            atime = ctime = mtime
        if tree is not None and tree.writable:
            changed = tree.dir_changed_at(node.path)
            if changed is not None:
                mtime = ctime = changed
        uid, gid = self._owners.shown(*owner(metadata))
        # a ref's name: how long it keeps its meaning (a branch's name, a commit ID's for good)
        entry_timeout = state.refs.timeout(tree.ref) if node.path == "" and tree is not None else ttl
        return Attributes(node.ino, _DIR | permissions(metadata, DEFAULT_DIR_MODE), 0, mtime, uid, gid,
                          entry_timeout, ttl, atime_ns=atime, ctime_ns=ctime)
