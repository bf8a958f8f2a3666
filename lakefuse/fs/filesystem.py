"""What lakeFS repositories look like as a filesystem: defined here and only here.

``LakeFilesystem`` implements every filesystem operation a mount needs in terms of a
``LakeBackend``, with plain Python types and no FUSE library: the adapter in ``lakefuse.fuse``
only translates.  Layout of a mount (the root may also be one repository, or one ref)::

    /<repo>/                       branches and tags (readdir); any ref expression, commit ID
                                   or unique prefix of one resolves on lookup (read-only)
    /<repo>/<branch>/a/b.csv       objects, split on '/'; directories implied by keys, or
                                   persisted empty as a zero-size marker object ``a/``
    /<repo>/<branch>/.lakefuse/    control directory (hidden from readdir):
        commit                     write a message and close -> commit; read -> last result
        head                       the branch's head commit ID
        status                     uncommitted changes: "+ key", "~ key", "- key"

Semantics:

- Timeouts: names and attributes under a tag or commit never change (long kernel timeouts,
  kept in the kernel's caches).  Under a branch they are trusted ``branch_ttl`` seconds, so a
  change by another process shows within about that long; with a change feed
  (``change_feed=True`` and a backend with ``branch_changes``) ``watched_branch_ttl`` seconds
  instead, and ``poll_changes`` (the mount calls it every ``--change-poll`` seconds) forgets
  what other writers changed and says which kernel entries to invalidate.
- Writes (branches only, else EROFS): a file being written lives in a local spool file, seeded
  with the object's bytes on the first write that does not truncate it; it is uploaded and
  staged on fsync, flush (close) or a commit; reads through the mount see the spool at once.
  A big file written sequentially is hashed while it is written (and the spool's pages go to
  disk meanwhile), and its spool file is moved into a storage namespace on this machine at
  close (or streamed to remote storage while it is written), so close costs little more than
  an fsync.  A file created or truncated write-only gets direct I/O (``_writes_from_empty_only``).
- ``unlink``, ``rmdir`` (ENOTEMPTY unless empty), ``mkdir`` (marker object), ``rename`` of files
  and whole directories (a metadata move: one staging transaction, no data copied).  When the
  last entry of a directory goes away, a marker keeps the directory, as POSIX expects.
- chmod and utime store the mode and mtime (user metadata ``lakefuse-mode`` and
  ``lakefuse-mtime-ns``, plus the entry's mtime); chown is accepted and ignored.
- xattrs: ``user.<k>`` is user metadata ``k`` (settable on branches); ``lakefuse.checksum``,
  ``lakefuse.physical_address``, ``lakefuse.content_type`` (settable) and ``lakefuse.size``
  describe the object.
- Names longer than 255 bytes: ENAMETOOLONG.  Hard links, symlinks, device nodes: EPERM.

Thread-safety: every method may be called from any thread, concurrently.  Methods taking
``blocking=False`` raise ``WouldBlock`` instead of calling the backend, so the adapter can
answer from memory on the event loop and go to a worker thread only when needed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import logging
import os
import stat as stat_mode
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable

from lakefuse.errors import LakefuseError, ReadOnly
from lakefuse.fs.backend import LakeBackend, RefKind, ResolvedRef
from lakefuse.fs.nodes import ROOT_INODE, InodeTable, Node, NodeKind
from lakefuse.fs.passthrough import NO_GRANT, BackingFiles, Grant, Passthrough, PassthroughState
from lakefuse.fs.spool import Spool, SpoolTail
from lakefuse.fs.tree import (
    CONTROL_DIR_NAME,
    ancestors,
    MAX_NAME_BYTES,
    PathStat,
    Tree,
    check_name,
    dir_prefix,
    join,
)
from lakefuse.graveler.model import Entry

log = logging.getLogger(__name__)

MODE_KEY = "lakefuse-mode"
MTIME_NS_KEY = "lakefuse-mtime-ns"
INTERNAL_METADATA = (MODE_KEY, MTIME_NS_KEY)
DEFAULT_FILE_MODE = 0o644
DEFAULT_DIR_MODE = 0o755
BLOCK_SIZE = 1024 * 1024  # st_blksize: tells cp & co. to move 1 MiB at a time
CONTROL_FILES = ("commit", "head", "status")
STATUS_LIMIT = 100_000
XATTR_USER = "user."
XATTR_OBJECT_NAMESPACE = "lakefuse."
XATTR_OBJECT = ("lakefuse.checksum", "lakefuse.physical_address", "lakefuse.content_type", "lakefuse.size")
ENOATTR = errno.ENODATA
#: a file written sequentially from empty gets a ``SpoolTail`` once it is this big: hashing its
#: bytes as they arrive (storage on this machine) or streaming them to storage (remote)
TAIL_MIN_BYTES = 8 * 1024 * 1024
#: how much a hashing tail reads from the spool at a time
HASH_CHUNK = 4 * 1024 * 1024


_DIR, _FILE = NodeKind.DIR, NodeKind.FILE


class WouldBlock(Exception):
    """Raised by ``blocking=False`` calls that would have to ask the backend."""


@dataclass(slots=True)
class Attributes:
    ino: int
    mode: int
    size: int
    mtime_ns: int
    uid: int
    gid: int
    entry_timeout: float
    attr_timeout: float
    nlink: int = 1
    blksize: int = BLOCK_SIZE
    #: the adapter's translation of these attributes (opaque here): Attributes of an unchanged
    #: node are reused, so the adapter may keep its reply object in them and skip rebuilding it
    wire: object = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def blocks(self) -> int:
        return (self.size + 511) // 512


@dataclass(slots=True)
class Invalidations:
    """What the kernel may have cached that is no longer true (from ``poll_changes``): the
    names ``(parent inode, name)`` and the attributes of inodes."""

    entries: list[tuple[int, bytes]] = dataclasses.field(default_factory=list)
    inodes: list[int] = dataclasses.field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.entries or self.inodes)


@dataclass(slots=True)
class OpenResult:
    fh: int
    keep_cache: bool = False
    direct_io: bool = False
    backing_id: int = 0  # FUSE passthrough: the kernel reads this registered local file itself


class OpenFile:
    """The shared state of every open handle of one file node."""

    __slots__ = ("node", "lock", "handles", "spool", "dirty", "entry", "mtime_ns", "metadata",
                 "content_type", "mtime_explicit", "seq_end", "tail", "uncached_writes", "passthrough",
                 "direct_handles")

    def __init__(self, node: Node, entry: Entry | None):
        self.node = node
        self.lock = threading.RLock()
        self.handles = 0
        self.spool: Spool | None = None
        self.dirty = False
        self.entry = entry  # the object a spool starts from (the latest one opened)
        self.mtime_ns = _entry_mtime_ns(entry) if entry else time.time_ns()
        self.metadata: dict[str, str] = dict(entry.metadata) if entry else {}
        self.content_type = entry.content_type if entry else None
        self.mtime_explicit = False
        self.seq_end: int | None = None  # end of the bytes appended in order to an empty spool
        self.tail: SpoolTail | None = None  # hashing, or streaming upload, of those bytes
        self.uncached_writes = False  # written through a direct-I/O handle since the last upload
        self.passthrough = PassthroughState()
        self.direct_handles = 0  # open handles with direct I/O (see LakeFilesystem._new_file_handle)


class FileHandle:
    """One open(2): reads the object it opened (``entry``) until the file gets a spool.
    ``direct_io``: the kernel sends this handle's writes without keeping them in its page
    cache (see ``_writes_from_empty_only``); ``passthrough``: the handle names its file's
    backing file (see ``lakefuse.fs.passthrough``)."""

    __slots__ = ("open_file", "writable", "entry", "reader", "lock", "direct_io", "passthrough")

    def __init__(self, open_file: OpenFile, writable: bool, entry: Entry | None, direct_io: bool = False):
        self.open_file = open_file
        self.writable = writable
        self.entry = entry
        self.reader = None
        self.lock = threading.Lock()
        self.direct_io = direct_io
        self.passthrough = False


class ControlHandle:
    __slots__ = ("node", "written", "dirty", "snapshot")

    def __init__(self, node: Node):
        self.node = node
        self.written = bytearray()
        self.dirty = False
        self.snapshot: bytes | None = None


class DirHandle:
    __slots__ = ("node", "static", "emitted", "names", "buffer", "after", "exhausted", "extras_done", "lock")

    def __init__(self, node: Node):
        self.node = node
        self.static: list[tuple[str, Node]] | None = None  # small listings, computed at once
        #: position -> (key to resume after, name); key None: '.', '..' or a file being written
        self.emitted: list[tuple[str | None, str]] = []
        self.names: set[str] = set()
        self.buffer: deque = deque()
        self.after = ""
        self.exhausted = False
        self.extras_done = False
        self.lock = threading.Lock()


def _entry_mtime_ns(entry: Entry) -> int:
    precise = entry.metadata.get(MTIME_NS_KEY) if entry.metadata else None
    if precise is not None:
        try:
            value = int(precise)
            if value // 1_000_000_000 == entry.mtime:
                return value
        except ValueError:
            pass
    return entry.mtime * 1_000_000_000


def _entry_mode(entry: Entry | None, default: int) -> int:
    if entry is not None and entry.metadata:
        value = entry.metadata.get(MODE_KEY)
        if value is not None:
            try:
                return int(value, 8) & 0o7777
            except ValueError:
                pass
    return default


def _writes_from_empty_only(flags: int, truncated: bool) -> bool:
    """Whether an open(2) may get direct I/O for its writes: write-only, of a file it creates
    or truncates (``cp``, ``>``).  The kernel then hands the writer's bytes straight to us
    instead of first copying them into its page cache as well: half the memory traffic, and
    no page cache that the written data would also occupy.  Only when no other handle of the
    file is open (see ``LakeFilesystem._new_file_handle``); after the upload the kernel's
    cache is not trusted to hold the new bytes (``OpenFile.uncached_writes``)."""
    return (flags & os.O_ACCMODE) == os.O_WRONLY and truncated


def _xattr_namespace_supported(name: str) -> bool:
    return name.startswith(XATTR_USER) or name.startswith(XATTR_OBJECT_NAMESPACE)


def _xattr_namespace_unsupported(name: str) -> OSError:
    """security.*, system.* (ACLs), trusted.*: not supported here, said with ENOTSUP rather than
    "no such attribute" (ENODATA).  Tools remember ENOTSUP per filesystem: ``ls -l`` then stops
    asking for every file's SELinux label and ACL (two round trips per entry otherwise)."""
    return OSError(errno.ENOTSUP, f"extended attribute namespace of {name!r} not supported")


