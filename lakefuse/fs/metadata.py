"""Changes to what a file or directory says about itself: ``Metadata`` serves setattr.

Owns chmod and utime (stored as user metadata ``lakefuse-mode`` and ``lakefuse-mtime-ns``,
plus the entry's mtime), chown (accepted, not stored), truncate (handed to
``lakefuse.fs.files``), and the user metadata and content type the xattrs of
``lakefuse.fs.xattrs`` set.  A file being written keeps the change in its ``OpenFile`` until
its upload; any other file or a directory's marker object is restaged at once with the new
metadata (a directory implied by keys has no object to hold it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno

from lakefuse.fs.attributes import MODE_KEY, MTIME_NS_KEY, NodeAttributes
from lakefuse.fs.files import Files
from lakefuse.fs.inodes import Inodes
from lakefuse.fs.nodes import Node, NodeKind
from lakefuse.fs.replies import Attributes
from lakefuse.fs.state import MountState
from lakefuse.fs.tree import PathStat, Tree, dir_prefix

ENOATTR = errno.ENODATA


class Metadata:
    def __init__(self, state: MountState, inodes: Inodes, attributes: NodeAttributes, files: Files):
        self._stager = state.stager
        self._inodes = inodes
        self._attrs = attributes.get
        self._files = files

    def setattr(self, node: Node, *, size: int | None, mode: int | None, mtime_ns: int | None,
                chown: bool) -> Attributes:
        if size is None and mode is None and mtime_ns is None:
            if chown and node.kind in (NodeKind.DIR, NodeKind.FILE):
                self._inodes.writable_tree(node)
            return self._inodes.getattr(node.ino)  # chown/atime: accepted, not stored
        tree = self._inodes.writable_tree(node)
        if size is not None:
            if node.kind is not NodeKind.FILE:
                raise OSError(errno.EISDIR, "is a directory")
            self._files.truncate(node, size)
        if mode is not None or mtime_ns is not None:
            self.change(node, tree, mode=mode, mtime_ns=mtime_ns)
        return self._attrs(node)

    def change(self, node: Node, tree: Tree, *, mode: int | None = None, mtime_ns: int | None = None,
               set_meta: dict[str, str] | None = None, remove_meta: str | None = None,
               content_type: str | None = None) -> None:
        """Change the mode, mtime, user metadata (``set_meta``, ``remove_meta``: ENOATTR if
        absent) or content type of ``node`` in ``tree``."""
        def apply(metadata: dict[str, str]) -> None:
            if mode is not None:
                metadata[MODE_KEY] = format(mode & 0o7777, "o")
            if mtime_ns is not None:
                metadata[MTIME_NS_KEY] = str(mtime_ns)
            if set_meta:
                metadata.update(set_meta)
            if remove_meta is not None:
                if remove_meta not in metadata:
                    raise OSError(ENOATTR, f"no attribute user.{remove_meta}")
                del metadata[remove_meta]

        if node.kind is NodeKind.DIR:
            marker = node.stat.entry if node.stat is not None else None
            if node.path == "" or marker is None:
                self._refresh_marker(node)
                marker = node.stat.entry if node.stat is not None else None
            if marker is None:
                if set_meta or remove_meta or content_type:
                    raise OSError(errno.ENOTSUP, "extended attributes of a directory need a marker (mkdir)")
                return  # a directory implied by keys has no object to hold its mode or time
            metadata = dict(marker.metadata)
            apply(metadata)
            new = dataclasses.replace(marker, metadata=metadata,
                                      mtime=marker.mtime if mtime_ns is None else mtime_ns // 1_000_000_000)
            self._stager.stage_now(tree, [(dir_prefix(node.path), new)])
            node.stat = PathStat(True, new)
            node.expires = tree.remember(node.path, node.stat)
            return
        of = node.open_file
        with of.lock if of is not None else contextlib.nullcontext():
            if not node.attached:  # unlinked (still open, or the kernel's late times): never staged again
                if of is not None:
                    apply(of.metadata)
                return
            if of is not None and (of.dirty or (of.spool is not None and of.entry is None)):
                apply(of.metadata)
                if mtime_ns is not None:
                    of.mtime_ns = mtime_ns
                    of.mtime_explicit = True
                if content_type is not None:
                    of.content_type = content_type
                of.dirty = True
                return
            self._inodes.refresh(node, True)
            entry = of.entry if of is not None and of.entry is not None else node.stat.entry
            if entry is None:
                raise OSError(errno.ENOENT, node.path)
            metadata = dict(entry.metadata)
            apply(metadata)
            new = dataclasses.replace(
                entry, metadata=metadata,
                mtime=entry.mtime if mtime_ns is None else mtime_ns // 1_000_000_000,
                content_type=entry.content_type if content_type is None else content_type)
            # staged with the stager's next batch, like a closed file (tar and git set the times
            # of every file they write: one transaction per batch, not per file)
            self._stager.put(tree, node.path, new)
            node.stat = PathStat(False, new)
            node.expires = tree.remember(node.path, node.stat, pending=True)
            if of is not None:
                of.take_entry(new)

    @staticmethod
    def _refresh_marker(node: Node) -> None:
        """Read a directory's marker object again (a listing does not say whether there is one)."""
        tree = node.tree
        if node.path == "":
            return
        tree.forget(node.path)
        stat, expires = tree.stat(node.path)
        if stat is not None and stat.is_dir:
            node.stat, node.expires = stat, expires
