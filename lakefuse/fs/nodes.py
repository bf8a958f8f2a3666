"""The inode table of a mount: what each inode number the kernel holds stands for.

Owns ``Node`` (one inode: a listing of repositories, a repository, a directory or file of a
ref's tree, the control directory or one of its files), the lookup counts the kernel's
``lookup``/``forget`` protocol maintains, and the index (what -> inode) that keeps one inode
per path while the kernel knows it.  A node leaves the table when the kernel has forgotten it
and no file handle uses it.

Node keys (what a node stands for, the index's key) are plain tuples made only in this
module (``path_key`` and its siblings): a tuple is the cheapest hashable record (a NamedTuple
costs several times more).  A node of a ref's tree (a file or directory: there may be
millions, one per entry a walk listed) keeps no key of its own: the index finds it by its
tree's key and its path (``InodeTable.find_path``), in one dictionary per tree.

A regular file a listing reported (``find``, ``ls``, a Spark listing: the kernel holds an inode
for each entry of a READDIRPLUS reply) gets no ``Node`` at first, only an inode number and its
path (``InodeTable.add_listed``): about 160 bytes instead of about 290.  Listed files take their
inode numbers in blocks of ``INO_BLOCK`` per tree, so the number alone tells the tree.  The
first request that needs more than the listing's reply (a ``getattr``, ``lookup``, ``open``,
a rename of its directory) makes its node (``get``, ``find_path``): callers only ever see nodes.
A listed file is attached (``Node.attached``) while the index still maps its path to its number.

A file a listing reported by name alone (``lakefuse.fs.walkers``) gets a listed file's number
with no lookup count (``add_listed(..., lookups=0)``), so a later lookup of it answers the inode
number the listing reported.  The kernel holds no inode for it, so nothing forgets it: the
newest ``UNREFERENCED_LISTED`` of them are kept, and ``find_path`` does not count them (there is
no node the kernel knows).
"""

from __future__ import annotations

import collections
import enum
import errno
import threading
from typing import Callable, Hashable

from lakefuse.fs.tree import CONTROL_DIR_NAME, Tree

ROOT_INODE = 1
#: inode numbers listed files take per tree at a time (see the module docstring)
INO_BLOCK = 1 << 12
#: listed files reported by name alone kept with their inode numbers (see the module docstring)
UNREFERENCED_LISTED = 1 << 19

#: the files of a branch's control directory (``lakefuse.fs.control``), in listing order
CONTROL_FILES = ("branch", "commit", "head", "merge", "reset", "status", "tag")
#: those a write runs an operation through (the others are read-only)
WRITABLE_CONTROL_FILES = frozenset(("branch", "commit", "merge", "reset", "tag"))

#: the index key of a node: made by the constructors below, compared and hashed, never taken apart
NodeKey = tuple

#: the node listing every repository (the root of a mount of everything)
REPOSITORIES_KEY: NodeKey = ("repositories",)


def repository_key(repo: str) -> NodeKey:
    """The node of a repository (it lists branches and tags)."""
    return ("repo", repo)


_PATH = "t"


def path_key(tree_key: Hashable, path: str) -> NodeKey:
    """The node of ``path`` in the tree ``tree_key`` (``Tree.key``); '' is the ref itself."""
    return (_PATH, tree_key, path)


def control_dir_key(tree_key: Hashable) -> NodeKey:
    """The node of a branch's ``.lakefuse`` directory."""
    return ("ctl", tree_key)


def control_file_key(tree_key: Hashable, name: str) -> NodeKey:
    """The node of the file ``name`` in a branch's ``.lakefuse`` directory."""
    return ("ctlf", tree_key, name)


class NodeKind(enum.Enum):
    REPOSITORIES = "repositories"  # lists repositories
    REPOSITORY = "repository"  # lists branches and tags
    DIR = "dir"  # a directory of a ref's tree (path '' = the ref itself)
    FILE = "file"
    CONTROL_DIR = "control-dir"  # <branch>/.lakefuse
    CONTROL_FILE = "control-file"  # <branch>/.lakefuse/{commit,head,status}

    @property
    def is_dir(self) -> bool:
        return self is not NodeKind.FILE and self is not NodeKind.CONTROL_FILE


