"""What other writers changed: ``ChangeFeed`` turns a backend's change feed into kernel
invalidations.

With a change feed (``change_feed=True`` and a backend with ``branch_changes``) branch
metadata is kept ``watched_branch_ttl`` seconds instead of ``branch_ttl``, and ``poll``
(the mount calls it every ``--change-poll`` seconds) asks each branch read so far what
others changed (``Tree.poll_changes``), forgets it, and names the kernel entries and
attributes to invalidate (``Invalidations``): the changed paths' nodes, the directories
above them that the kernel knows and that no longer exist, and the negative entries it was
given for those names (``lakefuse.fs.negatives``).  A file being written through
this mount keeps its version.  ``changed_here`` does the same at once for a head this mount
moved itself (a merge or reset through ``.lakefuse/``).  Either way the binding stops answering
missing names in the branch's directories (``NativeAnswers.tree_changed``).
"""

from __future__ import annotations

import logging

from lakefuse.errors import LakefuseError
from lakefuse.fs.inodes import Inodes
from lakefuse.fs.nodes import Node, NodeKind
from lakefuse.fs.replies import Invalidations
from lakefuse.fs.state import MountState
from lakefuse.fs.tree import Tree, ancestors

log = logging.getLogger(__name__)


class ChangeFeed:
    def __init__(self, state: MountState, inodes: Inodes):
        self._state = state
        self._inodes = inodes

    @property
    def watched(self) -> bool:
        return self._state.change_feed is not None

    def poll(self) -> Invalidations:
        out = Invalidations()
        if self._state.change_feed is None:
            return out
        for tree in self._state.refs.trees():
            if tree.change_feed is None:
                continue
            try:
                changed = tree.poll_changes()
            except LakefuseError as exc:
                log.warning("change feed of %s/%s: %s", tree.repo, tree.branch, exc)
                continue
            if changed is None:
                self._native_names_changed(tree, out)
                for node in self._state.table.nodes():
                    if node.tree is tree and node.attached and node.path:
                        self._stale(node, out)
                self._stale_listed(tree, out)
                self._state.negatives.invalidate_tree(tree.key, out.entries)
            elif changed:
                self._invalidate_paths(tree, changed, out)
        self._state.negatives.take_evicted(out.entries)
        return out

    def changed_here(self, tree: Tree) -> None:
        """An operation through this mount moved ``tree``'s head or dropped staged changes
        (a merge or reset through ``.lakefuse/``): forget what the tree knew and tell the kernel
        now, not at the next poll, to drop its names and attributes of the branch's paths (as
        a poll does when another process moved the head)."""
        tree.forget_all()
        out = Invalidations()
        self._native_names_changed(tree, out)
        for node in self._state.table.nodes():
            if node.tree is tree and node.path:
                self._stale(node, out)
        self._stale_listed(tree, out)
        self._state.negatives.invalidate_tree(tree.key, out.entries)
        invalidate = self._state.kernel_invalidator
        if out and invalidate is not None:
            invalidate(out)

    def _native_names_changed(self, tree: Tree, out: Invalidations) -> None:
        """The binding no longer answers missing names in ``tree``'s directories, and the
        kernel drops the negative entries it gave (``lakefuse.fs.native_answers``)."""
        if self._inodes.native_answers is not None:
            self._inodes.native_answers.tree_changed(tree, out.entries)

    def _invalidate_paths(self, tree: Tree, paths: set[str], out: Invalidations) -> None:
        find = self._inodes.find
        native = self._inodes.native_answers
        if native is not None and not native.opens_branch_files:
            native = None
        for path in paths:
            node = find(tree, path)
            if node is not None:
                self._stale(node, out)
            if native is not None:  # the binding opens the file no more (``lakefuse.fs.native_answers``)
                native.file_changed(self._inodes.ino_of(tree, path))
        above = ancestors(paths) - paths
        self._may_exist_now(tree, paths | above, out)
        for path in above:  # still there? (a directory implied by keys may not be)
            node = find(tree, path)
            if node is None or node.lookups <= 0:
                continue
            node.expires = 0.0
            try:
                self._inodes.refresh(node, blocking=True)
            except (OSError, LakefuseError):
                self._stale(node, out)

    def _may_exist_now(self, tree: Tree, paths: set[str], out: Invalidations) -> None:
        """The negative entries the kernel was given for ``paths`` (a changed path, or a
        directory above one) no longer hold (``lakefuse.fs.negatives``)."""
        names = []
        in_known_dirs = []
        find = self._inodes.find
        for path in paths:
            parent_path, _, name = path.rpartition("/")
            parent = find(tree, parent_path)
            if parent is None:
                continue
            in_known_dirs.append((parent.ino, name))
            if find(tree, path) is None:  # else the kernel's entry is a positive one (``_stale`` saw to it)
                names.append((parent.ino, name))
        self._state.negatives.invalidate_names(names, out.entries)
        native = self._inodes.native_answers
        if native is not None:  # every name in a directory whose names the binding has
            native.names_may_exist(in_known_dirs, out.entries)

    def _stale_listed(self, tree: Tree, out: Invalidations) -> None:
        """``_stale`` for the listed files of ``tree`` that have no node (nothing to forget
        but the kernel's name and attributes of them)."""
        for ino, path in self._state.table.listed_files(tree.key, known_to_kernel=True):
            self._invalidate_in_kernel(tree, path, ino, out)

    def _stale(self, node: Node, out: Invalidations) -> None:
        """``node``'s stat is no longer trusted, and neither are the kernel's name and
        attributes of it."""
        if node.kind not in (NodeKind.DIR, NodeKind.FILE):
            return
        of = node.open_file
        if of is not None and (of.dirty or of.spool is not None):
            return  # being written through this mount: its version wins (as in Inodes.refresh)
        node.expires = 0.0
        if node.lookups > 0:
            self._invalidate_in_kernel(node.tree, node.path, node.ino if node.kind is NodeKind.FILE else None, out)

    def _invalidate_in_kernel(self, tree: Tree, path: str, file_ino: int | None, out: Invalidations) -> None:
        """Name ``path``'s entry in its directory, and the attributes of the file ``file_ino``
        (None: a directory, whose attributes stay), for the kernel to drop."""
        parent_path, _, name = path.rpartition("/")
        parent = self._inodes.find(tree, parent_path)
        if parent is not None:
            out.entries.append((parent.ino, name.encode("utf-8")))
        if file_ino is not None:
            out.inodes.append(file_ino)
