"""Changes to names in a branch: ``Namespace`` serves mkdir, rmdir, unlink and rename.

Owns how each becomes staged entries: ``mkdir`` stores a marker object ``a/b/``; ``rmdir``
(ENOTEMPTY unless empty) drops it; ``unlink`` stages a deletion; ``rename`` of a file or of a
whole directory is a metadata move (one staging transaction, no data copied; written files
below are uploaded first).  When the last entry of a directory goes away, a marker keeps the
directory, as POSIX expects (``_keep_parent``).  Inodes follow their paths (renamed nodes
are re-keyed; removed or replaced ones detached).  The directories an entry is made in or
removed from get a new mtime and ctime in memory (``Inodes.dir_changed``); a renamed file,
link or special file gets a new ctime (stored).  Symbolic links and
special files are ``lakefuse.fs.special``'s.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import stat as stat_mode
import time

from lakefuse.fs.attributes import CTIME_NS_KEY, DEFAULT_DIR_MODE, NodeAttributes, mode_metadata
from lakefuse.fs.backend import iter_listing
from lakefuse.fs.inodes import Inodes, refuse_control_dir_name
from lakefuse.fs.nodes import Node, NodeKind, path_key
from lakefuse.fs.replies import Attributes, WouldBlock
from lakefuse.fs.state import MountState
from lakefuse.fs.tree import PathStat, Tree, check_name, decode_name, dir_prefix, join
from lakefuse.fs.uploads import Uploader
from lakefuse.graveler.model import Entry

def _renamed(entry: Entry) -> Entry:
    """``entry`` renamed: its ctime moves to now, as Linux does it."""
    return dataclasses.replace(entry, metadata={**entry.metadata, CTIME_NS_KEY: str(time.time_ns())})


#: ``Namespace._known``: memory does not know the path
_UNKNOWN = object()
#: renameat2(2) flags (not in the ``os`` module)
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2


class Namespace:
    def __init__(self, state: MountState, inodes: Inodes, attributes: NodeAttributes, uploader: Uploader):
        self._state = state
        self._backend = state.backend
        self._table = state.table
        self._unstaged = state.unstaged
        self._stager = state.stager  # every staging here waits for the branch's closed files first
        self._owned = state.owned
        self._inodes = inodes
        self._attrs = attributes.get
        self._mode_and_group = attributes.mode_and_group
        self._uploader = uploader

    def mkdir(self, parent: Node, name: bytes | str, mode: int, uid: int | None = None,
              gid: int | None = None, blocking: bool = True) -> Attributes:
        """``uid``/``gid``: the requester's, the new directory's owner (None: not stored).
        ``blocking=False``: WouldBlock (before any change) unless memory knows the name is free
        and the marker goes to local storage (a rename on this machine)."""
        tree = self._inodes.writable_tree(parent)
        name = check_name(decode_name(name))
        refuse_control_dir_name(parent, name, errno.EEXIST)
        path = join(parent.path, name)
        stat, _ = self._inodes.stat_path(tree, path, blocking)  # WouldBlock: not known in memory
        if stat is not None:
            raise OSError(errno.EEXIST, path)
        if not blocking and (tree.waits_for_stager(path) or not self._uploader.known_local(tree.repo)):
            raise WouldBlock
        if blocking:
            self._uploader.local_storage(tree.repo)  # learnt once, so the next mkdir need not hop
        if tree.waits_for_stager(path):
            # a file of that name was deleted and its deletion waits for the stager: staged
            # first, or listings would show that file (still staged) in place of the directory
            self._stager.flush(tree)
        metadata = {}
        if uid is not None:
            parent_mode, parent_gid = self._mode_and_group(parent)
            metadata = self._state.owners.new_entry(uid, gid, parent_mode, parent_gid)
            if parent_mode & stat_mode.S_ISGID:
                mode |= stat_mode.S_ISGID  # a set-group-ID directory's subdirectories inherit it
        metadata.update(mode_metadata(mode, DEFAULT_DIR_MODE))
        # the marker is staged with the stager's next batch, like a closed file (``tar x`` and
        # ``git clone`` make a directory every few files: one transaction per batch, not per
        # directory); until then the directory is an unstaged node, which lookups and listings
        # find, and every staging of the branch (rmdir, rename, fsync, commit) writes it first
        marker = self._uploader.store_empty(tree, metadata)
        stat = PathStat(True, marker)
        empty_until = tree.remember_empty_dir(path, stat, pending=True)
        node = self._inodes.tree_node(tree, path, stat, empty_until)
        self._table.add_lookup(node)
        if self._inodes.native_answers is not None:  # its missing names answered by the binding
            self._inodes.native_answers.made_dir(node.ino, tree, empty_until)
        self._unstaged.add(node)  # before the stager may write it (its write takes it out)
        self._stager.put(tree, dir_prefix(path), marker)
        self._inodes.dir_changed(tree, parent.path)
        return self._attrs(node)

    def rmdir(self, parent: Node, name: bytes | str, blocking: bool = True) -> None:
        """``blocking=False``: WouldBlock (before any change) unless memory knows the directory
        is empty and needs no marker for its parent (``_rmdir_queued``)."""
        tree = self._inodes.writable_tree(parent)
        name = decode_name(name)
        refuse_control_dir_name(parent, name, errno.EPERM)
        path = join(parent.path, name)
        if not blocking:
            self._rmdir_queued(tree, parent, path)
            return
        self._stager.flush(tree)  # what it holds is in the backend, which is asked next
        stat, _ = tree.stat(path, fresh=True)
        if stat is None:
            self._inodes.detach_path(tree, path)
            return  # already gone (its last object was removed elsewhere)
        if not stat.is_dir:
            raise OSError(errno.ENOTDIR, path)
        if tree.has_children(path) or self._unstaged.any_under(tree, path):
            raise OSError(errno.ENOTEMPTY, path)
        self._keep_parent(tree, parent.path, gone=[dir_prefix(path)])
        if stat.entry is not None:
            self._stager.stage_now(tree, [(dir_prefix(path), None)], deleted_exist=True)
        tree.remember(path, None)
        tree.forget_dir_change(path)
        self._inodes.detach_path(tree, path)
        self._inodes.dir_changed(tree, parent.path)

    def _rmdir_queued(self, tree: Tree, parent: Node, path: str) -> None:
        """rmdir from memory (``rm -r`` of what this mount made or listed, after unlinking
        every file in it): the directory is known whole and empty, its marker staged (not
        waiting for the stager), nothing unstaged under it, and its parent has a marker of its
        own, so no marker must be made there.  The marker's deletion waits for the stager's
        next batch, with the unlinks before it; memory answers for the path meanwhile."""
        hit = tree.cached(path)
        if hit is None or hit[0] is None:
            raise WouldBlock  # not known (a missing directory is the backend's to tell)
        stat = hit[0]
        if not stat.is_dir:
            raise OSError(errno.ENOTDIR, path)
        if (not tree.known_empty(path) or tree.waits_for_stager(path)
                or self._unstaged.any_under(tree, path)):
            raise WouldBlock
        if not _keeps_its_marker(tree, parent.path):
            raise WouldBlock  # the parent may need a marker: the backend is asked
        if stat.entry is None:
            # an empty directory has a marker (``_keep_parent`` makes one when its last key
            # goes), which memory does not know here (a listing row from while keys were under
            # it): removed from memory alone, the marker would stay, and the directory with it
            raise WouldBlock
        self._stager.put(tree, dir_prefix(path), None)
        tree.remember(path, None, pending=True)
        tree.forget_dir_change(path)
        self._inodes.detach_path(tree, path)
        self._inodes.dir_changed(tree, parent.path)

    def unlink(self, parent: Node, name: bytes | str, blocking: bool = True) -> None:
        """``blocking=False``: WouldBlock (before any change) unless memory knows the file and
        its directory's marker, so the unlink is a deletion queued for the stager.

        A file still open (its RELEASE, which may store it, can come after the close(2) that
        preceded this unlink) is unlinked under its lock: an upload under way finishes first,
        and the deletion is queued after its entry; an upload after it finds the file detached
        and stages nothing."""
        tree = self._inodes.writable_tree(parent)
        name = decode_name(name)
        refuse_control_dir_name(parent, name, errno.EPERM)
        path = join(parent.path, name)
        node = self._inodes.find(tree, path)
        of = node.open_file if node is not None else None
        if of is None:
            self._unlink(tree, parent, path, blocking)
            return
        if not of.lock.acquire(blocking=blocking):
            raise WouldBlock  # an upload holds it: the unlink waits on a worker thread
        try:
            self._unlink(tree, parent, path, blocking)
        finally:
            of.lock.release()

    def _unlink(self, tree: Tree, parent: Node, path: str, blocking: bool) -> None:
        unstaged = self._unstaged.node(tree, path)
        stat = unstaged.stat if unstaged is not None else None
        if stat is None:  # what memory says (the kernel just looked it up), else the backend now
            hit = tree.cached(path)
            if hit is not None and hit[0] is not None:
                stat = hit[0]
            elif not blocking:
                raise WouldBlock
            else:
                stat = tree.stat(path, fresh=True)[0]
        if stat is None and unstaged is None:
            raise OSError(errno.ENOENT, path)
        if stat is not None and stat.is_dir:
            raise OSError(errno.EISDIR, path)
        if not blocking and not _keeps_its_marker(tree, parent.path):
            raise WouldBlock  # the directory may need a marker: the backend is asked
        self._keep_parent(tree, parent.path, gone=[path])
        stored = stat is not None and stat.entry is not None
        if stored:  # the deletion waits for the stager's next batch, with the new files (rm -r)
            self._stager.put(tree, path, None)
        tree.remember(path, None, pending=stored)
        if unstaged is not None:
            self._unstaged.discard(tree, path, unstaged)
        node = self._inodes.find(tree, path)
        if stored and (node is None or node.open_file is None):  # no handle reads it: its object can go
            self._owned.superseded(tree, path, stat.entry)
        self._inodes.detach_path(tree, path)
        self._inodes.dir_changed(tree, parent.path)

    # ------------------------------------------------------------------ rename

    def rename(self, old_parent: Node, old_name: bytes | str, new_parent: Node, new_name: bytes | str,
               flags: int = 0, blocking: bool = True) -> None:
        """``blocking=False``: WouldBlock (before any change) unless it is a file's rename that
        memory can decide (``_rename_file_queued``)."""
        if flags & RENAME_EXCHANGE:
            raise OSError(errno.EINVAL, "RENAME_EXCHANGE is not supported")
        tree = self._inodes.writable_tree(old_parent)
        if self._inodes.writable_tree(new_parent) is not tree:
            raise OSError(errno.EXDEV, "rename across refs or repositories")
        old_name, new_name = decode_name(old_name), check_name(decode_name(new_name))
        refuse_control_dir_name(old_parent, old_name, errno.EPERM)
        refuse_control_dir_name(new_parent, new_name, errno.EPERM)
        old_path, new_path = join(old_parent.path, old_name), join(new_parent.path, new_name)
        if old_path == new_path:
            return
        # the directory the entry leaves may need a marker, unless the entry stays inside it
        keep_parent = None if new_path.startswith(dir_prefix(old_parent.path)) else old_parent.path
        if not blocking:
            self._rename_file_queued(tree, keep_parent, old_path, new_path, flags)
            self._inodes.dir_changed(tree, old_parent.path, new_parent.path)
            return
        self._stager.flush(tree)
        for path in (old_path, new_path):
            tree.forget(path)
        old_stat, _ = self._inodes.stat_path(tree, old_path, True)
        if old_stat is None:
            raise OSError(errno.ENOENT, old_path)
        new_stat, _ = self._inodes.stat_path(tree, new_path, True)
        if new_stat is not None and flags & RENAME_NOREPLACE:
            raise OSError(errno.EEXIST, new_path)
        if old_stat.is_dir:
            if new_path.startswith(old_path + "/"):
                raise OSError(errno.EINVAL, "cannot move a directory into itself")
            if new_stat is not None:
                if not new_stat.is_dir:
                    raise OSError(errno.ENOTDIR, new_path)
                if tree.has_children(new_path) or self._unstaged.any_under(tree, new_path):
                    raise OSError(errno.ENOTEMPTY, new_path)
            self._rename_dir(tree, keep_parent, old_path, new_path, new_stat)
        else:
            if new_stat is not None and new_stat.is_dir:
                raise OSError(errno.EISDIR, new_path)
            self._rename_file(tree, keep_parent, old_path, new_path, new_stat.entry if new_stat is not None else None)
        self._inodes.dir_changed(tree, old_parent.path, new_parent.path)

    def _rename_file(self, tree: Tree, old_parent_path: str | None, old_path: str, new_path: str,
                     replaced: Entry | None) -> None:
        node = self._inodes.find(tree, old_path)
        of = node.open_file if node is not None else None
        with of.lock if of is not None else contextlib.nullcontext():
            if of is not None and of.dirty:
                self._uploader.upload(of)
            stat, _ = tree.stat(old_path)
            if stat is None:
                raise OSError(errno.ENOENT, old_path)
            if stat.entry is not None:
                entry = _renamed(stat.entry)
                stat = PathStat(False, entry)
                if of is not None:
                    of.take_entry(entry)
            if old_parent_path is not None:
                self._keep_parent(tree, old_parent_path, gone=[old_path])
            self._stager.stage_now(tree, [(new_path, stat.entry), (old_path, None)], deleted_exist=True)
            self._objects_moved(tree, old_path, new_path, stat.entry, replaced)
            tree.remember(old_path, None)
            tree.remember(new_path, stat)
            if node is not None:
                self._table.rekey(node, path_key(tree.key, new_path))
                node.stat = stat
            else:
                self._inodes.detach_path(tree, new_path)

    def _rename_file_queued(self, tree: Tree, old_parent_path: str | None, old_path: str, new_path: str,
                            flags: int) -> None:
        """``_rename_file`` from memory, its two halves queued for the stager's next batch (one
        transaction): a file closed and renamed into place (``rsync``, ``git``, editors' saves)
        costs no database transaction of its own.  WouldBlock, before any change, unless memory
        knows both names, the file is stored and not being written (its lock free), and the
        directory it leaves keeps a marker (or it stays in that directory)."""
        old_stat, new_stat = self._known(tree, old_path), self._known(tree, new_path)
        if old_stat is _UNKNOWN or new_stat is _UNKNOWN:
            raise WouldBlock
        if old_stat is None or old_stat.is_dir or old_stat.entry is None:
            raise WouldBlock  # ENOENT, a directory or a file not stored yet: the worker decides
        if new_stat is not None:
            if flags & RENAME_NOREPLACE:
                raise OSError(errno.EEXIST, new_path)
            if new_stat.is_dir:
                raise WouldBlock  # EISDIR or not: the backend says
        if old_parent_path is not None and not _keeps_its_marker(tree, old_parent_path):
            raise WouldBlock  # the directory may need a marker: the backend is asked
        node = self._inodes.find(tree, old_path)
        if node is None:
            raise WouldBlock  # no inode the kernel knows (it looks a name up before renaming it)
        of = node.open_file
        if of is not None and not of.lock.acquire(blocking=False):
            raise WouldBlock  # an upload holds it
        try:
            if (of is not None and of.dirty) or not node.attached:
                raise WouldBlock  # written and not uploaded: the upload goes first
            entry = _renamed(old_stat.entry)
            stat = PathStat(False, entry)
            if of is not None:
                of.take_entry(entry)
            self._stager.put_many(tree, [(new_path, entry), (old_path, None)])
            self._objects_moved(tree, old_path, new_path, entry, new_stat.entry if new_stat is not None else None)
            unstaged_old = self._unstaged.node(tree, old_path)
            if unstaged_old is not None:
                self._unstaged.discard(tree, old_path, unstaged_old)
            unstaged_new = self._unstaged.node(tree, new_path)
            if unstaged_new is not None:
                self._unstaged.discard(tree, new_path, unstaged_new)
            tree.remember(old_path, None, pending=True)
            tree.remember(new_path, stat, pending=True)
            self._table.rekey(node, path_key(tree.key, new_path))
            node.stat = stat
            # listings of the backend lack the new name until the batch is written: the node
            # stands for it meanwhile, as for a file closed and not staged yet
            self._unstaged.add(node)
        finally:
            if of is not None:
                of.lock.release()

    def _objects_moved(self, tree: Tree, old_path: str, new_path: str, entry: Entry | None,
                       replaced: Entry | None) -> None:
        """Tell ``OwnedObjects`` that a rename staged ``entry`` at ``new_path``, over
        ``replaced`` (whose object may go if no handle reads it)."""
        self._owned.moved(tree, old_path, new_path, entry)
        target = self._inodes.find(tree, new_path)
        if replaced is not None and (target is None or target.open_file is None):
            self._owned.superseded(tree, new_path, replaced)  # the file renamed over

    def _known(self, tree: Tree, path: str):
        """What memory says ``path`` is (a file of this mount waiting for the stager, else the
        tree's cache): a PathStat, None (nothing there), or ``_UNKNOWN``."""
        unstaged = self._unstaged.node(tree, path)
        if unstaged is not None and unstaged.attached:
            return unstaged.stat
        hit = tree.cached(path)
        return _UNKNOWN if hit is None else hit[0]

    def _rename_dir(self, tree: Tree, old_parent_path: str | None, old_path: str, new_path: str,
                    new_stat: PathStat | None) -> None:
        old_prefix, new_prefix = dir_prefix(old_path), dir_prefix(new_path)
        # written files below the directory move with it: stage their bytes first (a file the
        # kernel wrote and just closed: once its release stored it), then list them all
        for node in self._table.nodes():
            of = node.open_file
            if of is not None and of.dirty and node.tree is tree and node.path.startswith(old_prefix):
                self._uploader.upload(of)
        self._stager.flush(tree)
        moved = list(iter_listing(self._backend, tree.repo, tree.ref, old_prefix, delimiter=""))
        items: list[tuple[str, Entry | None]] = []
        for item in moved:
            items.append((new_prefix + item.key[len(old_prefix):], item.entry))
        moved_keys = {new_prefix + item.key[len(old_prefix):] for item in moved}
        if new_stat is not None and new_stat.entry is not None and new_prefix not in moved_keys:
            items.append((new_prefix, None))  # the empty directory replaced
        items.extend((item.key, None) for item in moved)
        if old_parent_path is not None:
            self._keep_parent(tree, old_parent_path, gone=[old_prefix])
        self._stager.stage_now(tree, items, deleted_exist=True)  # listed just now
        tree.forget_dir_change(old_path)
        for item in moved:
            self._owned.moved(tree, item.key, new_prefix + item.key[len(old_prefix):], item.entry)
        tree.forget_all()
        # inodes below (and of) the directory now stand for the new paths
        with self._table.lock:
            if new_stat is not None:
                self._inodes.detach_path(tree, new_path)
            self._table.materialize_under(tree.key, old_path)
            for node in self._table.nodes():
                if node.tree is not tree or not node.attached:
                    continue
                if node.path == old_path or node.path.startswith(old_prefix):
                    path = new_path + node.path[len(old_path):]
                    self._table.rekey(node, path_key(tree.key, path))
                    node.expires = 0.0
            self._unstaged.moved_under(tree, old_prefix)

    # ------------------------------------------------------------------ markers

    def _keep_parent(self, tree: Tree, parent_path: str, gone: list[str]) -> None:
        """Before the keys ``gone`` leave directory ``parent_path``: if nothing else would keep
        the directory, give it a marker (an emptied directory stays until rmdir)."""
        if parent_path == "":
            return
        stat, _ = tree.stat(parent_path)
        if stat is None or not stat.is_dir or stat.entry is not None:
            return
        if tree.has_children(parent_path, ignore=tuple(gone)) or self._unstaged.any_under(tree, parent_path):
            return
        marker = self._uploader.upload_empty(tree, dir_prefix(parent_path), {})
        tree.remember(parent_path, PathStat(True, marker))
        node = self._inodes.find(tree, parent_path)
        if node is not None and node.kind is NodeKind.DIR:
            node.stat = PathStat(True, marker)


def _keeps_its_marker(tree: Tree, directory: str) -> bool:
    """Whether memory knows that ``directory`` has a marker of its own (or is the ref's root),
    so removing an entry from it never needs a marker made there (``_keep_parent``)."""
    if not directory:
        return True
    kept = tree.cached(directory)
    return kept is not None and kept[0] is not None and kept[0].entry is not None
