"""The state every part of a mounted filesystem shares: ``MountState``.

Owns the options of the mount (owners, timeouts, the spool directory and its reserves of new
spool files, one more per repository whose files are made where they become objects), the
inode table, the handle table, the trees and name caches
(``lakefuse.fs.refs.Refs``), the files created but not staged yet (``Unstaged``) with the
``Stager`` that stages closed ones in batches, the ``DirectoryLearner`` that learns big
directories whole in the background (``lakefuse.fs.learner``), and the one lock that guards the small shared
structures (handles, trees, name caches, unstaged files; the inode table has its own).  The parts of
``LakeFilesystem`` (inodes, attributes, files, uploads, readdir, namespace, metadata, xattrs,
control files, change feed) each get this object, and the parts they call, when they are
made; none of them holds state another part needs.
"""

from __future__ import annotations

import collections
import math
import os
import threading
import time
from typing import Callable

from lakefuse.fs.backend import InPlaceObjects, LakeBackend
from lakefuse.fs.handles import HandleTable
from lakefuse.fs.learner import DirectoryLearner
from lakefuse.fs.negatives import NegativeEntries
from lakefuse.fs.nodes import InodeTable, Node, NodeKind
from lakefuse.fs.owned import OwnedObjects
from lakefuse.fs.owners import Owners
from lakefuse.fs.refs import Refs
from lakefuse.fs.replies import Invalidations
from lakefuse.fs.spool import SpoolReserve
from lakefuse.fs.stager import Stager
from lakefuse.fs.tree import METADATA_ENTRIES, PathStat, Tree, dir_prefix


#: how long a staged file still shows in listings that began before it was staged
RECENT_SECONDS = 30.0


class Unstaged:
    """Files created through this mount and not staged yet (being written, or closed and
    waiting in the ``Stager``), and directories made here whose marker waits in the
    ``Stager``: until then the backend does not know them, so lookups,
    listings, emptiness checks (rmdir, rename) and ``.lakefuse/status`` ask here too.  Keyed
    ``(tree key, path)``; a node that was unlinked or replaced (not ``attached``) no longer
    counts."""

    def __init__(self, lock: threading.Lock):
        self._lock = lock
        #: (tree key, path) -> node; read without the lock on the path of every lookup
        self.by_path: dict[tuple, Node] = {}
        #: (tree key, path) -> (node, when it was staged), oldest first, for ``RECENT_SECONDS``:
        #: a listing whose backend pages were read before a file was staged still shows it
        self._recent: collections.OrderedDict[tuple, tuple[Node, float]] = collections.OrderedDict()

    def node(self, tree: Tree, path: str) -> Node | None:
        return self.by_path.get((tree.key, path))

    def add(self, node: Node) -> None:
        with self._lock:
            self.by_path[(node.tree.key, node.path)] = node

    def discard(self, tree: Tree, path: str, node: Node) -> None:
        """``node`` is no longer an unstaged file at ``path`` (uploaded, closed, unlinked)."""
        with self._lock:
            if self.by_path.get((tree.key, path)) is node:
                del self.by_path[(tree.key, path)]

    def entry_staged(self, tree: Tree, key: str, entry) -> None:
        """The ``Stager`` staged ``entry`` at ``key`` (a file's path, or a directory marker's
        ``path/``): the file or directory counts no more, unless it has been written again
        since; listings of its directory kept meanwhile lack it."""
        path = key[:-1] if key.endswith("/") else key
        tree.staged(path, entry)
        if entry is None:
            return  # a deletion: no file of this mount to count out
        now = time.monotonic()
        key = (tree.key, path)
        with self._lock:
            node = self.by_path.get(key)
            if node is not None and node.stat is not None and node.stat.entry is entry:
                del self.by_path[key]
                self._recent.pop(key, None)
                self._recent[key] = (node, now)
            recent = self._recent
            while recent and next(iter(recent.values()))[1] < now - RECENT_SECONDS:
                recent.popitem(last=False)

    def listed_in(self, tree: Tree, path: str, seen: set[str], since: float) -> list[tuple[str, None, PathStat]]:
        """The unstaged files directly in directory ``path`` not in ``seen``, and those staged
        after ``since`` (when the listing began: its pages may lack them), as listing rows
        ``(name, None, stat)`` in name order."""
        prefix = dir_prefix(path)
        found: dict[str, PathStat] = {}
        with self._lock:
            recent = []
            for key, (node, staged_at) in reversed(self._recent.items()):  # newest first
                if staged_at < since:
                    break  # staged before the listing began: its pages have it
                recent.append((key, node))
            for (tree_key, child_path), child in [*self.by_path.items(), *recent]:
                if (tree_key == tree.key and child_path.startswith(prefix) and child.attached
                        and child.path == child_path):
                    name = child_path[len(prefix):]
                    if "/" not in name and name not in seen:
                        found[name] = child.stat
        return sorted(((name, None, stat) for name, stat in found.items()), key=lambda item: item[0])

    def names_in(self, tree: Tree, path: str) -> list[str]:
        """The names of the unstaged files and directories directly in directory ``path``."""
        return [name for name, _key, _stat in self.listed_in(tree, path, set(), math.inf)]

    def any_under(self, tree: Tree, path: str) -> bool:
        prefix = dir_prefix(path)
        with self._lock:
            return any(k == tree.key and p.startswith(prefix) and n.attached for (k, p), n in self.by_path.items())

    def paths(self, tree: Tree) -> list[str]:
        return [path for path, _is_dir in self.status_keys(tree)]

    def status_keys(self, tree: Tree) -> list[tuple[str, bool]]:
        """``(path, is_dir)`` of the unstaged files and directories of ``tree``, by path: a
        file being written, or a directory made whose marker waits for the stager."""
        with self._lock:
            return sorted((p, n.kind is NodeKind.DIR) for (k, p), n in self.by_path.items()
                          if k == tree.key and n.attached)

    def moved_under(self, tree: Tree, old_prefix: str) -> None:
        """After a directory rename moved the nodes under ``old_prefix`` (``node.path`` is
        their new path): file them under their new paths."""
        with self._lock:
            for (key, path), node in list(self.by_path.items()):
                if key == tree.key and path.startswith(old_prefix):
                    del self.by_path[(key, path)]
                    self.by_path[(key, node.path)] = node


