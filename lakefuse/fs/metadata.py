"""Changes to what a file or directory says about itself: ``Metadata`` serves setattr.

Owns chmod, chown and utime (stored as the POSIX keys of the entry's user metadata, see
``lakefuse.posix``: mode, owner and group, the three times; the entry's own mtime follows),
truncate (handed to ``lakefuse.fs.files``), and the user metadata and content type the xattrs
of ``lakefuse.fs.xattrs`` set.  Every change moves the ctime to now; chown of anything but a
directory clears the set-user-ID bit (and set-group-ID with group execute), as Linux does.
Who may change what is the kernel's business (``default_permissions``), or, on a mount only
root reaches (``lakefuse.fuse.runner.kernel_checks_permissions``), root may: the requests that
reach the mount were allowed.

A file being written keeps the change in its ``OpenFile`` until its upload; any other file,
and a directory's marker object, is restaged with the stager's next batch (``tar x`` and
``git clone`` set the times of everything they write); a directory implied by keys gets a
marker that holds what was set, at once (a ref's root, which can have none, keeps it in
memory: ``Tree.root_metadata``).  ``setattr(blocking=False)`` (the adapter's event loop) does
all that from memory, else raises ``WouldBlock`` before changing anything.  Storing a directory's attributes also
stores the mtime its entries' changes gave it (``Tree.touch_dirs``).
"""

from __future__ import annotations

import dataclasses
import errno
import time

from lakefuse.fs.attributes import MODE_KEY, MTIME_NS_KEY, NodeAttributes, clear_set_id_bits
from lakefuse.fs.files import Files
from lakefuse.fs.inodes import Inodes
from lakefuse.fs.nodes import Node, NodeKind
from lakefuse.fs.replies import Attributes, WouldBlock
from lakefuse.fs.state import MountState
from lakefuse.fs.tree import PathStat, Tree, dir_prefix
from lakefuse.fs.uploads import Uploader
from lakefuse.posix import ATIME_NS_KEY, CTIME_NS_KEY, GID_KEY, UID_KEY, set_time

ENOATTR = errno.ENODATA
NS = 1_000_000_000


@dataclasses.dataclass(slots=True)
class Change:
    """What one setattr or xattr call changes (None: unchanged).  ``uid``/``gid`` are the ids
    to store (``Owners.stored_uid``)."""

    mode: int | None = None
    mtime_ns: int | None = None
    atime_ns: int | None = None
    uid: int | None = None
    gid: int | None = None
    set_meta: dict[str, str] | None = None
    remove_meta: str | None = None
    content_type: str | None = None


