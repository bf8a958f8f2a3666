"""How a node looks to stat(2): ``NodeAttributes`` and the metadata keys behind it.

Owns the mapping from objects to file attributes: size and mtime from the entry (or the spool
of a file being written), the mode and a precise mtime from user metadata (``lakefuse-mode``,
``lakefuse-mtime-ns``, set by chmod and utime: ``lakefuse.fs.metadata``), directories' times
from their marker object or their commit, and the kernel timeouts of each kind of node.
Attributes of a tree node are computed once per stat the node holds (listings and lookups of
big directories ask for them again and again).
"""

from __future__ import annotations

import stat as stat_mode
import time
from typing import TYPE_CHECKING

from lakefuse.fs.nodes import WRITABLE_CONTROL_FILES, Node, NodeKind
from lakefuse.fs.replies import Attributes
from lakefuse.graveler.model import Entry

if TYPE_CHECKING:
    from lakefuse.fs.state import MountState

MODE_KEY = "lakefuse-mode"
MTIME_NS_KEY = "lakefuse-mtime-ns"
#: user metadata the mount keeps for itself (not shown or settable as user.* xattrs)
INTERNAL_METADATA = (MODE_KEY, MTIME_NS_KEY)
DEFAULT_FILE_MODE = 0o644
DEFAULT_DIR_MODE = 0o755


def entry_mtime_ns(entry: Entry) -> int:
    precise = entry.metadata.get(MTIME_NS_KEY) if entry.metadata else None
    if precise is not None:
        try:
            value = int(precise)
            if value // 1_000_000_000 == entry.mtime:
                return value
        except ValueError:
            pass
    return entry.mtime * 1_000_000_000


def entry_mode(entry: Entry | None, default: int) -> int:
    if entry is not None and entry.metadata:
        value = entry.metadata.get(MODE_KEY)
        if value is not None:
            try:
                return int(value, 8) & 0o7777
            except ValueError:
                pass
    return default


def clear_set_id_bits(metadata: dict[str, str]) -> None:
    """What a write or truncate does to a file's mode, as POSIX says: the set-user-ID bit goes,
    and the set-group-ID bit where group execute is set (the kernel leaves this to the mount:
    FUSE_HANDLE_KILLPRIV_V2).  Unlike Linux, also for a writer with CAP_FSETID (a FUSE write
    does not say who wrote)."""
    value = metadata.get(MODE_KEY)
    if value is None:
        return
    try:
        mode = int(value, 8)
    except ValueError:
        return
    kept = mode & ~stat_mode.S_ISUID
    if mode & stat_mode.S_IXGRP:
        kept &= ~stat_mode.S_ISGID
    if kept != mode:
        metadata[MODE_KEY] = format(kept, "o")


def mode_metadata(mode: int, default: int) -> dict[str, str]:
    """User metadata holding the permission bits of ``mode`` (none for the default ones)."""
    perms = mode & 0o7777
    return {} if perms == default else {MODE_KEY: format(perms, "o")}


class NodeAttributes:
    def __init__(self, state: MountState):
        self._state = state

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

    def listed(self, node: Node) -> Attributes:
        """The attributes of ``node`` for an entry of a listing: the kept ones if fresh, else
        computed and not kept (a listing's entries are each asked for once, mostly: the
        kernel keeps their attributes, and kept ones would cost the node ~400 bytes)."""
        cached = node.attrs_cache
        if cached is not None and cached[0] is node.stat and node.open_file is None:
            return cached[1]
        return self._compute(node)

    def _compute(self, node: Node) -> Attributes:
        state = self._state
        kind = node.kind
        tree = node.tree
        ttl = state.refs.ttl(tree)
        if kind is NodeKind.FILE:
            of = node.open_file
            entry = node.stat.entry if node.stat is not None else None
            spool = of.spool if of is not None else None
            if spool is not None:
                size, mtime_ns = spool.size(), of.current_mtime_ns()
                mode = entry_mode(of.entry, DEFAULT_FILE_MODE) if MODE_KEY not in of.metadata else \
                    int(of.metadata[MODE_KEY], 8)
            elif entry is not None:
                size, mtime_ns, mode = entry.size, entry_mtime_ns(entry), entry_mode(entry, DEFAULT_FILE_MODE)
            else:
                size, mtime_ns, mode = 0, state.mount_time_ns, DEFAULT_FILE_MODE
            if of is not None and MODE_KEY in of.metadata:
                mode = int(of.metadata[MODE_KEY], 8)
            return Attributes(node.ino, stat_mode.S_IFREG | mode, size, mtime_ns, state.uid, state.gid, ttl, ttl)
        if kind is NodeKind.CONTROL_FILE:
            mode = 0o644 if node.name in WRITABLE_CONTROL_FILES else 0o444
            return Attributes(node.ino, stat_mode.S_IFREG | mode, 0, time.time_ns(), state.uid, state.gid, 0.0, 0.0)
        # directories
        mtime_ns = state.mount_time_ns
        mode = DEFAULT_DIR_MODE
        entry_timeout = ttl
        if kind is NodeKind.DIR:
            marker = node.stat.entry if node.stat is not None else None
            if marker is not None:
                mtime_ns = entry_mtime_ns(marker)
                mode = entry_mode(marker, DEFAULT_DIR_MODE)
            elif tree is not None and not tree.is_branch and tree.ref.commit_time:
                mtime_ns = tree.ref.commit_time * 1_000_000_000
            if node.entry_timeout is not None:
                entry_timeout = node.entry_timeout
        elif kind in (NodeKind.REPOSITORIES, NodeKind.REPOSITORY):
            ttl = entry_timeout = state.branch_ttl
        else:  # control dir
            ttl = entry_timeout = 0.0
        return Attributes(node.ino, stat_mode.S_IFDIR | mode, 0, mtime_ns, state.uid, state.gid, entry_timeout, ttl)