#: how long the kernel and a mount trust a branch's names, attributes and listings when the
#: change feed tells them what other writers changed (``lakefuse.fs.changes``): the feed names
#: every change within a poll, so this only bounds how long a change the feed could not report
#: would show (a walk's ``du`` or ``rsync`` after this long sends a LOOKUP per file)
WATCHED_BRANCH_TTL = 3600.0


class MountState:
    """What the parts of one ``LakeFilesystem`` share (see the module docstring)."""

    def __init__(self, backend: LakeBackend, *, spool_dir: str, read_only: bool, uid: int | None,
                 gid: int | None, branch_ttl: float, immutable_ttl: float, readdir_page: int,
                 change_feed: bool, watched_branch_ttl: float, uid_map=None, gid_map=None,
                 force_owner: bool = False, metadata_entries: int = METADATA_ENTRIES):
        self.backend = backend
        self.read_only = read_only
        #: the default owner: of entries that store none, implied directories, refs, repositories
        self.uid = os.getuid() if uid is None else uid
        self.gid = os.getgid() if gid is None else gid
        self.owners = Owners(self.uid, self.gid, uid_map=uid_map, gid_map=gid_map, force=force_owner)
        self.branch_ttl = branch_ttl
        self.immutable_ttl = immutable_ttl
        self.watched_branch_ttl = watched_branch_ttl
        #: entries a directory listing asks the tree for at a time.  The kernel asks for a
        #: listing in big buffers (one reply held 2,000 entries, 336 KB), and each page costs a
        #: branch two SQL queries: a page of 5,000 lists most directories in one.
        self.readdir_page = readdir_page
        #: paths each tree's metadata cache keeps, and entries of its kept listing pages
        self.metadata_entries = metadata_entries
        self.spool_dir = spool_dir
        os.makedirs(spool_dir, exist_ok=True)
        #: new spool files, made ahead on a thread of their own, in the spool directory ...
        self.spools = SpoolReserve(spool_dir)
        #: ... or, for a repository whose storage is a local directory, where they become its
        #: objects (``add_in_place``: the uploader asks its storage once)
        self.in_place_spools: dict[str, SpoolReserve] = {}
        self.mount_time_ns = time.time_ns()
        #: the backend's change feed, if this mount is watched (see ``lakefuse.fs.changes``)
        self.change_feed = getattr(backend, "branch_changes", None) if change_feed else None
        self.lock = threading.Lock()  # handles, trees, name caches, unstaged files
        self.table = InodeTable()
        self.handles = HandleTable(self.lock)
        self.unstaged = Unstaged(self.lock)
        self.stager = Stager(backend, staged=self.unstaged.entry_staged)
        self.owned = OwnedObjects(backend, self.stager)
        self.learner = DirectoryLearner()  # big directories learnt whole in the background
        #: missing names of watched branches the kernel may remember (``lakefuse.fs.negatives``)
        self.negatives = NegativeEntries()
        self.refs = Refs(self)
        #: tells the kernel to drop names and attributes an operation through this mount made
        #: stale (a merge or reset through ``.lakefuse/``); set by the adapter, else None
        self.kernel_invalidator: Callable[[Invalidations], None] | None = None

    def spools_for(self, repo: str) -> SpoolReserve:
        """The reserve new spools of files of ``repo`` come from (never blocks)."""
        return self.in_place_spools.get(repo, self.spools)

    def add_in_place(self, repo: str, site: InPlaceObjects) -> None:
        """From now on, make the spools of ``repo``'s files where they become its objects."""
        with self.lock:
            if repo not in self.in_place_spools:
                self.in_place_spools[repo] = SpoolReserve(site.directory, in_place=site)

    def close_spools(self) -> None:
        """Stop making spool files ahead, and delete the waiting ones."""
        self.spools.close()
        with self.lock:
            reserves = list(self.in_place_spools.values())
        for reserve in reserves:
            reserve.close()
