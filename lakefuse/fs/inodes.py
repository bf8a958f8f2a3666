"""Names to inodes: ``Inodes`` serves lookup, forget and getattr.

Owns which node a name stands for (repositories, refs, paths in a ref's tree, the control
directory and its files), making nodes (the only place that does), the freshness of a tree
node's stat (re-read from its tree once it expired: ``refresh``), and which tree a change
to a node goes to (``writable_tree``: EROFS outside branches).  Files created through the
mount but not uploaded yet are found here too (``lakefuse.fs.state.Unstaged``).

Lookup and getattr run on the adapter's event loop with ``blocking=False``: from memory, or a
quick read of the backend (``Tree.stat(quick=True)``), else ``WouldBlock``.  ``lookup`` of a
name in a tree directory is the hottest call of a mount: one inode-table lock, no call that is
not needed when the node exists.
"""

from __future__ import annotations

import errno
import time

from lakefuse.errors import LakefuseError, ReadOnly
from lakefuse.fs.attributes import NodeAttributes
from lakefuse.fs.backend import MountRef
from lakefuse.fs.native_answers import BRANCH_FILES_MOST, NativeAnswers
from lakefuse.fs.nodes import (
    CONTROL_FILES,
    REPOSITORIES_KEY,
    ROOT_INODE,
    Node,
    NodeKind,
    control_dir_key,
    control_file_key,
    path_key,
    repository_key,
)
from lakefuse.fs.replies import Attributes, WouldBlock
from lakefuse.fs.state import MountState
from lakefuse.fs.tree import CONTROL_DIR_NAME, MAX_NAME_BYTES, ROOT_STAT, PathStat, Tree, decode_name
from lakefuse.posix import TYPE_KEY

_DIR, _FILE = NodeKind.DIR, NodeKind.FILE
_INF = float("inf")
#: ``read_through_handlers``: files offered per hold of the inode table's lock
OFFERS_PER_LOCK = 1000


def _file_type(stat: PathStat | None) -> str | None:
    """``lakefuse-type`` of a file's entry (None: a regular file, or not known yet)."""
    entry = stat.entry if stat is not None else None
    if entry is None or not entry.metadata:
        return None
    return entry.metadata.get(TYPE_KEY)


def refuse_control_dir_name(parent: Node, name: str, code: int) -> None:
    """Refuse a change to the name of a branch's control directory (``name`` in the directory
    ``parent``).  ``code``: EEXIST where the change would make the name (mkdir, create: it is
    taken, and ``mkdir -p`` is content), EPERM where it would remove or replace it (unlink,
    rmdir, rename)."""
    if name == CONTROL_DIR_NAME and parent.path == "" and parent.kind is _DIR and parent.tree.is_branch:
        raise OSError(code, f"{CONTROL_DIR_NAME} is reserved")