class Node:
    """One inode.  Its slots are what every node needs: a walk of a million files makes a
    million nodes (what a node of a repository or a control file needs besides, it reads
    from its key)."""

    __slots__ = ("ino", "kind", "_key", "tree", "path", "lookups", "stat", "expires", "open_file", "attached",
                 "cache_id", "attrs_cache")

    def __init__(self, ino: int, kind: NodeKind, key: NodeKey, *, tree=None, path: str = "", stat=None,
                 expires: float = 0.0):
        self.ino = ino
        self.kind = kind
        # a tree node's key is its tree's and its path (see the module docstring)
        self._key = None if key[0] == _PATH else key
        self.tree = tree
        self.path = path
        self.lookups = 0
        self.stat = stat  # PathStat of a tree node (None: a file's, not read yet: Inodes.tree_node)
        self.expires = expires  # monotonic time until which ``stat`` is trusted
        self.open_file = None  # OpenFile while handles are open
        self.attached = True  # still the node of ``key`` (false once unlinked or replaced)
        self.cache_id = None  # identity of the object whose pages the kernel may have cached
        self.attrs_cache = None  # (stat, Attributes): attributes computed from that stat

    @property
    def repo(self) -> str | None:
        """The repository this node is in (None: the listing of repositories)."""
        if self.tree is not None:
            return self.tree.repo
        key = self._key
        return key[1] if key[0] == "repo" else None

    @property
    def name(self) -> str:
        """A control file's name ('' for other nodes)."""
        key = self._key
        return key[2] if key is not None and key[0] == "ctlf" else ""

    @property
    def key(self) -> NodeKey:
        """What this node stands for (``path_key`` and its siblings)."""
        key = self._key
        return key if key is not None else path_key(self.tree.key, self.path)

    def __repr__(self) -> str:
        return f"Node({self.ino}, {self.kind.value}, {self.key!r}, lookups={self.lookups})"

    @property
    def uri(self) -> str | None:
        """``lakefs://repo/ref/path`` of what this node shows (``lakefs://repo`` for a
        repository directory; None for the root): for log lines."""
        if not self.repo:
            return None
        parts = [self.repo]
        ref = self.tree.ref.name if self.tree is not None else None
        if ref:
            parts.append(ref)
            if self.path:
                parts.append(self.path.rstrip("/"))
            if self.kind is NodeKind.CONTROL_FILE:
                parts.append(f"{CONTROL_DIR_NAME}/{self.name}")
        return "lakefs://" + "/".join(parts)


