"""The inode table of a mount: what each inode number the kernel holds stands for.

Owns ``Node`` (one inode: a listing of repositories, a repository, a directory or file of a
ref's tree, the control directory or one of its files), the lookup counts the kernel's
``lookup``/``forget`` protocol maintains, and the index (what -> inode) that keeps one inode
per path while the kernel knows it.  A node leaves the table when the kernel has forgotten it
and no file handle uses it.

Node keys (what a node stands for, the index's key) are plain tuples made only in this
module (``path_key`` and its siblings, and ``InodeTable.find_path``): one is made per lookup
and per listed entry, and a tuple is the cheapest hashable record (a NamedTuple costs several
times more).
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
    __slots__ = ("ino", "kind", "key", "repo", "tree", "path", "lookups", "stat", "expires",
                 "open_file", "attached", "entry_timeout", "name", "cache_id", "attrs_cache")

    def __init__(self, ino: int, kind: NodeKind, key: NodeKey, *, repo=None, tree=None, path: str = "",
                 stat=None, expires: float = 0.0, entry_timeout: float | None = None, name: str = ""):
        self.ino = ino
        self.kind = kind
        self.key = key
        self.repo = repo
        self.tree = tree
        self.path = path
        self.lookups = 0
        self.stat = stat  # PathStat of a tree node
        self.expires = expires  # monotonic time until which ``stat`` is trusted
        self.open_file = None  # OpenFile while handles are open
        self.attached = True  # still the node of ``key`` (false once unlinked or replaced)
        self.entry_timeout = entry_timeout  # overrides the tree's timeout for this name
        self.name = name
        self.cache_id = None  # identity of the object whose pages the kernel may have cached
        self.attrs_cache = None  # (stat, Attributes): attributes computed from that stat

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
        self._index: dict[NodeKey, Node] = {}
        self._next_ino = ROOT_INODE + 1

    def set_root(self, node: Node) -> None:
        with self.lock:
            self._nodes[ROOT_INODE] = node
            self._index[node.key] = node

    def get(self, ino: int) -> Node:
        node = self._nodes.get(ino)
        if node is None:
            raise OSError(errno.ESTALE, f"unknown inode {ino}")
        return node

    def find_path(self, tree_key: Hashable, path: str) -> Node | None:
        """The node of ``path_key(tree_key, path)``, if any (one call: per lookup and listed
        entry)."""
        return self._index.get((_PATH, tree_key, path))

    def nodes(self) -> list[Node]:
        with self.lock:
            return list(self._nodes.values())

    def child(self, key: NodeKey, kind: NodeKind, *, repo=None, tree=None, path: str = "", stat=None,
              expires: float = 0.0, name: str = "", replace: bool = False) -> Node:
        """The node of ``key`` if it exists with this kind (unless ``replace``), else a new one
        with these fields (which replaces any node at that key)."""
        with self.lock:
            node = self._index.get(key)
            if node is not None and node.kind is kind and not replace:
                return node
            if node is not None:
                self.detach(node)
            node = Node(self._next_ino, kind, key, repo=repo, tree=tree, path=path, stat=stat, expires=expires,
                        name=name)
            self._next_ino += 1
            self._nodes[node.ino] = node
            self._index[key] = node
            return node

    def detach(self, node: Node) -> None:
        """``node`` no longer stands for its key (unlinked, replaced); it stays in the table
        until forgotten."""
        with self.lock:
            if self._index.get(node.key) is node:
                del self._index[node.key]
            node.attached = False
            node.attrs_cache = None  # its link count is 0 now
            self.drop_if_unused(node)

    def rekey(self, node: Node, new_key: NodeKey) -> Node | None:
        """Move ``node`` to ``new_key``; returns the node that was there (now detached)."""
        with self.lock:
            if self._index.get(node.key) is node:
                del self._index[node.key]
            replaced = self._index.get(new_key)
            if replaced is not None and replaced is not node:
                replaced.attached = False
                replaced.attrs_cache = None
                self.drop_if_unused(replaced)
            node.key = new_key
            node.attached = True
            self._index[new_key] = node
            return replaced

    def add_lookup(self, node: Node, count: int = 1) -> None:
        with self.lock:
            node.lookups += count
            if self._nodes.get(node.ino) is not node:  # dropped meanwhile: bring it back
                self._nodes[node.ino] = node
                if node.attached and node.key not in self._index:
                    self._index[node.key] = node

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
            if self._index.get(node.key) is node:
                del self._index[node.key]