class Inodes:
    def __init__(self, state: MountState, attributes: NodeAttributes):
        self._state = state
        self._table = state.table
        self._refs = state.refs
        self._attrs = attributes.get
        self._listed_attrs = attributes.listed
        self._listed_file_attrs = attributes.listed_file
        self._unstaged_files = state.unstaged.by_path  # read on the path of every lookup
        #: what the binding answers itself in commit and tag trees, once
        #: ``Files.enable_native_answers`` set this (``lakefuse.fs.native_answers``): offered
        #: each new inode of a file there (listings offer their directories' names)
        self.native_answers: NativeAnswers | None = None

    def set_root(self, repo: str | None, ref: str | None) -> None:
        """The mount's root: every repository, one repository, or one ref of one."""
        backend = self._state.backend
        if repo is None:
            root = Node(ROOT_INODE, NodeKind.REPOSITORIES, REPOSITORIES_KEY)
        elif ref is None:
            if not backend.repository_exists(repo):
                from lakefuse.errors import RepositoryNotFound

                raise RepositoryNotFound(f"repository {repo!r} not found")
            root = Node(ROOT_INODE, NodeKind.REPOSITORY, repository_key(repo))
        else:
            tree = self._refs.tree_for(repo, backend.resolve_ref(repo, ref))
            root = Node(ROOT_INODE, NodeKind.DIR, path_key(tree.key, ""), tree=tree, path="", stat=ROOT_STAT,
                        expires=_INF)
        root.lookups = 1
        self._table.set_root(root)

    # ------------------------------------------------------------------ lookup / forget / getattr

    def lookup(self, parent_ino: int, name: bytes | str, blocking: bool = True) -> Attributes:
        """The child ``name`` of a directory (its lookup count goes up by one).  Raises
        ENOENT; on immutable trees and watched branches returns attributes with ``ino == 0``
        instead (a negative entry the kernel may cache)."""
        parent = self._table.get(parent_ino)
        if name.__class__ is bytes:
            if len(name) > MAX_NAME_BYTES:
                raise OSError(errno.ENAMETOOLONG, "name too long")
            name = decode_name(name)
        elif len(name.encode("utf-8")) > MAX_NAME_BYTES:
            raise OSError(errno.ENAMETOOLONG, "name too long")
        if name in (".", ".."):
            raise OSError(errno.ENOENT, "no lookups of . and ..")
        if parent.kind is _DIR:  # the common case, kept short: a name in a ref's tree
            node = self._lookup_in_tree(parent, name, blocking)
        else:
            node = self._lookup_node(parent, name, blocking)
            self._table.add_lookup(node)
        if node is None:
            state = self._state
            tree = parent.tree
            ttl = state.immutable_ttl if tree.ttl is None else tree.ttl
            return Attributes(0, 0, 0, 0, state.uid, state.gid, ttl, ttl)
        return self._attrs(node)

    def _lookup_in_tree(self, parent: Node, name: str, blocking: bool) -> Node | None:
        """The node of ``name`` in the tree directory ``parent``, its lookup count taken; None
        for a name an immutable tree or a watched branch does not have (a negative entry the
        kernel may cache: on a branch, recorded in ``lakefuse.fs.negatives``)."""
        tree = parent.tree
        parent_path = parent.path
        if parent_path:
            path = f"{parent_path}/{name}"
        elif name == CONTROL_DIR_NAME and tree.is_branch:
            node = self.control_dir_node(tree)
            self._table.add_lookup(node)
            return node
        else:
            path = name
        stat, expires = self.stat_path(tree, path, blocking)
        if stat is None:
            if tree.ttl is None:
                return None
            if tree.change_feed is not None and self._state.negatives.handed_out(tree.key, parent.ino, name,
                                                                                tree.ttl):
                return None
            raise OSError(errno.ENOENT, path)
        return self.tree_node(tree, path, stat, expires, lookups=1)

    def _lookup_node(self, parent: Node, name: str, blocking: bool) -> Node:
        """The child ``name`` of a node that is not a tree directory (no lookup count taken)."""
        kind = parent.kind
        if kind is NodeKind.REPOSITORY:
            try:
                ref = self._refs.resolve(parent.repo, name, blocking)
            except LakefuseError as exc:
                if exc.errno == errno.EINVAL:  # not even a valid ref expression
                    raise OSError(errno.ENOENT, str(exc)) from None
                raise
            return self.ref_node(parent.repo, ref)
        if kind is NodeKind.REPOSITORIES:
            if name not in self._refs.repositories(blocking):
                raise OSError(errno.ENOENT, f"repository {name!r} not found")
            return self.repository_node(name)
        if kind is NodeKind.CONTROL_DIR:
            if name not in CONTROL_FILES:
                raise OSError(errno.ENOENT, f"{CONTROL_DIR_NAME}/{name}")
            return self.control_file_node(parent.tree, name)
        raise OSError(errno.ENOTDIR, "not a directory")

    def forget(self, items) -> None:
        for ino, count in items:
            self._table.forget(ino, count)

    def getattr(self, ino: int, blocking: bool = True) -> Attributes:
        node = self._table.get(ino)
        self.refresh(node, blocking)
        return self._attrs(node)

    # ------------------------------------------------------------------ nodes

    def repository_node(self, repo: str) -> Node:
        return self._table.child(repository_key(repo), NodeKind.REPOSITORY)

    def ref_node(self, repo: str, ref: MountRef) -> Node:
        """The directory of ``ref`` in repository ``repo`` (the root of its tree)."""
        tree = self._refs.tree_for(repo, ref)
        return self._table.child(path_key(tree.key, ""), _DIR, tree=tree, path="", stat=ROOT_STAT, expires=_INF)

    def control_dir_node(self, tree: Tree) -> Node:
        return self._table.child(control_dir_key(tree.key), NodeKind.CONTROL_DIR, tree=tree)

    def control_file_node(self, tree: Tree, name: str) -> Node:
        return self._table.child(control_file_key(tree.key, name), NodeKind.CONTROL_FILE, tree=tree)

    def tree_node(self, tree: Tree, path: str, stat: PathStat, expires: float, lookups: int = 0,
                  listed: bool = False) -> Node:
        """The node of ``path`` in ``tree`` (made if the table has none), now with ``stat``
        unless it is being written; its lookup count goes up by ``lookups``.  On the path of
        every lookup and listed entry: one lock, no other call when the node exists.

        ``listed``: for an entry of a listing.  A regular file's node made for one keeps no
        stat (``None``, expired): a walk of a million files leaves the kernel a million
        inodes, and their entries are what the daemon's memory would mostly hold.  The first
        request that needs the stat reads it again (``refresh``, ``ensure_stat``), from the
        tree's cache when it still has it; once read it stays."""
        kind = _DIR if stat.is_dir else _FILE
        table = self._table
        with table.lock:
            node = table.find_path(tree.key, path, named=True)
            if node is None or node.kind is not kind or (
                    node.stat is not stat and kind is _FILE and _file_type(node.stat) != _file_type(stat)):
                # a new node for a new kind of file (the kernel keeps an inode's type for life)
                entry = stat.entry if kind is _FILE and _file_type(stat) is None else None
                if listed and entry is not None:
                    stat, expires = None, 0.0
                node = table.child(path_key(tree.key, path), kind, tree=tree, path=path, stat=stat, expires=expires,
                                   replace=True)
                if entry is not None and self.native_answers is not None:
                    self.native_answers.offer(node.ino, tree, entry, expires)
            elif listed and node.stat is None:
                pass  # still not read: a listing does not keep it either
            else:
                of = node.open_file
                if (of is None or not of.dirty) and (node.stat is stat or tree.is_current(path, stat)):
                    self._entry_changing(node, stat)
                    node.stat, node.expires = stat, expires
            # InodeTable.add_lookup without its check for a dropped node: this one was just
            # found in, or put into, the table under its lock
            node.lookups += lookups
            return node

    def listed_entry(self, tree: Tree, path: str, stat: PathStat, expires: float, offer: bool = True) -> Attributes:
        """The attributes of ``path`` in ``tree`` for an entry of a listing that says ``stat``,
        its lookup count up by one.  A regular file the table holds no node for gets none
        (``InodeTable.add_listed``): what a walk of a million files leaves behind is mostly
        these.  ``offer``: a new number of a regular file is offered to the binding
        (``NativeAnswers.listing_offers``).  Under the table's lock (the listing's batch holds it)."""
        table = self._table
        found = table.peek_path(tree.key, path)
        plain_file = not stat.is_dir and stat.entry is not None and _file_type(stat) is None
        if found is None and plain_file:
            ino = table.add_listed(tree, path)
            if offer and self.native_answers is not None:
                self.native_answers.offer(ino, tree, stat.entry, expires)
            return self._listed_file_attrs(ino, tree, stat)
        if found.__class__ is int and plain_file:
            table.add_listed_lookup(found)
            return self._listed_file_attrs(found, tree, stat)
        node = self.tree_node(tree, path, stat, expires, lookups=1, listed=True)
        return self._listed_attrs(node, stat)

    def named_entry(self, tree: Tree, path: str, stat: PathStat, offer: bool = True) -> int | None:
        """The inode number to report for ``path`` in ``tree`` in an entry without attributes
        (``lakefuse.fs.walkers``): the one the table holds, else a new one without a lookup
        count (offered to the binding with ``offer``, as ``listed_entry``).  None: not a
        regular file the table may number so (the entry needs its attributes).  Under the
        table's lock (the listing's batch holds it)."""
        if stat.is_dir or stat.entry is None or _file_type(stat) is not None:
            return None
        found = self._table.peek_path(tree.key, path)
        if found is None:
            ino = self._table.add_listed(tree, path, lookups=0)
            if offer and self.native_answers is not None:
                self.native_answers.offer(ino, tree, stat.entry)
            return ino
        if found.__class__ is int:
            return found
        return found.ino if found.kind is _FILE else None

    def listing_offers(self, tree: Tree, path: str) -> float:
        """How many of the regular files a listing of directory ``path`` of ``tree`` numbers
        are offered to the binding, from the listing's start (``NativeAnswers.listing_offers``)."""
        native = self.native_answers
        return 0 if native is None else native.listing_offers(tree, path)

    def read_through_handlers(self, node: Node, blocking: bool) -> None:
        """``node``, a branch file, is being opened read-only through the handlers.  The first
        time in its directory (``NativeAnswers.first_open_in``) the files of the directory
        that listings numbered and did not offer to the binding are offered now: its other
        files are likely read next.  Not ``blocking`` (on the event loop): WouldBlock then,
        and the offers are made on a worker thread."""
        native = self.native_answers
        if native is None or not native.opens_branch_files:
            return
        tree = node.tree
        dir_path = node.path.rpartition("/")[0]
        if not native.first_open_in(tree, dir_path, mark=blocking):
            return
        if not blocking:
            raise WouldBlock
        files = tree.known_files(dir_path, BRANCH_FILES_MOST)
        table, key = self._table, tree.key
        for start in range(0, len(files or ()), OFFERS_PER_LOCK):
            with table.lock:  # lookups and listings go on between batches
                for path, entry, expires in files[start:start + OFFERS_PER_LOCK]:
                    found = table.peek_path(key, path)
                    if found is None or (entry.metadata and TYPE_KEY in entry.metadata):
                        continue
                    if found.__class__ is int:
                        ino = found
                    elif found is not node and found.kind is _FILE and found.open_file is None and (
                            found.stat is None or found.stat.entry is entry):
                        ino = found.ino
                    else:  # being opened, or holding another state of the file than the tree's
                        continue
                    if not native.may_hold(ino):
                        native.offer(ino, tree, entry, expires)

    def ino_of(self, tree: Tree, path: str) -> int:
        """The inode number the table holds for ``path`` in ``tree`` (a node's, or a listed
        file's without one), or 0."""
        with self._table.lock:
            found = self._table.peek_path(tree.key, path)
        if found is None:
            return 0
        return found if found.__class__ is int else found.ino

    def find(self, tree: Tree, path: str) -> Node | None:
        """The node the kernel knows for ``path`` in ``tree``, if any."""
        return self._table.find_path(tree.key, path)

    def dir_changed(self, tree: Tree, *paths: str, now_ns: int | None = None) -> None:
        """Entries were made or removed in the directories ``paths`` of ``tree``: their mtime
        and ctime are now (``Tree.touch_dirs``), and their nodes' attributes are computed again."""
        tree.touch_dirs(paths, time.time_ns() if now_ns is None else now_ns)
        find = self._table.find_path
        for path in paths:
            node = find(tree.key, path)
            if node is not None:
                node.attrs_cache = None

    def detach_path(self, tree: Tree, path: str) -> None:
        """``path`` is gone (or replaced): its node no longer stands for it."""
        node = self._table.find_path(tree.key, path)
        if node is not None:
            self._table.detach(node)

    # ------------------------------------------------------------------ stats

    def stat_path(self, tree: Tree, path: str, blocking: bool) -> tuple[PathStat | None, float]:
        unstaged = self._unstaged_files
        if unstaged:
            node = unstaged.get((tree.key, path))
            if node is not None and node.attached:
                return node.stat, _INF
        hit = tree.cached(path) if path else None
        if hit is not None:
            return hit
        return tree.stat(path, quick=not blocking)  # on the event loop: a quick point read, or WouldBlock

    def ensure_stat(self, node: Node, blocking: bool) -> None:
        """Read the stat of a file whose node a listing made without one (see ``tree_node``)."""
        if node.stat is None and node.kind is _FILE:
            self.refresh(node, blocking)

    def refresh(self, node: Node, blocking: bool) -> None:
        """Re-read a branch node's stat once its cached one expired."""
        if node.kind not in (_DIR, _FILE) or node.path == "" or not node.attached:
            return
        if node.expires > time.monotonic():
            return
        of = node.open_file
        if of is not None and (of.dirty or of.spool is not None):
            return
        stat, expires = self.stat_path(node.tree, node.path, blocking)
        if stat is None or stat.is_dir != (node.kind is _DIR) or (
                stat is not node.stat and _file_type(stat) != _file_type(node.stat)):
            if of is not None:
                return  # open files stay readable
            raise OSError(errno.ENOENT, f"{node.path!r} no longer exists")
        self._entry_changing(node, stat)
        node.stat, node.expires = stat, expires

    def _entry_changing(self, node: Node, stat: PathStat) -> None:
        """``node`` is about to hold ``stat``: if that names another entry, the binding opens
        the file no more (``lakefuse.fs.native_answers``)."""
        if (self.native_answers is not None and node.stat is not None and stat.entry is not None
                and node.stat.entry is not stat.entry):
            self.native_answers.file_changed(node.ino)

    def writable_tree(self, node: Node) -> Tree:
        """The tree a modification of ``node``'s children or of ``node`` itself goes to."""
        if node.kind in (NodeKind.REPOSITORIES, NodeKind.REPOSITORY):
            raise OSError(errno.EPERM, "repositories and refs cannot be created or changed through the mount")
        if node.kind in (NodeKind.CONTROL_DIR, NodeKind.CONTROL_FILE):
            raise OSError(errno.EPERM, f"{CONTROL_DIR_NAME}/ is reserved")
        tree = node.tree
        if not tree.writable:
            if self._state.read_only:
                raise ReadOnly("the mount is read-only")
            raise ReadOnly(f"{tree.ref.name!r} is a {tree.ref.kind.value}, not a branch: read-only")
        return tree