class Metadata:
    def __init__(self, state: MountState, inodes: Inodes, attributes: NodeAttributes, files: Files,
                 uploader: Uploader):
        self._state = state
        self._stager = state.stager
        self._inodes = inodes
        self._attrs = attributes.get
        self._files = files
        self._uploader = uploader

    def setattr(self, node: Node, *, size: int | None, mode: int | None, mtime_ns: int | None,
                atime_ns: int | None = None, uid: int | None = None, gid: int | None = None,
                chown: bool = False, blocking: bool = True) -> Attributes:
        """``uid``/``gid``: the new owner as the mount shows ids (mapped back to stored ids).
        ``blocking=False``: from memory only, else WouldBlock (nothing changed)."""
        owners = self._state.owners
        if size is None and mode is None and mtime_ns is None and atime_ns is None and uid is None and gid is None:
            if chown and node.kind in (NodeKind.DIR, NodeKind.FILE):
                self._inodes.writable_tree(node)
            return self._inodes.getattr(node.ino, blocking)  # chown(-1, -1), or nothing the mount keeps
        tree = self._inodes.writable_tree(node)
        if size is not None:
            if node.kind is not NodeKind.FILE:
                raise OSError(errno.EISDIR, "is a directory")
            if not blocking:
                raise WouldBlock
            self._files.truncate(node, size)
        if mode is not None or mtime_ns is not None or atime_ns is not None or uid is not None or gid is not None:
            self.change(node, tree, Change(
                mode=mode, mtime_ns=mtime_ns, atime_ns=atime_ns,
                uid=None if uid is None else owners.stored_uid(uid),
                gid=None if gid is None else owners.stored_gid(gid)), blocking=blocking)
        return self._attrs(node)

    def change(self, node: Node, tree: Tree, change: Change | None = None, blocking: bool = True, **fields) -> None:
        """Apply ``change`` (or a ``Change(**fields)``) to ``node`` in ``tree``: mode, owner,
        times, user metadata (``remove_meta`` of an absent key: ENOATTR) or content type; the
        ctime becomes now.  ``blocking=False``: WouldBlock (nothing changed) unless memory
        holds what it needs and the file's lock is free."""
        change = change or Change(**fields)
        self._inodes.ensure_stat(node, blocking)  # the times shown are kept, unless changed
        shown = self._attrs(node)
        now = time.time_ns()

        def apply(metadata: dict[str, str], mtime_ns: int) -> None:
            """The new metadata of an entry whose mtime (after the change) is ``mtime_ns``."""
            if change.remove_meta is not None:
                if change.remove_meta not in metadata:
                    raise OSError(ENOATTR, f"no attribute user.{change.remove_meta}")
                del metadata[change.remove_meta]
            if change.set_meta:
                metadata.update(change.set_meta)
            if change.mode is not None:
                metadata[MODE_KEY] = format(change.mode & 0o7777, "o")
            if change.uid is not None or change.gid is not None:
                if change.uid is not None:
                    metadata[UID_KEY] = str(change.uid)
                if change.gid is not None:
                    metadata[GID_KEY] = str(change.gid)
                if node.kind is not NodeKind.DIR and change.mode is None:
                    clear_set_id_bits(metadata)
            if change.mtime_ns is not None:
                metadata[MTIME_NS_KEY] = str(change.mtime_ns)
            atime = change.atime_ns if change.atime_ns is not None else (shown.atime_ns or shown.mtime_ns)
            set_time(metadata, ATIME_NS_KEY, atime, mtime_ns)
            set_time(metadata, CTIME_NS_KEY, now, mtime_ns)

        if node.kind is NodeKind.DIR:
            self._change_directory(node, tree, change, apply, shown, blocking)
            return
        of = node.open_file
        if of is not None and not of.lock.acquire(blocking=blocking):
            raise WouldBlock  # an upload holds it: the change waits on a worker thread
        try:
            if not node.attached:  # unlinked (still open, or the kernel's late times): never staged again
                if of is not None:
                    apply(of.metadata, of.mtime_ns if change.mtime_ns is None else change.mtime_ns)
                return
            if of is not None and (of.dirty or (of.spool is not None and of.entry is None)):
                if change.mtime_ns is not None:
                    of.mtime_ns = change.mtime_ns
                    of.mtime_explicit = True
                apply(of.metadata, of.mtime_ns)
                if change.content_type is not None:
                    of.content_type = change.content_type
                of.dirty = True
                of.kernel_signature = None  # stored again even if the kernel wrote no byte since
                return
            self._inodes.refresh(node, blocking)
            entry = of.entry if of is not None and of.entry is not None else node.stat.entry
            if entry is None:
                raise OSError(errno.ENOENT, node.path)
            metadata = dict(entry.metadata)
            mtime = shown.mtime_ns if change.mtime_ns is None else change.mtime_ns
            apply(metadata, mtime)
            new = dataclasses.replace(
                entry, metadata=metadata,
                mtime=entry.mtime if change.mtime_ns is None else change.mtime_ns // NS,
                content_type=entry.content_type if change.content_type is None else change.content_type)
            # staged with the stager's next batch, like a closed file (tar and git set the times
            # of every file they write: one transaction per batch, not per file)
            self._stager.put(tree, node.path, new)
            node.stat = PathStat(False, new)
            node.expires = tree.remember(node.path, node.stat, pending=True)
            if of is not None:
                of.take_entry(new)
        finally:
            if of is not None:
                of.lock.release()

    def _change_directory(self, node: Node, tree: Tree, change: Change, apply, shown: Attributes,
                          blocking: bool = True) -> None:
        if change.content_type is not None:
            raise OSError(errno.EISDIR, "a directory has no content type")
        # what its entries' changes made the mtime is stored with the rest
        mtime = shown.mtime_ns if change.mtime_ns is None else change.mtime_ns
        if node.path == "":  # a ref's root: no marker can hold it; memory only
            metadata = dict(tree.root_metadata)
            if change.mtime_ns is None:
                metadata[MTIME_NS_KEY] = str(mtime)
            apply(metadata, mtime)
            tree.root_metadata = metadata
            tree.forget_dir_change("")
            node.attrs_cache = None
            return
        if not node.attached:
            # removed meanwhile (a chmod racing rm -r; the kernel still holds the inode): a
            # marker staged now would bring the directory back
            return
        marker = node.stat.entry if node.stat is not None else None
        if marker is None:
            if not blocking:
                raise WouldBlock  # whether it has a marker is the backend's to say
            self._refresh_marker(node)
            marker = node.stat.entry if node.stat is not None else None
        metadata = dict(marker.metadata) if marker is not None else {}
        if change.mtime_ns is None and (marker is None or mtime // NS != marker.mtime or MTIME_NS_KEY in metadata):
            metadata[MTIME_NS_KEY] = str(mtime)
        apply(metadata, mtime)
        if marker is None:  # implied by the keys under it: a marker object holds what was set now
            new = self._uploader.upload_empty(tree, dir_prefix(node.path), metadata, mtime=mtime // NS)
        else:  # restaged with the stager's next batch, like a file's (tar sets every directory's times)
            new = dataclasses.replace(marker, metadata=metadata, mtime=mtime // NS)
            self._stager.put(tree, dir_prefix(node.path), new)
        tree.forget_dir_change(node.path)
        node.stat = PathStat(True, new)
        node.expires = tree.remember(node.path, node.stat, pending=marker is not None)

    @staticmethod
    def _refresh_marker(node: Node) -> None:
        """Read a directory's marker object again (a listing does not say whether there is one)."""
        tree = node.tree
        tree.forget(node.path)
        stat, expires = tree.stat(node.path)
        if stat is not None and stat.is_dir:
            node.stat, node.expires = stat, expires