class InodeTable:
    """Thread-safe (one re-entrant lock, ``lock``, which callers may hold across several calls)."""

    def __init__(self):
        self.lock = threading.RLock()
        self._nodes: dict[int, Node] = {}
        self._index: dict[NodeKey, Node] = {}  # nodes other than a tree's
        #: tree key -> path -> its node, or the inode number of a listed file without one
        self._paths: dict[Hashable, dict[str, Node | int]] = {}
        self._next_ino = ROOT_INODE + 1
        # listed files without a node (see the module docstring): inode number -> path, the
        # lookup counts that are not 1, and the tree of each block of inode numbers
        self._listed: dict[int, str] = {}
        self._listed_lookups: dict[int, int] = {}
        self._block_trees: dict[int, Tree] = {}
        self._tree_blocks: dict[int, list[int]] = {}  # id(tree) -> [next inode number, end of its block]
        self._unreferenced: collections.deque[int] = collections.deque()  # listed by name alone, oldest first
        #: called (under ``lock``) with each inode number that stops standing for anything
        #: (forgotten by the kernel, or listed by name alone and dropped), if set
        self.on_forgotten: Callable[[int], None] | None = None

    def _tree_paths(self, tree_key: Hashable) -> dict[str, Node | int]:
        paths = self._paths.get(tree_key)
        if paths is None:
            paths = self._paths[tree_key] = {}
        return paths

    def _slot(self, key: NodeKey) -> tuple[dict, Hashable]:
        """The dictionary of the index that holds ``key``, and the key within it."""
        if key[0] == _PATH:
            return self._tree_paths(key[1]), key[2]
        return self._index, key

    def _node_slot(self, node: Node) -> tuple[dict, Hashable]:
        """``_slot`` of the key ``node`` stands for."""
        key = node._key
        if key is not None:
            return self._index, key
        return self._tree_paths(node.tree.key), node.path

    def set_root(self, node: Node) -> None:
        with self.lock:
            self._nodes[ROOT_INODE] = node
            index, key = self._node_slot(node)
            index[key] = node

    def get(self, ino: int) -> Node:
        node = self._nodes.get(ino)
        if node is None:
            with self.lock:
                node = self._nodes.get(ino)
                if node is None:
                    path = self._listed.get(ino)
                    if path is None:
                        raise OSError(errno.ESTALE, f"unknown inode {ino}")
                    node = self._node_of_listed(ino, path)
        return node

    def find_path(self, tree_key: Hashable, path: str, named: bool = False) -> Node | None:
        """The node of ``path_key(tree_key, path)``, if any (one call: per lookup); a file
        listed by name alone only with ``named`` (its node is made, without a lookup count)."""
        paths = self._paths.get(tree_key)
        if paths is None:
            return None
        node = paths.get(path)
        if node.__class__ is int:
            with self.lock:
                node = paths.get(path)
                if node.__class__ is int:
                    if not named and self._listed_lookups.get(node) == 0:
                        return None  # listed by name alone: the kernel knows no inode for it
                    node = self._node_of_listed(node, self._listed[node])
        return node

    def nodes(self) -> list[Node]:
        """Every node (not the listed files without one: ``listed_files``)."""
        with self.lock:
            return list(self._nodes.values())

    # ------------------------------------------------------------------ listed files

    def peek_path(self, tree_key: Hashable, path: str) -> Node | int | None:
        """What the index holds for ``path`` in the tree ``tree_key``: its node, the inode
        number of a listed file without one, or None.  Under ``lock``."""
        paths = self._paths.get(tree_key)
        return paths.get(path) if paths is not None else None

    def add_listed(self, tree: Tree, path: str, lookups: int = 1) -> int:
        """A new inode number for the regular file ``path`` of ``tree`` that a listing reports,
        with a lookup count of ``lookups`` (0: reported by name alone) and no node.  Under
        ``lock``."""
        cursor = self._tree_blocks.get(id(tree))
        if cursor is None or cursor[0] == cursor[1]:
            start = -(-self._next_ino // INO_BLOCK) * INO_BLOCK
            self._next_ino = start + INO_BLOCK
            self._block_trees[start // INO_BLOCK] = tree  # keeps the tree (and so its id) alive
            cursor = self._tree_blocks[id(tree)] = [start, start + INO_BLOCK]
        ino = cursor[0]
        cursor[0] = ino + 1
        self._listed[ino] = path
        self._tree_paths(tree.key)[path] = ino
        if lookups != 1:
            self._listed_lookups[ino] = lookups
            if not lookups:
                unreferenced = self._unreferenced
                unreferenced.append(ino)
                if len(unreferenced) > UNREFERENCED_LISTED:
                    self._drop_unreferenced(unreferenced.popleft())
        return ino

    def _drop_unreferenced(self, ino: int) -> None:
        """Forget the listed file ``ino`` if it still has no lookup count.  Under ``lock``."""
        if self._listed_lookups.get(ino) == 0:
            self._forget_listed(ino, 0)

    def add_listed_lookup(self, ino: int) -> None:
        """A listing reported the listed file ``ino`` again.  Under ``lock``."""
        lookups = self._listed_lookups.get(ino, 1) + 1
        if lookups == 1:  # it was reported by name alone
            del self._listed_lookups[ino]
        else:
            self._listed_lookups[ino] = lookups

    def listed_files(self, tree_key: Hashable, known_to_kernel: bool = False) -> list[tuple[int, str]]:
        """``(inode number, path)`` of the listed files of a tree that have no node; with
        ``known_to_kernel``, not those listed by name alone (the kernel has no inode for them)."""
        with self.lock:
            paths = self._paths.get(tree_key)
            if not paths:
                return []
            if known_to_kernel:
                lookups = self._listed_lookups
                return [(ino, path) for path, ino in paths.items() if ino.__class__ is int and lookups.get(ino) != 0]
            return [(ino, path) for path, ino in paths.items() if ino.__class__ is int]

    def materialize_under(self, tree_key: Hashable, path: str) -> None:
        """Make the nodes of the listed files at or below ``path`` in a tree ('': all of them)."""
        prefix = f"{path}/" if path else ""
        for ino, listed_path in self.listed_files(tree_key):
            if listed_path.startswith(prefix) or listed_path == path:
                with self.lock:
                    if self._listed_lookups.get(ino) == 0:  # the kernel knows no inode: no node
                        self._drop_unreferenced(ino)
                        continue
                self.get(ino)

    def detach_listed(self, tree_key: Hashable) -> None:
        """The listed files of a tree no longer stand for their paths (see ``detach``)."""
        with self.lock:
            paths = self._paths.get(tree_key)
            if paths:
                for path in [path for path, ino in paths.items() if ino.__class__ is int]:
                    del paths[path]

    def _node_of_listed(self, ino: int, path: str) -> Node:
        """The node a listed file gets once a request needs it.  Under ``lock``."""
        tree = self._block_trees[ino // INO_BLOCK]
        del self._listed[ino]
        node = Node(ino, NodeKind.FILE, (_PATH, None, path), tree=tree, path=path)
        node.lookups = self._listed_lookups.pop(ino, 1)
        self._nodes[ino] = node
        paths = self._paths.get(tree.key)
        if paths is not None and paths.get(path) == ino:
            paths[path] = node
        else:
            node.attached = False
        return node

    def _forget_listed(self, ino: int, count: int) -> None:
        path = self._listed.get(ino)
        if path is None:
            return
        left = self._listed_lookups.pop(ino, 1) - count
        if left > 0:
            self._listed_lookups[ino] = left
            return
        del self._listed[ino]
        paths = self._paths.get(self._block_trees[ino // INO_BLOCK].key)
        if paths is not None and paths.get(path) == ino:
            del paths[path]
        if self.on_forgotten is not None:
            self.on_forgotten(ino)

    def child(self, key: NodeKey, kind: NodeKind, *, tree=None, path: str = "", stat=None,
              expires: float = 0.0, replace: bool = False) -> Node:
        """The node of ``key`` if it exists with this kind (unless ``replace``), else a new one
        with these fields (which replaces any node at that key)."""
        with self.lock:
            index, slot = self._slot(key)
            node = index.get(slot)
            if node.__class__ is int:
                node = self._node_of_listed(node, self._listed[node])
            if node is not None and node.kind is kind and not replace:
                return node
            if node is not None:
                self.detach(node)
            node = Node(self._next_ino, kind, key, tree=tree, path=path, stat=stat, expires=expires)
            self._next_ino += 1
            self._nodes[node.ino] = node
            index[slot] = node
            return node

    def _unindex(self, node: Node) -> None:
        index, slot = self._node_slot(node)
        if index.get(slot) is node:
            del index[slot]

    def detach(self, node: Node) -> None:
        """``node`` no longer stands for its key (unlinked, replaced); it stays in the table
        until forgotten."""
        with self.lock:
            self._unindex(node)
            node.attached = False
            node.attrs_cache = None  # its link count is 0 now
            self.drop_if_unused(node)

    def rekey(self, node: Node, new_key: NodeKey) -> Node | None:
        """Move ``node`` to ``new_key`` (a tree node: to the path in it); returns the node that
        was there (now detached)."""
        with self.lock:
            self._unindex(node)
            index, slot = self._slot(new_key)
            replaced = index.get(slot)
            if replaced.__class__ is int:
                replaced = self._node_of_listed(replaced, self._listed[replaced])
            if replaced is not None and replaced is not node:
                replaced.attached = False
                replaced.attrs_cache = None
                self.drop_if_unused(replaced)
            if new_key[0] == _PATH:
                node.path = new_key[2]
            else:
                node._key = new_key
            node.attached = True
            index[slot] = node
            return replaced

    def add_lookup(self, node: Node, count: int = 1) -> None:
        with self.lock:
            node.lookups += count
            if self._nodes.get(node.ino) is not node:  # dropped meanwhile: bring it back
                self._nodes[node.ino] = node
                if node.attached:
                    index, slot = self._node_slot(node)
                    if slot not in index:
                        index[slot] = node

    def forget(self, ino: int, count: int) -> None:
        with self.lock:
            node = self._nodes.get(ino)
            if node is None:
                self._forget_listed(ino, count)
                return
            if ino == ROOT_INODE:
                return
            node.lookups = max(0, node.lookups - count)
            self.drop_if_unused(node)

    def drop_if_unused(self, node: Node) -> None:
        with self.lock:
            if node.ino == ROOT_INODE or node.lookups > 0 or node.open_file is not None:
                return
            if self._nodes.get(node.ino) is node:
                del self._nodes[node.ino]
                if self.on_forgotten is not None:
                    self.on_forgotten(node.ino)
            self._unindex(node)