def _decode(name: bytes | str) -> str:
    if isinstance(name, str):
        return name
    try:
        return name.decode("utf-8")
    except UnicodeDecodeError:
        raise OSError(errno.EILSEQ, "file names must be valid UTF-8") from None


class LakeFilesystem:
    def __init__(self, backend: LakeBackend, *, spool_dir: str, repo: str | None = None, ref: str | None = None,
                 read_only: bool = False, uid: int | None = None, gid: int | None = None,
                 branch_ttl: float = 1.0, immutable_ttl: float = 86400.0, readdir_page: int = 1000,
                 change_feed: bool = False, watched_branch_ttl: float = 60.0):
        self.backend = backend
        #: the backend's change feed, if this filesystem is watched (see ``poll_changes``)
        self._change_feed = getattr(backend, "branch_changes", None) if change_feed else None
        self.watched_branch_ttl = watched_branch_ttl
        self.read_only = read_only
        self.uid = os.getuid() if uid is None else uid
        self.gid = os.getgid() if gid is None else gid
        self.branch_ttl = branch_ttl
        self.immutable_ttl = immutable_ttl
        self.readdir_page = readdir_page
        self.spool_dir = spool_dir
        os.makedirs(spool_dir, exist_ok=True)
        self.mount_time_ns = time.time_ns()
        self.table = InodeTable()
        self._trees: dict[tuple, Tree] = {}
        self._handles: dict[int, object] = {}
        self._next_fh = 1
        self._lock = threading.Lock()  # trees, handles, small caches
        self._repo_cache: tuple[float, set[str]] | None = None
        self._ref_cache: dict[tuple[str, str], tuple[float, ResolvedRef]] = {}
        self._unstaged: dict[tuple, Node] = {}  # (tree key, path) -> created file not uploaded yet
        self._stream_upload = getattr(backend, "upload_stream", None)  # optional: see SpoolTail
        self._stores_locally: dict[str, bool] = {}  # repo -> backend.stores_locally(repo)
        self._local_file = getattr(backend, "local_file", None)  # optional: see enable_passthrough
        self.passthrough: Passthrough | None = None
        self._passthrough_branches = False
        self.root_repo = repo
        self.root_ref = ref
        if repo is None:
            root = Node(ROOT_INODE, NodeKind.REPOSITORIES, ("repositories",))
        elif ref is None:
            if not backend.repository_exists(repo):
                from lakefuse.errors import RepositoryNotFound

                raise RepositoryNotFound(f"repository {repo!r} not found")
            root = Node(ROOT_INODE, NodeKind.REPOSITORY, ("repo", repo), repo=repo)
        else:
            resolved = backend.resolve_ref(repo, ref)
            tree = self._tree_for(repo, resolved)
            root = Node(ROOT_INODE, NodeKind.DIR, ("t", tree.key, ""), repo=repo, tree=tree, path="",
                        stat=PathStat(True, None), expires=float("inf"))
        root.lookups = 1
        self.table.set_root(root)

    # ================================================================== helpers

    def _node(self, ino: int) -> Node:
        return self.table.get(ino)

    def _tree_for(self, repo: str, ref: ResolvedRef) -> Tree:
        if ref.is_branch:
            key = (repo, "branch", ref.name, None)
        else:
            key = (repo, ref.kind.value, ref.name, ref.commit_id)
        with self._lock:
            tree = self._trees.get(key)
            if tree is None:
                writable = ref.is_branch and not self.read_only
                feed = self._change_feed if ref.is_branch else None
                ttl = None if not ref.is_branch else self.watched_branch_ttl if feed else self.branch_ttl
                tree = Tree(self.backend, repo, ref, writable=writable, ttl=ttl, change_feed=feed)
                self._trees[key] = tree
            return tree

    def _ttl(self, tree: Tree | None) -> float:
        if tree is None:
            return self.branch_ttl
        return self.immutable_ttl if tree.ttl is None else tree.ttl

    def _resolve(self, repo: str, name: str, blocking: bool) -> ResolvedRef:
        now = time.monotonic()
        hit = self._ref_cache.get((repo, name))
        if hit is not None and hit[0] > now:
            return hit[1]
        if not blocking:
            raise WouldBlock
        ref = self.backend.resolve_ref(repo, name)
        with self._lock:
            if len(self._ref_cache) > 10_000:
                self._ref_cache.clear()
            self._ref_cache[(repo, name)] = (now + self._ref_timeout(ref), ref)
        return ref

    def _ref_timeout(self, ref: ResolvedRef) -> float:
        if ref.kind is RefKind.COMMIT and ref.name == ref.commit_id:
            return self.immutable_ttl  # a full commit ID never changes meaning
        if ref.kind is RefKind.TAG:
            return min(60.0, self.immutable_ttl)
        return self.branch_ttl

    def _repositories(self, blocking: bool) -> set[str]:
        now = time.monotonic()
        cached = self._repo_cache
        if cached is not None and cached[0] > now:
            return cached[1]
        if not blocking:
            raise WouldBlock
        repos = set(self.backend.list_repositories())
        self._repo_cache = (now + self.branch_ttl, repos)
        return repos

    def _writable_tree(self, node: Node) -> Tree:
        """The tree a modification of ``node``'s children or of ``node`` itself goes to."""
        if node.kind in (NodeKind.REPOSITORIES, NodeKind.REPOSITORY):
            raise OSError(errno.EPERM, "repositories and refs cannot be created or changed through the mount")
        if node.kind in (NodeKind.CONTROL_DIR, NodeKind.CONTROL_FILE):
            raise OSError(errno.EPERM, f"{CONTROL_DIR_NAME}/ is reserved")
        tree = node.tree
        if not tree.writable:
            if self.read_only:
                raise ReadOnly("the mount is read-only")
            raise ReadOnly(f"{tree.ref.name!r} is a {tree.ref.kind.value}, not a branch: read-only")
        return tree

    def _tree_node(self, tree: Tree, path: str, stat: PathStat, expires: float, lookups: int = 0) -> Node:
        """The node of ``path`` in ``tree`` (made if the table has none), now with ``stat``
        unless it is being written; its lookup count goes up by ``lookups``.  On the path of
        every lookup and listed entry: one lock, no other call when the node exists."""
        kind = _DIR if stat.is_dir else _FILE
        key = ("t", tree.key, path)
        table = self.table
        with table.lock:
            node = table.find(key)
            if node is None or node.kind is not kind:
                node = table.child(key, kind, lambda ino: Node(
                    ino, kind, key, repo=tree.repo, tree=tree, path=path, stat=stat, expires=expires))
            else:
                of = node.open_file
                if of is None or not of.dirty:
                    node.stat, node.expires = stat, expires
            # InodeTable.add_lookup without its check for a dropped node: this one was just
            # found in, or put into, the table under its lock
            node.lookups += lookups
            return node

    def _stat_path(self, tree: Tree, path: str, blocking: bool) -> tuple[PathStat | None, float]:
        unstaged = self._unstaged
        if unstaged:
            node = unstaged.get((tree.key, path))
            if node is not None and node.attached:
                return node.stat, float("inf")
        hit = tree.cached(path) if path else None
        if hit is not None:
            return hit
        if not blocking and path:
            raise WouldBlock
        return tree.stat(path)

    def _refresh(self, node: Node, blocking: bool) -> None:
        """Re-read a branch node's stat once its cached one expired."""
        if node.kind not in (NodeKind.DIR, NodeKind.FILE) or node.path == "" or not node.attached:
            return
        if node.expires > time.monotonic():
            return
        of = node.open_file
        if of is not None and (of.dirty or of.spool is not None):
            return
        stat, expires = self._stat_path(node.tree, node.path, blocking)
        if stat is None or stat.is_dir != (node.kind is NodeKind.DIR):
            if of is not None:
                return  # open files stay readable
            raise OSError(errno.ENOENT, f"{node.path!r} no longer exists")
        node.stat, node.expires = stat, expires

    # ================================================================== attributes

    def _attrs(self, node: Node) -> Attributes:
        """The attributes of ``node``; those of a tree file or directory are computed once per
        stat (listings and lookups of big directories ask for them again and again)."""
        cached = node.attrs_cache
        stat = node.stat
        if cached is not None and cached[0] is stat and node.open_file is None:
            return cached[1]
        attrs = self._compute_attrs(node)
        if stat is not None and node.open_file is None and node.path and node.kind in (NodeKind.FILE, NodeKind.DIR):
            node.attrs_cache = (stat, attrs)
        return attrs

    def _compute_attrs(self, node: Node) -> Attributes:
        kind = node.kind
        tree = node.tree
        ttl = self._ttl(tree)
        if kind is NodeKind.FILE:
            of = node.open_file
            entry = node.stat.entry if node.stat is not None else None
            spool = of.spool if of is not None else None
            if spool is not None:
                size, mtime_ns = spool.size(), of.mtime_ns
                mode = _entry_mode(of.entry, DEFAULT_FILE_MODE) if MODE_KEY not in of.metadata else \
                    int(of.metadata[MODE_KEY], 8)
            elif entry is not None:
                size, mtime_ns, mode = entry.size, _entry_mtime_ns(entry), _entry_mode(entry, DEFAULT_FILE_MODE)
            else:
                size, mtime_ns, mode = 0, self.mount_time_ns, DEFAULT_FILE_MODE
            if of is not None and MODE_KEY in of.metadata:
                mode = int(of.metadata[MODE_KEY], 8)
            return Attributes(node.ino, stat_mode.S_IFREG | mode, size, mtime_ns, self.uid, self.gid,
                              ttl, ttl)
        if kind is NodeKind.CONTROL_FILE:
            mode = 0o644 if node.name == "commit" else 0o444
            return Attributes(node.ino, stat_mode.S_IFREG | mode, 0, time.time_ns(), self.uid, self.gid, 0.0, 0.0)
        # directories
        mtime_ns = self.mount_time_ns
        mode = DEFAULT_DIR_MODE
        entry_timeout = ttl
        if kind is NodeKind.DIR:
            marker = node.stat.entry if node.stat is not None else None
            if marker is not None:
                mtime_ns = _entry_mtime_ns(marker)
                mode = _entry_mode(marker, DEFAULT_DIR_MODE)
            elif tree is not None and not tree.is_branch and tree.ref.commit_time:
                mtime_ns = tree.ref.commit_time * 1_000_000_000
            if node.entry_timeout is not None:
                entry_timeout = node.entry_timeout
        elif kind in (NodeKind.REPOSITORIES, NodeKind.REPOSITORY):
            ttl = entry_timeout = self.branch_ttl
        else:  # control dir
            ttl = entry_timeout = 0.0
        return Attributes(node.ino, stat_mode.S_IFDIR | mode, 0, mtime_ns, self.uid, self.gid, entry_timeout, ttl)

    # ================================================================== lookup / forget / getattr

    def lookup(self, parent_ino: int, name: bytes | str, blocking: bool = True) -> Attributes:
        """The child ``name`` of a directory (its lookup count goes up by one).  Raises
        ENOENT; on immutable trees returns attributes with ``ino == 0`` instead (a negative
        entry the kernel may cache)."""
        parent = self._node(parent_ino)
        if name.__class__ is bytes:
            if len(name) > MAX_NAME_BYTES:
                raise OSError(errno.ENAMETOOLONG, "name too long")
            name = _decode(name)
        elif len(name.encode("utf-8")) > MAX_NAME_BYTES:
            raise OSError(errno.ENAMETOOLONG, "name too long")
        if name in (".", ".."):
            raise OSError(errno.ENOENT, "no lookups of . and ..")
        if parent.kind is NodeKind.DIR:  # the common case, kept short: a name in a ref's tree
            node = self._lookup_in_tree(parent, name, blocking)
        else:
            node = self._lookup_node(parent, name, blocking)
            self.table.add_lookup(node)
        if node is None:
            ttl = self.immutable_ttl
            return Attributes(0, 0, 0, 0, self.uid, self.gid, ttl, ttl)
        return self._attrs(node)

    def _lookup_in_tree(self, parent: Node, name: str, blocking: bool) -> Node | None:
        """The node of ``name`` in the tree directory ``parent``, its lookup count taken; None
        for a name an immutable tree does not have (a negative entry the kernel may cache)."""
        tree = parent.tree
        parent_path = parent.path
        if parent_path:
            path = f"{parent_path}/{name}"
        elif name == CONTROL_DIR_NAME and tree.is_branch:
            key = ("ctl", tree.key)
            node = self.table.child(key, NodeKind.CONTROL_DIR, lambda ino: Node(
                ino, NodeKind.CONTROL_DIR, key, repo=tree.repo, tree=tree))
            self.table.add_lookup(node)
            return node
        else:
            path = name
        stat, expires = self._stat_path(tree, path, blocking)
        if stat is None:
            if tree.ttl is None:
                return None
            raise OSError(errno.ENOENT, path)
        return self._tree_node(tree, path, stat, expires, lookups=1)

    def _lookup_node(self, parent: Node, name: str, blocking: bool) -> Node:
        """The child ``name`` of a node that is not a tree directory (no lookup count taken)."""
        kind = parent.kind
        if kind is NodeKind.REPOSITORY:
            try:
                ref = self._resolve(parent.repo, name, blocking)
            except LakefuseError as exc:
                if exc.errno == errno.EINVAL:  # not even a valid ref expression
                    raise OSError(errno.ENOENT, str(exc)) from None
                raise
            tree = self._tree_for(parent.repo, ref)
            key = ("t", tree.key, "")
            node = self.table.child(key, NodeKind.DIR, lambda ino: Node(
                ino, NodeKind.DIR, key, repo=parent.repo, tree=tree, path="", stat=PathStat(True, None),
                expires=float("inf")))
            node.entry_timeout = self._ref_timeout(ref)
            return node
        if kind is NodeKind.REPOSITORIES:
            if name not in self._repositories(blocking):
                raise OSError(errno.ENOENT, f"repository {name!r} not found")
            key = ("repo", name)
            return self.table.child(key, NodeKind.REPOSITORY, lambda ino: Node(
                ino, NodeKind.REPOSITORY, key, repo=name))
        if kind is NodeKind.CONTROL_DIR:
            if name not in CONTROL_FILES:
                raise OSError(errno.ENOENT, f"{CONTROL_DIR_NAME}/{name}")
            key = ("ctlf", parent.tree.key, name)
            return self.table.child(key, NodeKind.CONTROL_FILE, lambda ino: Node(
                ino, NodeKind.CONTROL_FILE, key, repo=parent.repo, tree=parent.tree, name=name))
        raise OSError(errno.ENOTDIR, "not a directory")

    def forget(self, items) -> None:
        for ino, count in items:
            self.table.forget(ino, count)

    def getattr(self, ino: int, blocking: bool = True) -> Attributes:
        node = self._node(ino)
        self._refresh(node, blocking)
        return self._attrs(node)

    # ================================================================== setattr

    # ================================================================== change feed

    @property
    def watched(self) -> bool:
        """Whether branch metadata is kept long and ``poll_changes`` must be called (often)."""
        return self._change_feed is not None

    def poll_changes(self) -> Invalidations:
        """Forget what other writers changed on the watched branches since the last poll, and
        say which kernel entries and attributes to invalidate.  Blocking: asks the backend
        once per branch read so far, and re-stats the directories the kernel knows above
        changed paths.  A branch whose poll fails is logged and tried again next time."""
        out = Invalidations()
        if self._change_feed is None:
            return out
        with self._lock:
            trees = [tree for tree in self._trees.values() if tree.change_feed is not None]
        for tree in trees:
            try:
                changed = tree.poll_changes()
            except LakefuseError as exc:
                log.warning("change feed of %s/%s: %s", tree.repo, tree.branch, exc)
                continue
            if changed is None:
                for node in self.table.nodes():
                    if node.tree is tree and node.attached and node.path:
                        self._stale(node, out)
            elif changed:
                self._invalidate_paths(tree, changed, out)
        return out

    def _invalidate_paths(self, tree: Tree, paths: set[str], out: Invalidations) -> None:
        for path in paths:
            node = self.table.find(("t", tree.key, path))
            if node is not None:
                self._stale(node, out)
        for path in ancestors(paths) - paths:  # still there? (a directory implied by keys may not be)
            node = self.table.find(("t", tree.key, path))
            if node is None or node.lookups <= 0:
                continue
            node.expires = 0.0
            try:
                self._refresh(node, blocking=True)
            except (OSError, LakefuseError):
                self._stale(node, out)

    def _stale(self, node: Node, out: Invalidations) -> None:
        """``node``'s stat is no longer trusted, and neither are the kernel's name and
        attributes of it."""
        if node.kind not in (NodeKind.DIR, NodeKind.FILE):
            return
        of = node.open_file
        if of is not None and (of.dirty or of.spool is not None):
            return  # being written through this mount: its version wins (as in _refresh)
        node.expires = 0.0
        if node.lookups <= 0:
            return
        parent_path, _, name = node.path.rpartition("/")
        parent = self.table.find(("t", node.tree.key, parent_path))
        if parent is not None:
            out.entries.append((parent.ino, name.encode("utf-8")))
        if node.kind is NodeKind.FILE:
            out.inodes.append(node.ino)

    def setattr(self, ino: int, *, size: int | None = None, mode: int | None = None,
                mtime_ns: int | None = None, fh: int | None = None, chown: bool = False) -> Attributes:
        node = self._node(ino)
        if node.kind is NodeKind.CONTROL_FILE:
            if size is not None and node.name != "commit":
                raise OSError(errno.EACCES, f"{CONTROL_DIR_NAME}/{node.name} is read-only")
            return self._attrs(node)
        if size is None and mode is None and mtime_ns is None:
            if chown and node.kind in (NodeKind.DIR, NodeKind.FILE):
                self._writable_tree(node)
            return self.getattr(ino)  # chown/atime: accepted, not stored
        tree = self._writable_tree(node)
        if size is not None:
            if node.kind is not NodeKind.FILE:
                raise OSError(errno.EISDIR, "is a directory")
            self._truncate(node, size)
        if mode is not None or mtime_ns is not None:
            self._change_metadata(node, tree, mode=mode, mtime_ns=mtime_ns)
        return self._attrs(node)

    def _truncate(self, node: Node, size: int) -> None:
        self._refresh(node, True)
        of, created = self._open_file(node)
        try:
            with of.lock:
                self._ensure_spool(of, keep=min(size, self._current_size(of)))
                self._stop_tail(of)
                of.spool.truncate(size)
                of.seq_end = 0 if size == 0 else None
                of.dirty = True
                of.mtime_ns = time.time_ns()
                of.mtime_explicit = False
                if of.handles == 0:
                    self._upload(of)  # path-based truncate: no close will follow
        finally:
            if created:
                self._close_open_file(of)

    def _current_size(self, of: OpenFile) -> int:
        if of.spool is not None:
            return of.spool.size()
        return of.entry.size if of.entry is not None else 0

    def _change_metadata(self, node: Node, tree: Tree, *, mode: int | None = None, mtime_ns: int | None = None,
                         set_meta: dict[str, str] | None = None, remove_meta: str | None = None,
                         content_type: str | None = None) -> None:
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
            key = dir_prefix(node.path)
            self.backend.stage_entries(tree.repo, tree.branch, [(key, new)])
            node.stat = PathStat(True, new)
            node.expires = tree.remember(node.path, node.stat)
            return
        of = node.open_file
        with of.lock if of is not None else contextlib.nullcontext():
            if of is not None and (of.dirty or (of.spool is not None and of.entry is None)):
                apply(of.metadata)
                if mtime_ns is not None:
                    of.mtime_ns = mtime_ns
                    of.mtime_explicit = True
                if content_type is not None:
                    of.content_type = content_type
                of.dirty = True
                return
            self._refresh(node, True)
            entry = of.entry if of is not None and of.entry is not None else node.stat.entry
            if entry is None:
                raise OSError(errno.ENOENT, node.path)
            metadata = dict(entry.metadata)
            apply(metadata)
            new = dataclasses.replace(
                entry, metadata=metadata,
                mtime=entry.mtime if mtime_ns is None else mtime_ns // 1_000_000_000,
                content_type=entry.content_type if content_type is None else content_type)
            self.backend.stage_entries(tree.repo, tree.branch, [(node.path, new)])
            node.stat = PathStat(False, new)
            node.expires = tree.remember(node.path, node.stat)
            if of is not None:
                of.entry = new
                of.metadata = dict(new.metadata)
                of.mtime_ns = _entry_mtime_ns(new)
                of.content_type = new.content_type

    def _refresh_marker(self, node: Node) -> None:
        tree = node.tree
        if node.path == "":
            return
        tree.forget(node.path)
        stat, expires = tree.stat(node.path)
        if stat is not None and stat.is_dir:
            node.stat, node.expires = stat, expires

    # ================================================================== directories

    def opendir(self, ino: int) -> int:
        node = self._node(ino)
        if not node.kind.is_dir:
            raise OSError(errno.ENOTDIR, "not a directory")
        return self._new_handle(DirHandle(node))

    def releasedir(self, fh: int) -> None:
        with self._lock:
            self._handles.pop(fh, None)

    def readdir(self, fh: int, offset: int, add: Callable[[bytes, Attributes, int], bool],
                blocking: bool = True) -> None:
        """Report entries from position ``offset`` through ``add(name, attrs, next_offset)``
        until it returns False (the kernel's buffer is full); each reported entry's lookup
        count goes up by one.  Offsets are positions in this handle's listing; resuming at the
        last one continues the backend listing after the last key (``after=``), so a huge
        directory is listed in pages, never re-read from the start."""
        h = self._handles.get(fh)
        if not isinstance(h, DirHandle):
            raise OSError(errno.EBADF, "not a directory handle")
        if not blocking:
            if not h.lock.acquire(blocking=False):
                raise WouldBlock
            h.lock.release()
        with h.lock:
            node = h.node
            if node.kind is NodeKind.DIR:
                self._readdir_tree(h, offset, add, blocking)
            else:
                if not blocking and (h.static is None or offset == 0):
                    raise WouldBlock
                self._readdir_static(h, offset, add)

    def _readdir_static(self, h: DirHandle, offset: int, add) -> None:
        if h.static is None or offset == 0:
            h.static = self._static_listing(h.node)
        own = self._attrs(h.node)
        for position in range(offset, len(h.static) + 2):
            if position < 2:  # '.' and '..': reported without a lookup count
                if not add(b"." * (position + 1), own, position + 1):
                    return
                continue
            name, child = h.static[position - 2]
            if not add(name.encode("utf-8"), self._attrs(child), position + 1):
                self.table.drop_if_unused(child)
                return
            self.table.add_lookup(child)

    def _static_listing(self, node: Node) -> list[tuple[str, Node]]:
        out = []
        if node.kind is NodeKind.REPOSITORIES:
            repos = sorted(self.backend.list_repositories())
            self._repo_cache = (time.monotonic() + self.branch_ttl, set(repos))
            for repo in repos:
                key = ("repo", repo)
                out.append((repo, self.table.child(key, NodeKind.REPOSITORY, lambda ino, key=key, repo=repo: Node(
                    ino, NodeKind.REPOSITORY, key, repo=repo))))
        elif node.kind is NodeKind.REPOSITORY:
            now = time.monotonic()
            for ref in self.backend.list_refs(node.repo):
                with self._lock:
                    self._ref_cache[(node.repo, ref.name)] = (now + self._ref_timeout(ref), ref)
                tree = self._tree_for(node.repo, ref)
                key = ("t", tree.key, "")
                child = self.table.child(key, NodeKind.DIR, lambda ino, key=key, tree=tree: Node(
                    ino, NodeKind.DIR, key, repo=tree.repo, tree=tree, path="", stat=PathStat(True, None),
                    expires=float("inf")))
                child.entry_timeout = self._ref_timeout(ref)
                out.append((ref.name, child))
        elif node.kind is NodeKind.CONTROL_DIR:
            for name in CONTROL_FILES:
                key = ("ctlf", node.tree.key, name)
                out.append((name, self.table.child(key, NodeKind.CONTROL_FILE, lambda ino, key=key, name=name: Node(
                    ino, NodeKind.CONTROL_FILE, key, repo=node.repo, tree=node.tree, name=name))))
        return out

    def _readdir_tree(self, h: DirHandle, offset: int, add, blocking: bool = True) -> None:
        node = h.node
        tree = node.tree
        if not blocking:  # from memory only: the buffered entries and the tree's kept pages
            if offset != len(h.emitted):
                raise WouldBlock
            if not h.buffer and not h.exhausted and not self._buffer_kept_page(h):
                raise WouldBlock  # before anything is reported: the caller retries it all
        if offset != len(h.emitted):
            self._seek_dir(h, offset)
        while len(h.emitted) < 2:  # '.' and '..': reported without a lookup count
            position = len(h.emitted)
            if not add(b"." * (position + 1), self._attrs(node), position + 1):
                return
            h.emitted.append((None, ""))
        while True:
            if not h.buffer:
                if not h.exhausted:
                    if blocking:
                        page, h.after, h.exhausted = tree.list_dir(node.path, h.after, self.readdir_page)
                        h.buffer.extend(page)
                    elif not self._buffer_kept_page(h):
                        return  # what was in memory is out; the kernel asks again for the rest
                    continue
                if h.extras_done:
                    return
                h.extras_done = True
                h.buffer.extend(self._unstaged_in(tree, node.path, h.names))
                continue
            if not self._emit_buffered(h, add, tree):
                return

    def _buffer_kept_page(self, h: DirHandle) -> bool:
        """Buffer the next page of ``h``'s listing if the tree keeps it in memory."""
        kept = h.node.tree.kept_page(h.node.path, h.after, self.readdir_page)
        if kept is None:
            return False
        page, h.after, h.exhausted = kept
        h.buffer.extend(page)
        return True

    def _emit_buffered(self, h: DirHandle, add, tree: Tree) -> bool:
        """Report the listed entries in ``h.buffer``; False once ``add`` says the kernel's
        buffer is full.  The per-entry loop of every listing (``ls``, ``find``, a Spark
        listing): the inode table's lock is held for the batch, and a name the table
        knows already (a second listing) costs a dictionary lookup and its cached attributes."""
        buffer, names, emitted = h.buffer, h.names, h.emitted
        prefix = dir_prefix(h.node.path)
        expires = tree._expiry()
        tree_node, attrs_of, table = self._tree_node, self._attrs, self.table
        with table.lock:
            while buffer:
                name, key, stat = buffer[0]
                if name in names:  # a file and a directory of the same name: the file wins
                    buffer.popleft()
                    continue
                child = tree_node(tree, prefix + name, stat, expires, lookups=1)
                if not add(name.encode("utf-8"), attrs_of(child), len(emitted) + 1):
                    table.forget(child.ino, 1)  # not reported after all (dropped if nothing else uses it)
                    return False
                buffer.popleft()
                emitted.append((key, name))
                names.add(name)
        return True

    def _seek_dir(self, h: DirHandle, offset: int) -> None:
        """Restart a listing at a position reported earlier (rewinddir, seekdir)."""
        offset = max(0, min(offset, len(h.emitted)))
        del h.emitted[offset:]
        h.buffer.clear()
        h.exhausted = h.extras_done = False
        h.after = ""
        for key, _name in reversed(h.emitted):
            if key is not None:
                h.after = key
                break
        h.names = {name for key, name in h.emitted if name}
        # files being written were listed after the backend's entries: list them again
        extras = [name for key, name in h.emitted if key is None and name]
        if extras:
            h.names.difference_update(extras)
            h.emitted = [(key, name) for key, name in h.emitted if key is not None or not name]

    def _unstaged_in(self, tree: Tree, path: str, seen: set[str]) -> list[tuple[str, None, PathStat]]:
        prefix = dir_prefix(path)
        out = []
        with self._lock:
            for (tree_key, child_path), child in self._unstaged.items():
                if tree_key == tree.key and child_path.startswith(prefix) and child.attached:
                    name = child_path[len(prefix):]
                    if "/" not in name and name not in seen:
                        out.append((name, None, child.stat))
        return sorted(out, key=lambda item: item[0])

    def mkdir(self, parent_ino: int, name: bytes | str, mode: int) -> Attributes:
        parent = self._node(parent_ino)
        tree = self._writable_tree(parent)
        name = check_name(_decode(name))
        path = join(parent.path, name)
        stat, _ = self._stat_path(tree, path, True)
        if stat is not None:
            raise OSError(errno.EEXIST, path)
        if parent.path == "" and name == CONTROL_DIR_NAME:
            raise OSError(errno.EEXIST, f"{CONTROL_DIR_NAME} is reserved")
        perms = mode & 0o7777
        metadata = {} if perms == DEFAULT_DIR_MODE else {MODE_KEY: format(perms, "o")}
        marker = self._upload_empty(tree, dir_prefix(path), metadata)
        stat = PathStat(True, marker)
        node = self._tree_node(tree, path, stat, tree.remember(path, stat))
        self.table.add_lookup(node)
        return self._attrs(node)

    def rmdir(self, parent_ino: int, name: bytes | str) -> None:
        parent = self._node(parent_ino)
        tree = self._writable_tree(parent)
        name = _decode(name)
        path = join(parent.path, name)
        if parent.kind is NodeKind.DIR and parent.path == "" and name == CONTROL_DIR_NAME and tree.is_branch:
            raise OSError(errno.EPERM, f"{CONTROL_DIR_NAME} is reserved")
        tree.forget(path)
        stat, _ = tree.stat(path)
        if stat is None:
            self._detach_path(tree, path)
            return  # already gone (its last object was removed elsewhere)
        if not stat.is_dir:
            raise OSError(errno.ENOTDIR, path)
        if tree.has_children(path) or self._has_unstaged_under(tree, path):
            raise OSError(errno.ENOTEMPTY, path)
        items = []
        if stat.entry is not None:
            items.append((dir_prefix(path), None))
        self._keep_parent(tree, parent.path, gone=[dir_prefix(path)])
        if items:
            self.backend.stage_entries(tree.repo, tree.branch, items)
        tree.remember(path, None)
        self._detach_path(tree, path)

    def _has_unstaged_under(self, tree: Tree, path: str) -> bool:
        prefix = dir_prefix(path)
        with self._lock:
            return any(k == tree.key and p.startswith(prefix) and n.attached
                       for (k, p), n in self._unstaged.items())

    def _keep_parent(self, tree: Tree, parent_path: str, gone: list[str]) -> None:
        """Before the keys ``gone`` leave directory ``parent_path``: if nothing else would keep
        the directory, give it a marker (an emptied directory stays until rmdir)."""
        if parent_path == "":
            return
        stat, _ = tree.stat(parent_path)
        if stat is None or not stat.is_dir or stat.entry is not None:
            return
        if tree.has_children(parent_path, ignore=tuple(gone)) or self._has_unstaged_under(tree, parent_path):
            return
        marker = self._upload_empty(tree, dir_prefix(parent_path), {})
        tree.remember(parent_path, PathStat(True, marker))
        node = self.table.find(("t", tree.key, parent_path))
        if node is not None and node.kind is NodeKind.DIR:
            node.stat = PathStat(True, marker)

    def _upload_empty(self, tree: Tree, key: str, metadata: dict[str, str]) -> Entry:
        spool = Spool(self.spool_dir)
        try:
            return self.backend.upload_file(tree.repo, tree.branch, key, spool.path, mtime=int(time.time()),
                                            metadata=metadata)
        finally:
            spool.close()

    def _detach_path(self, tree: Tree, path: str) -> None:
        node = self.table.find(("t", tree.key, path))
        if node is not None:
            self.table.detach(node)

    # ================================================================== files

    def enable_passthrough(self, backings: BackingFiles, *, branches: bool = False) -> None:
        """Let the kernel read objects that are local files itself (``lakefuse.fs.passthrough``);
        the adapter calls this once the kernel granted FUSE passthrough.  Only in trees nothing
        writes through this mount (commits, tags, a read-only mount) unless ``branches``: a
        handle the kernel serves keeps reading the bytes it opened, so on a writable branch it
        would not see writes made through other handles after it opened (``tail -f``)."""
        if self._local_file is not None:
            self.passthrough = Passthrough(backings)
            self._passthrough_branches = branches

    def _grant_passthrough(self, of: OpenFile, readable_object: bool) -> Grant:
        """Passthrough for a new handle of ``of`` (under ``of.lock``, its count taken);
        ``readable_object``: the handle only reads ``of.entry``, unmodified."""
        if self.passthrough is None:
            return NO_GRANT
        local_file = None
        # on a writable branch a handle the kernel serves would miss later writes through the mount
        tree_allows = not of.node.tree.writable or self._passthrough_branches
        if tree_allows and readable_object and of.spool is None and not of.dirty and of.entry is not None:
            try:
                local_file = self._local_file(of.node.tree.repo, of.entry)
            except LakefuseError as exc:  # the mount serves the handle, and says why if it cannot
                log.debug("no passthrough for %s: %s", of.node.path, exc)
        return self.passthrough.open(of.passthrough, local_file, alone=of.handles == 1)

    def _new_handle(self, handle) -> int:
        with self._lock:
            fh = self._next_fh
            self._next_fh += 1
            self._handles[fh] = handle
            return fh

    def _open_file(self, node: Node) -> tuple[OpenFile, bool]:
        """The node's OpenFile, creating one (``True``) if none is open."""
        with self.table.lock:
            of = node.open_file
            if of is not None:
                return of, False
            entry = node.stat.entry if node.stat is not None else None
            of = OpenFile(node, entry)
            node.open_file = of
            return of, True

    def _close_open_file(self, of: OpenFile) -> None:
        with self.table.lock:
            if of.handles > 0:
                return
            node = of.node
            if node.open_file is of:
                node.open_file = None
            self.table.drop_if_unused(node)
        with of.lock:
            self._stop_tail(of)
            spool, of.spool = of.spool, None
            if spool is not None:
                spool.close()

    def open(self, ino: int, flags: int) -> OpenResult:
        node = self._node(ino)
        accmode = flags & os.O_ACCMODE
        writable = accmode in (os.O_WRONLY, os.O_RDWR)
        if node.kind is NodeKind.CONTROL_FILE:
            if writable and node.name != "commit":
                raise OSError(errno.EACCES, f"{CONTROL_DIR_NAME}/{node.name} is read-only")
            if writable and not node.tree.writable:
                raise ReadOnly("the mount is read-only")
            return OpenResult(self._new_handle(ControlHandle(node)), direct_io=True)
        if node.kind is not NodeKind.FILE:
            raise OSError(errno.EISDIR, "is a directory")
        if writable or flags & os.O_TRUNC:
            self._writable_tree(node)
        self._refresh(node, True)
        of, created = self._open_file(node)
        with of.lock:
            of.handles += 1
            current = node.stat.entry if node.stat is not None else None
            if of.spool is None and not of.dirty and current is not None and current is not of.entry:
                of.entry = current  # the object changed since the other handles opened it
                of.metadata = dict(current.metadata)
                of.content_type = current.content_type
                of.mtime_ns = _entry_mtime_ns(current)
            if flags & os.O_TRUNC and writable:
                try:
                    self._ensure_spool(of, keep=0)
                    self._stop_tail(of)
                    of.spool.truncate(0)
                    of.seq_end = 0
                except BaseException:
                    of.handles -= 1
                    if created:
                        self._close_open_file(of)
                    raise
                of.dirty = True
                of.mtime_ns = time.time_ns()
                of.mtime_explicit = False
            grant = self._grant_passthrough(of, readable_object=not writable and not flags & os.O_TRUNC)
            keep_cache = False
            if not writable and of.spool is None and of.entry is not None and not grant.backing_id:
                identity = (of.entry.physical_address, of.entry.checksum)
                keep_cache = not node.tree.is_branch or node.cache_id == identity
                node.cache_id = identity
            from_empty = _writes_from_empty_only(flags, bool(flags & os.O_TRUNC))
            handle = self._new_file_handle(of, writable, grant, from_empty)
        return OpenResult(self._new_handle(handle), keep_cache=keep_cache, direct_io=handle.direct_io,
                          backing_id=grant.backing_id)

    def create(self, parent_ino: int, name: bytes | str, mode: int, flags: int) -> tuple[OpenResult, Attributes]:
        parent = self._node(parent_ino)
        tree = self._writable_tree(parent)
        if parent.kind is not NodeKind.DIR:
            raise OSError(errno.ENOTDIR, "not a directory")
        name = check_name(_decode(name))
        if parent.path == "" and name == CONTROL_DIR_NAME and tree.is_branch:
            raise OSError(errno.EEXIST, f"{CONTROL_DIR_NAME} is reserved")
        path = join(parent.path, name)
        stat, expires = self._stat_path(tree, path, True)
        if stat is not None and stat.is_dir:
            raise OSError(errno.EISDIR, path)
        if stat is not None and flags & os.O_EXCL:
            raise OSError(errno.EEXIST, path)
        new_stat = stat if stat is not None else PathStat(False, None)
        node = self._tree_node(tree, path, new_stat, expires if stat is not None else float("inf"))
        of, created = self._open_file(node)
        with of.lock:
            of.handles += 1
            try:
                if stat is None or flags & os.O_TRUNC:
                    self._ensure_spool(of, keep=0)
                    self._stop_tail(of)
                    of.spool.truncate(0)
                    of.seq_end = 0
                    of.dirty = True
                    of.mtime_ns = time.time_ns()
                perms = mode & 0o7777
                if stat is None and perms != DEFAULT_FILE_MODE:
                    of.metadata[MODE_KEY] = format(perms, "o")
            except BaseException:
                of.handles -= 1
                if created:
                    self._close_open_file(of)
                raise
            grant = self._grant_passthrough(of, readable_object=False)
            writable = (flags & os.O_ACCMODE) in (os.O_WRONLY, os.O_RDWR)
            truncated = stat is None or bool(flags & os.O_TRUNC)
            handle = self._new_file_handle(of, writable, grant, _writes_from_empty_only(flags, truncated))
        if stat is None:
            with self._lock:
                self._unstaged[(tree.key, path)] = node
        self.table.add_lookup(node)
        result = OpenResult(self._new_handle(handle), direct_io=handle.direct_io, backing_id=grant.backing_id)
        return result, self._attrs(node)

    @staticmethod
    def _new_file_handle(of: OpenFile, writable: bool, grant: Grant, writes_from_empty: bool) -> FileHandle:
        """A handle of ``of`` (under ``of.lock``, its count taken).  It gets direct I/O (the
        kernel sends all its reads and writes here, bypassing its page cache of the file):

        - where the passthrough grant asks for it;
        - for a write-only open that creates or truncates the file, if it is the file's only
          handle (``cp``, ``>``: see ``_writes_from_empty_only``);
        - for a read-only open while the file is being written (a live spool), and for any
          open beside another direct-I/O handle.

        The last rule keeps readers off the kernel's page cache while the file changes under
        them.  A read answered short because a rewrite just truncated the file is zero-filled
        by the kernel, and when the kernel's idea of the size is stale at that moment the
        reader gets those zeros (4 readers beside a rewriter did, about every other run).
        Handles opened before the writes began keep the page cache; the writer then writes
        through it (it is not alone), so the pages those readers see hold what it wrote."""
        if grant.direct_io:
            direct_io = True
        elif grant.backing_id:
            direct_io = False
        else:
            direct_io = of.direct_handles > 0 or (writes_from_empty and of.handles == 1) or \
                (not writable and of.spool is not None and not of.spool.sealed)
        handle = FileHandle(of, writable, of.entry, direct_io)
        handle.passthrough = grant.backing_id != 0
        of.direct_handles += direct_io
        return handle

    def _ensure_spool(self, of: OpenFile, keep: int | None = None) -> None:
        """Give ``of`` a writable spool holding the file's current bytes (the first ``keep``
        of them): from its object, or from its sealed spool (whose file storage took)."""
        sealed = of.spool
        if sealed is not None and not sealed.sealed:
            return
        spool = Spool(self.spool_dir)
        try:
            if sealed is not None:
                size = sealed.size() if keep is None else min(sealed.size(), keep)
                if size > 0:
                    spool.fill_from(sealed, size)
            else:
                entry = of.entry
                size = entry.size if entry is not None else 0
                if keep is not None:
                    size = min(size, keep)
                if size > 0:
                    reader = self.backend.open_reader(of.node.tree.repo, entry)
                    try:
                        spool.fill_from(reader, size)
                    finally:
                        reader.close()
        except BaseException:
            spool.close()
            raise
        of.spool = spool
        of.seq_end = 0 if size == 0 else None
        if sealed is not None:
            sealed.close()

    def read(self, fh: int, offset: int, size: int) -> bytes:
        h = self._handles.get(fh)
        if isinstance(h, ControlHandle):
            return self._read_control(h, offset, size)
        if not isinstance(h, FileHandle):
            raise OSError(errno.EBADF, "bad file handle")
        of = h.open_file
        if of.spool is not None:
            with of.lock:
                if of.spool is not None:
                    return of.spool.read(offset, size)
        entry = h.entry
        if entry is None or offset >= entry.size:
            return b""
        reader = h.reader
        if reader is None:
            with h.lock:
                if h.reader is None:
                    h.reader = self.backend.open_reader(of.node.tree.repo, entry)
                reader = h.reader
        return reader.read(offset, min(size, entry.size - offset))

    def read_nowait(self, fh: int, offset: int, size: int, buffer: bytearray):
        """``read`` if it can be answered without waiting (object bytes already in the page
        cache), into ``buffer`` (the result is a view of it, valid until ``buffer`` is reused);
        else raises WouldBlock."""
        h = self._handles.get(fh)
        if not isinstance(h, FileHandle) or h.open_file.spool is not None:
            raise WouldBlock
        entry = h.entry
        if entry is None or offset >= entry.size:
            return b""
        read_nowait = getattr(h.reader, "read_nowait", None)
        if read_nowait is None:
            raise WouldBlock
        want = min(size, entry.size - offset)
        if len(buffer) < want:
            raise WouldBlock
        data = read_nowait(offset, want, buffer)
        if data is None:
            raise WouldBlock
        return data

    def write(self, fh: int, offset: int, data: bytes) -> int:
        h = self._handles.get(fh)
        if isinstance(h, ControlHandle):
            return self._write_control(h, offset, data)
        if not isinstance(h, FileHandle):
            raise OSError(errno.EBADF, "bad file handle")
        if not h.writable:
            raise OSError(errno.EBADF, "file not open for writing")
        of = h.open_file
        with of.lock:
            self._ensure_spool(of)
            if of.seq_end is not None and offset != of.seq_end:
                of.seq_end = None  # not an append: the tail cannot follow
                self._stop_tail(of)
            if of.tail is not None:
                of.spool.write_behind(offset, data)
                written = len(data)
            else:
                written = of.spool.write(offset, data)
            self._wrote(of, h, written)
        return written

    def write_nowait(self, fh: int, offset: int, data: bytes) -> int:
        """``write`` if it can be answered without waiting: an append to a big file being
        written in order, whose bytes are queued for the spool's background writer (see
        ``Spool.write_behind``); else raises WouldBlock."""
        h = self._handles.get(fh)
        if not isinstance(h, FileHandle) or not h.writable:
            raise WouldBlock
        of = h.open_file
        if not of.lock.acquire(blocking=False):
            raise WouldBlock
        try:
            spool = of.spool
            if of.tail is None or spool is None or spool.sealed or offset != of.seq_end:
                raise WouldBlock
            if not spool.write_behind(offset, data, block=False):
                raise WouldBlock  # the queue is full: wait for room on a worker thread
            self._wrote(of, h, len(data))
            return len(data)
        finally:
            of.lock.release()

    def _wrote(self, of: OpenFile, h: FileHandle, written: int) -> None:
        of.dirty = True
        of.uncached_writes |= h.direct_io
        of.mtime_ns = time.time_ns()
        of.mtime_explicit = False
        if of.seq_end is not None:
            of.seq_end += written
            if of.tail is None and of.seq_end >= TAIL_MIN_BYTES:
                self._start_tail(of)

    def _upload_settings(self, of: OpenFile) -> tuple[int, dict[str, str], str | None]:
        """mtime, user metadata and content type an upload of ``of`` stores."""
        metadata = dict(of.metadata)
        if of.mtime_explicit:
            metadata[MTIME_NS_KEY] = str(of.mtime_ns)
        else:
            metadata.pop(MTIME_NS_KEY, None)
        return of.mtime_ns // 1_000_000_000, metadata, of.content_type

    def _local_storage(self, repo: str) -> bool:
        local = self._stores_locally.get(repo)
        if local is None:
            local = self._stores_locally[repo] = bool(self.backend.stores_locally(repo))
        return local

    def _start_tail(self, of: OpenFile) -> None:
        """Hash the appended bytes as they arrive when storage is on this machine (the spool is
        moved there at close), else stream them to storage."""
        tree, path = of.node.tree, of.node.path
        if self._local_storage(tree.repo):
            hasher = self.backend.content_hasher()
            spool = of.spool

            def consume(stream) -> str:
                position = 0
                while chunk := stream.read(HASH_CHUNK):
                    hasher.update(chunk)  # hashlib releases the GIL: this runs beside the writes
                    # storage fsyncs the file at close: have the disk take the bytes meanwhile
                    spool.start_writeback(position, len(chunk))
                    position += len(chunk)
                return hasher.hexdigest()

            of.tail = SpoolTail(spool, of.seq_end, consume, name="lakefuse-spool-hash")
            spool.listener = of.tail.feed
            return
        if self._stream_upload is None:
            return
        mtime, metadata, content_type = self._upload_settings(of)

        def consume(stream) -> Entry:
            return self._stream_upload(tree.repo, tree.branch, path, stream, mtime=mtime, metadata=metadata,
                                       content_type=content_type)

        of.tail = SpoolTail(of.spool, of.seq_end, consume, name="lakefuse-spool-upload")
        of.spool.listener = of.tail.feed

    @staticmethod
    def _stop_tail(of: OpenFile) -> None:
        tail, of.tail = of.tail, None
        if tail is not None:
            if of.spool is not None:
                of.spool.listener = None
            tail.abort()

    def _finish_tail(self, of: OpenFile) -> Entry | str | None:
        """What the tail made of the file's bytes if it read exactly all of them: the entry of
        a streaming upload (restaged if metadata changed meanwhile) or their checksum; else
        None (the caller stores the spool the ordinary way)."""
        of.spool.drain()  # every byte in the file (raises what failed the spool)
        tail, of.tail = of.tail, None
        of.spool.listener = None
        node = of.node
        if not node.attached or of.seq_end is None or of.seq_end != of.spool.size() or tail is None:
            if tail is not None:
                tail.abort()
            return None
        try:
            result = tail.finish()
        except Exception as exc:  # noqa: BLE001 - the ordinary upload follows
            log.debug("spool tail of %s failed (%s); storing the spool", node.path, exc)
            return None
        if tail.consumed != of.seq_end:
            return None
        if not isinstance(result, Entry):
            return result  # the checksum
        entry = result
        if entry.size != of.seq_end:
            return None
        mtime, metadata, content_type = self._upload_settings(of)
        if entry.mtime != mtime or dict(entry.metadata) != metadata or (content_type and entry.content_type != content_type):
            entry = dataclasses.replace(entry, mtime=mtime, metadata=metadata,
                                        content_type=content_type or entry.content_type)
            self.backend.stage_entries(node.tree.repo, node.tree.branch, [(node.path, entry)])
        return entry

    def flush(self, fh: int) -> None:
        """close(2) of a descriptor: upload a written file (errors reach close), or commit
        after a write to ``.lakefuse/commit``.  Closing a read-only descriptor uploads nothing:
        another handle's writes in progress are not staged half-done."""
        self._sync(fh, any_descriptor=False)

    def fsync(self, fh: int, datasync: bool = False) -> None:
        """fsync(2) is about the file: it uploads the written file whichever descriptor asks."""
        self._sync(fh, any_descriptor=True)

    def _sync(self, fh: int, any_descriptor: bool) -> None:
        h = self._handles.get(fh)
        if isinstance(h, ControlHandle):
            self._flush_control(h)
        elif isinstance(h, FileHandle):
            if (any_descriptor or h.writable) and h.open_file.dirty:
                self._upload(h.open_file)
        elif h is None:
            raise OSError(errno.EBADF, "bad file handle")

    def release(self, fh: int) -> None:
        with self._lock:
            h = self._handles.pop(fh, None)
        if not isinstance(h, FileHandle):
            return
        if h.reader is not None:
            with contextlib.suppress(Exception):
                h.reader.close()
        of = h.open_file
        with of.lock:
            of.handles -= 1
            last = of.handles == 0
            of.direct_handles -= h.direct_io
            if h.passthrough:
                self.passthrough.release(of.passthrough)
        if not last:
            return
        try:
            if of.dirty:
                self._upload(of)
        except Exception:
            log.exception("upload of %s on release failed; its changes are lost", of.node.path)
        finally:
            with self._lock:
                key = (of.node.tree.key, of.node.path)
                if self._unstaged.get(key) is of.node:
                    del self._unstaged[key]
            self._close_open_file(of)

    def _upload(self, of: OpenFile) -> None:
        with of.lock:
            if not of.dirty:
                return
            node = of.node
            tree = node.tree
            if not node.attached:
                self._stop_tail(of)
                of.dirty = False  # unlinked while open: nothing to keep
                return
            tail_result = self._finish_tail(of) if of.tail is not None else None
            if isinstance(tail_result, Entry):
                entry = tail_result  # streamed while written
            else:
                entry = self._store_spool(of, checksum=tail_result)
            of.dirty = False
            of.seq_end = None
            of.entry = entry
            of.metadata = dict(entry.metadata)
            of.mtime_explicit = False
            node.stat = PathStat(False, entry)
            node.expires = tree.remember(node.path, node.stat)
            # the kernel's pages hold these bytes, unless some were written around its cache
            node.cache_id = None if of.uncached_writes else (entry.physical_address, entry.checksum)
            of.uncached_writes = False
            with self._lock:
                if self._unstaged.get((tree.key, node.path)) is node:
                    del self._unstaged[(tree.key, node.path)]

    def _store_spool(self, of: OpenFile, checksum: str | None) -> Entry:
        """Upload the spool and stage it.  Storage on this machine takes the spool file itself
        (moved, not copied: the spool is sealed first, and a later write copies its bytes to a
        new spool)."""
        node = of.node
        tree = node.tree
        if of.spool.sealed:  # an earlier move failed half-way: the file may be gone
            self._ensure_spool(of)
            checksum = None
        move = self._local_storage(tree.repo)
        if move:
            of.spool.seal()
        mtime, metadata, content_type = self._upload_settings(of)
        return self.backend.upload_file(tree.repo, tree.branch, node.path, of.spool.path, mtime=mtime,
                                        metadata=metadata, content_type=content_type, checksum=checksum, move=move)

    def flush_all(self, tree: Tree | None = None) -> list[tuple[str, Exception]]:
        """Upload every written file (of one tree); the failures."""
        failures = []
        for node in self.table.nodes():
            of = node.open_file
            if of is None or not of.dirty or (tree is not None and node.tree is not tree):
                continue
            try:
                self._upload(of)
            except Exception as exc:  # noqa: BLE001 - reported to the caller
                failures.append((node.path, exc))
        return failures

    def unlink(self, parent_ino: int, name: bytes | str) -> None:
        parent = self._node(parent_ino)
        tree = self._writable_tree(parent)
        name = _decode(name)
        path = join(parent.path, name)
        if parent.path == "" and name == CONTROL_DIR_NAME and tree.is_branch:
            raise OSError(errno.EPERM, f"{CONTROL_DIR_NAME} is reserved")
        unstaged = self._unstaged.get((tree.key, path))
        tree.forget(path)
        stat, _ = tree.stat(path)
        if stat is None and unstaged is None:
            raise OSError(errno.ENOENT, path)
        if stat is not None and stat.is_dir:
            raise OSError(errno.EISDIR, path)
        self._keep_parent(tree, parent.path, gone=[path])
        if stat is not None:
            self.backend.stage_entries(tree.repo, tree.branch, [(path, None)])
        tree.remember(path, None)
        with self._lock:
            if unstaged is not None and self._unstaged.get((tree.key, path)) is unstaged:
                del self._unstaged[(tree.key, path)]
        self._detach_path(tree, path)

    # ================================================================== rename

    def rename(self, old_parent_ino: int, old_name: bytes | str, new_parent_ino: int, new_name: bytes | str,
               flags: int = 0) -> None:
        RENAME_NOREPLACE, RENAME_EXCHANGE = 1, 2
        if flags & RENAME_EXCHANGE:
            raise OSError(errno.EINVAL, "RENAME_EXCHANGE is not supported")
        old_parent = self._node(old_parent_ino)
        new_parent = self._node(new_parent_ino)
        tree = self._writable_tree(old_parent)
        if self._writable_tree(new_parent) is not tree:
            raise OSError(errno.EXDEV, "rename across refs or repositories")
        old_name, new_name = _decode(old_name), check_name(_decode(new_name))
        if tree.is_branch:
            for p, n in ((old_parent, old_name), (new_parent, new_name)):
                if p.path == "" and n == CONTROL_DIR_NAME:
                    raise OSError(errno.EPERM, f"{CONTROL_DIR_NAME} is reserved")
        old_path, new_path = join(old_parent.path, old_name), join(new_parent.path, new_name)
        if old_path == new_path:
            return
        # the directory the entry leaves may need a marker, unless the entry stays inside it
        keep_parent = None if new_path.startswith(dir_prefix(old_parent.path)) else old_parent.path
        for path in (old_path, new_path):
            tree.forget(path)
        old_stat, _ = self._stat_path(tree, old_path, True)
        if old_stat is None:
            raise OSError(errno.ENOENT, old_path)
        new_stat, _ = self._stat_path(tree, new_path, True)
        if new_stat is not None and flags & RENAME_NOREPLACE:
            raise OSError(errno.EEXIST, new_path)
        if old_stat.is_dir:
            if new_path.startswith(old_path + "/"):
                raise OSError(errno.EINVAL, "cannot move a directory into itself")
            if new_stat is not None:
                if not new_stat.is_dir:
                    raise OSError(errno.ENOTDIR, new_path)
                if tree.has_children(new_path) or self._has_unstaged_under(tree, new_path):
                    raise OSError(errno.ENOTEMPTY, new_path)
            self._rename_dir(tree, keep_parent, old_path, new_path, new_stat)
        else:
            if new_stat is not None and new_stat.is_dir:
                raise OSError(errno.EISDIR, new_path)
            self._rename_file(tree, keep_parent, old_path, new_path)

    def _rename_file(self, tree: Tree, old_parent_path: str | None, old_path: str, new_path: str) -> None:
        node = self.table.find(("t", tree.key, old_path))
        of = node.open_file if node is not None else None
        with of.lock if of is not None else contextlib.nullcontext():
            if of is not None and of.dirty:
                self._upload(of)
            stat, _ = tree.stat(old_path)
            if stat is None:
                raise OSError(errno.ENOENT, old_path)
            if old_parent_path is not None:
                self._keep_parent(tree, old_parent_path, gone=[old_path])
            self.backend.stage_entries(tree.repo, tree.branch, [(new_path, stat.entry), (old_path, None)])
            tree.remember(old_path, None)
            tree.remember(new_path, stat)
            if node is not None:
                self.table.rekey(node, ("t", tree.key, new_path))
                node.path = new_path
                node.stat = stat
            else:
                self._detach_path(tree, new_path)

    def _rename_dir(self, tree: Tree, old_parent_path: str | None, old_path: str, new_path: str,
                    new_stat: PathStat | None) -> None:
        old_prefix, new_prefix = dir_prefix(old_path), dir_prefix(new_path)
        # written files below the directory move with it: stage their bytes first
        for node in self.table.nodes():
            of = node.open_file
            if of is not None and of.dirty and node.tree is tree and node.path.startswith(old_prefix):
                self._upload(of)
        from lakefuse.fs.backend import iter_listing

        moved = list(iter_listing(self.backend, tree.repo, tree.ref, old_prefix, delimiter=""))
        items: list[tuple[str, Entry | None]] = []
        for item in moved:
            items.append((new_prefix + item.key[len(old_prefix):], item.entry))
        moved_keys = {new_prefix + item.key[len(old_prefix):] for item in moved}
        if new_stat is not None and new_stat.entry is not None and new_prefix not in moved_keys:
            items.append((new_prefix, None))  # the empty directory replaced
        items.extend((item.key, None) for item in moved)
        if old_parent_path is not None:
            self._keep_parent(tree, old_parent_path, gone=[old_prefix])
        self.backend.stage_entries(tree.repo, tree.branch, items)
        tree.forget_all()
        # inodes below (and of) the directory now stand for the new paths
        with self.table.lock:
            if new_stat is not None:
                self._detach_path(tree, new_path)
            for node in self.table.nodes():
                if node.tree is not tree or not node.attached:
                    continue
                if node.path == old_path or node.path.startswith(old_prefix):
                    path = new_path + node.path[len(old_path):]
                    self.table.rekey(node, ("t", tree.key, path))
                    node.path = path
                    node.expires = 0.0
            with self._lock:
                for (key, path), node in list(self._unstaged.items()):
                    if key == tree.key and path.startswith(old_prefix):
                        del self._unstaged[(key, path)]
                        self._unstaged[(key, node.path)] = node

    # ================================================================== xattrs

    def getxattr(self, ino: int, name: bytes | str, blocking: bool = True) -> bytes:
        node = self._node(ino)
        name = _decode(name)
        if not _xattr_namespace_supported(name):
            raise _xattr_namespace_unsupported(name)
        entry = self._xattr_entry(node, blocking)
        if entry is None:
            raise OSError(ENOATTR, name)
        if name.startswith(XATTR_USER):
            key = name[len(XATTR_USER):]
            metadata = self._current_metadata(node, entry)
            if key in INTERNAL_METADATA or key not in metadata:
                raise OSError(ENOATTR, name)
            return metadata[key].encode("utf-8")
        if node.kind is NodeKind.FILE and name in XATTR_OBJECT:
            of = node.open_file
            if name == "lakefuse.content_type":
                ctype = of.content_type if of is not None and of.content_type else entry.content_type
                return ctype.encode("utf-8")
            if of is not None and of.dirty:
                raise OSError(ENOATTR, f"{name}: not known until the file is uploaded (fsync or close)")
            value = {"lakefuse.checksum": entry.checksum, "lakefuse.physical_address": entry.physical_address,
                     "lakefuse.size": str(entry.size)}[name]
            return value.encode("utf-8")
        raise OSError(ENOATTR, name)

    def _xattr_entry(self, node: Node, blocking: bool = True) -> Entry | None:
        if node.kind not in (NodeKind.FILE, NodeKind.DIR) or node.path == "":
            return None
        self._refresh(node, blocking)
        of = node.open_file
        if of is not None and of.entry is not None:
            return of.entry
        entry = node.stat.entry if node.stat is not None else None
        if entry is None and node.kind is NodeKind.FILE and of is not None:
            return Entry("", 0, 0, "", of.content_type or "application/octet-stream", dict(of.metadata))
        return entry

    @staticmethod
    def _current_metadata(node: Node, entry: Entry) -> dict[str, str]:
        of = node.open_file
        if of is not None and node.kind is NodeKind.FILE:
            return of.metadata
        return dict(entry.metadata)

    def listxattr(self, ino: int, blocking: bool = True) -> list[bytes]:
        node = self._node(ino)
        entry = self._xattr_entry(node, blocking)
        if entry is None:
            return []
        names = [XATTR_USER + key for key in sorted(self._current_metadata(node, entry)) if key not in INTERNAL_METADATA]
        if node.kind is NodeKind.FILE:
            names.extend(XATTR_OBJECT)
        return [n.encode("utf-8") for n in names]

    def setxattr(self, ino: int, name: bytes | str, value: bytes) -> None:
        node = self._node(ino)
        name = _decode(name)
        if name.startswith(XATTR_USER):
            key = name[len(XATTR_USER):]
            if not key or key in INTERNAL_METADATA:
                raise OSError(errno.EPERM, f"{name} is reserved")
            try:
                text = bytes(value).decode("utf-8")
            except UnicodeDecodeError:
                raise OSError(errno.EINVAL, "user metadata values must be UTF-8 text") from None
            tree = self._writable_tree(node)
            if node.kind not in (NodeKind.FILE, NodeKind.DIR) or node.path == "":
                raise OSError(errno.ENOTSUP, "no metadata here")
            self._change_metadata(node, tree, set_meta={key: text})
            return
        if name == "lakefuse.content_type" and node.kind is NodeKind.FILE:
            tree = self._writable_tree(node)
            try:
                text = bytes(value).decode("utf-8")
            except UnicodeDecodeError:
                raise OSError(errno.EINVAL, "content type must be UTF-8 text") from None
            self._change_metadata(node, tree, content_type=text)
            return
        if name in XATTR_OBJECT:
            raise OSError(errno.EPERM, f"{name} is read-only")
        if not _xattr_namespace_supported(name):
            raise _xattr_namespace_unsupported(name)
        raise OSError(errno.ENOTSUP, f"{name!r}: no such object property")

    def removexattr(self, ino: int, name: bytes | str) -> None:
        node = self._node(ino)
        name = _decode(name)
        if not name.startswith(XATTR_USER):
            if name in XATTR_OBJECT:
                raise OSError(errno.EPERM, f"{name} is read-only")
            if not _xattr_namespace_supported(name):
                raise _xattr_namespace_unsupported(name)
            raise OSError(ENOATTR, name)
        key = name[len(XATTR_USER):]
        if key in INTERNAL_METADATA:
            raise OSError(ENOATTR, name)
        tree = self._writable_tree(node)
        if node.kind not in (NodeKind.FILE, NodeKind.DIR) or node.path == "":
            raise OSError(ENOATTR, name)
        self._change_metadata(node, tree, remove_meta=key)

    # ================================================================== control files

    def _control_text(self, node: Node) -> bytes:
        tree = node.tree
        if node.name == "head":
            return (self.backend.branch_head(tree.repo, tree.branch) + "\n").encode()
        if node.name == "status":
            changes = self.backend.list_changes(tree.repo, tree.branch, STATUS_LIMIT + 1)
            lines = [f"{c.kind.value} {c.key}" for c in changes[:STATUS_LIMIT]]
            if len(changes) > STATUS_LIMIT:
                lines.append(f"... more than {STATUS_LIMIT} changes")
            with self._lock:
                pending = sorted(p for (k, p), n in self._unstaged.items() if k == tree.key and n.attached)
            lines.extend(f"+ {p} (being written)" for p in pending)
            return ("\n".join(lines) + "\n" if lines else "").encode()
        result = tree.last_commit
        if result is None:
            return b""
        status, text = result
        return (f"{text}\n" if status == "ok" else f"error: {text}\n").encode()

    def _read_control(self, h: ControlHandle, offset: int, size: int) -> bytes:
        if offset == 0 or h.snapshot is None:
            h.snapshot = self._control_text(h.node)
        return h.snapshot[offset:offset + size]

    def _write_control(self, h: ControlHandle, offset: int, data: bytes) -> int:
        if h.node.name != "commit":
            raise OSError(errno.EBADF, "read-only control file")
        end = offset + len(data)
        if len(h.written) < end:
            h.written.extend(b"\0" * (end - len(h.written)))
        h.written[offset:end] = data
        h.dirty = True
        return len(data)

    def _flush_control(self, h: ControlHandle) -> None:
        if not h.dirty:
            return
        h.dirty = False
        message = bytes(h.written).replace(b"\0", b"").decode("utf-8", "replace").strip()
        h.written.clear()
        self.commit(h.node.tree, message)

    def commit(self, tree: Tree, message: str) -> str:
        """Upload the branch's written files, then commit; the result is what reading
        ``.lakefuse/commit`` shows."""
        try:
            if not message:
                from lakefuse.errors import InvalidArgument

                raise InvalidArgument("empty commit message")
            failures = self.flush_all(tree)
            if failures:
                path, exc = failures[0]
                raise exc if isinstance(exc, LakefuseError) else OSError(errno.EIO, f"upload of {path} failed: {exc}")
            commit_id = self.backend.commit(tree.repo, tree.branch, message)
        except (LakefuseError, OSError) as exc:
            tree.last_commit = ("error", str(exc) or type(exc).__name__)
            raise
        tree.last_commit = ("ok", commit_id)
        log.info("committed %s/%s: %s", tree.repo, tree.branch, commit_id)
        return commit_id

    # ================================================================== the rest

    def statfs(self) -> dict[str, int]:
        big = 1 << 40
        return {"f_bsize": BLOCK_SIZE, "f_frsize": BLOCK_SIZE, "f_blocks": big, "f_bfree": big, "f_bavail": big,
                "f_files": big, "f_ffree": big, "f_favail": big, "f_namemax": MAX_NAME_BYTES}

    def link(self, *args) -> None:
        raise OSError(errno.EPERM, "hard links are not supported")

    def symlink(self, *args) -> None:
        raise OSError(errno.EPERM, "symbolic links are not supported")

    def mknod(self, parent_ino: int, name: bytes | str, mode: int) -> Attributes:
        if not stat_mode.S_ISREG(mode):
            raise OSError(errno.EPERM, "only regular files can be created")
        result, attrs = self.create(parent_ino, name, mode, os.O_WRONLY | os.O_EXCL)
        self.flush(result.fh)
        self.release(result.fh)
        return attrs

    def open_handles(self) -> int:
        with self._lock:
            return len(self._handles)

    def close(self) -> None:
        """Upload what is still written (unmount), then drop every open file."""
        for path, exc in self.flush_all():
            log.error("upload of %s at unmount failed: %s", path, exc)
        for node in self.table.nodes():
            of = node.open_file
            if of is not None:
                of.handles = 0
                self._close_open_file(of)
