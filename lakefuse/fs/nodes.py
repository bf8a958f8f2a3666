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
"""

from __future__ import annotations

import enum
import errno
import threading
from typing import Hashable

from lakefuse.fs.tree import CONTROL_DIR_NAME

ROOT_INODE = 1

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
        self._paths: dict[Hashable, dict[str, Node]] = {}  # tree key -> path -> node
        self._next_ino = ROOT_INODE + 1

    def _tree_paths(self, tree_key: Hashable) -> dict[str, Node]:
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
            raise OSError(errno.ESTALE, f"unknown inode {ino}")
        return node

    def find_path(self, tree_key: Hashable, path: str) -> Node | None:
        """The node of ``path_key(tree_key, path)``, if any (one call: per lookup and listed
        entry)."""
        paths = self._paths.get(tree_key)
        return paths.get(path) if paths is not None else None

    def nodes(self) -> list[Node]:
        with self.lock:
            return list(self._nodes.values())

    def child(self, key: NodeKey, kind: NodeKind, *, tree=None, path: str = "", stat=None,
              expires: float = 0.0, replace: bool = False) -> Node:
        """The node of ``key`` if it exists with this kind (unless ``replace``), else a new one
        with these fields (which replaces any node at that key)."""
        with self.lock:
            index, slot = self._slot(key)
            node = index.get(slot)
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
            if node is None or ino == ROOT_INODE:
                return
            node.lookups = max(0, node.lookups - count)
            self.drop_if_unused(node)

    def drop_if_unused(self, node: Node) -> None:
        with self.lock:
            if node.ino == ROOT_INODE or node.lookups > 0 or node.open_file is not None:
                return
            if self._nodes.get(node.ino) is node:
                del self._nodes[node.ino]
            self._unindex(node)
