"""One ref seen as a directory tree: object keys split on ``/`` into directories and files.

Owns the mapping path <-> key (a directory ``a/b`` is every key under ``a/b/``, plus the
zero-size marker object ``a/b/`` that ``mkdir`` creates so an empty directory persists), which
names a listing may show, and the metadata cache of the ref: ``stat`` results and the stats
that listings bring along, and the listing pages themselves (a second ``ls -l`` of a big
directory is answered from memory; each at most ``metadata_entries`` paths per ref, a mount
option), kept ``ttl`` seconds on a branch and until evicted on a tag or commit (immutable).  A
change made through this tree (``remember``/``forget``) drops the pages of the directory it is in;
a directory whose every child and each one's stat the tree knows is then listed from memory
(``_page_from_memory``: ``grep -r`` or ``rm -r`` of a tree just written here).

The kernel keeps listings too (``lakefuse.fs.readdir``: FUSE's readdir cache): on a tag or commit
for good, on a branch while the tree vouches for them.  ``listing_for_kernel`` and
``kernel_listed`` track the listings served whole to the kernel with nothing changed in between
(``kernel_keeps``): every change, forget or poll that drops a directory's pages drops that too,
so the next opendir of the directory tells the kernel to list it anew.

Lookups cost the same whatever the size of the directory.  A name not in the cache is one point
read of the backend (its object, else the first key under it), never a page of its neighbours
each time, with three exceptions that only save work: a directory whose every child the tree
knows (``_complete``: listed to the end, or made empty by ``mkdir`` here, and kept up to date by
``remember``) answers a name it lacks as absent from memory, which is what creating files in
a new directory (``tar x``, ``cp -r``, ``git clone``) and probing for missing siblings after a
listing (Hadoop's ``.crc`` files) do; the second lookup in a row memory cannot answer in one
directory lists it once, if one page holds it whole (``_learn_small_directory``: then it is
known whole), and notes it as big otherwise; a big directory where lookups keep needing point
reads (``LEARN_BIG_AFTER`` of them) is learnt whole in the background (``learn_directory``, on
the thread of ``lakefuse.fs.learner``), after which it answers like a small one; and lookups
finding names in ascending order (``ls -l`` after the kernel forgot the entries, a sorted loop)
fetch the next names after the found one, in pages that double while they are used up.

Coherence on a branch: without a change feed, ``ttl`` is short (another writer's change shows
within about that long).  With one (``change_feed``, see ``LakeBackend.branch_changes``), the
tree takes the branch's cursor before its first read and ``poll_changes`` forgets exactly what
other writers changed since, so ``ttl`` can be long.  A read that overlapped a forget is
answered but not kept (``_changes``), so a stale answer never outlives the poll that
invalidated it.
"""

from __future__ import annotations

import errno
import threading
import time
from typing import Callable, NamedTuple

import cachetools

from lakefuse.errors import InvalidName, NameTooLong, RefNotFound
from lakefuse.fs.backend import LakeBackend, MountRef
from lakefuse.fs.lru import LRUDict
from lakefuse.fs.replies import WouldBlock
from lakefuse.graveler.model import Entry

MAX_NAME_BYTES = 255
#: names a lookup fetches after the one it found, when lookups go in ascending order: the first
#: page, and the most once pages keep being used up
PREFETCH_FIRST = 64
PREFETCH_MOST = 1000
#: after a page fetched ahead went unused (lookups in random order), how many ascending finds
#: in a row it takes to fetch one again
PREFETCH_RETRY_RUN = 4
#: the most entries a directory may hold to be listed whole after two lookups there
SMALL_DIRECTORY = 2048
#: point reads in a directory known big after which it is learnt whole in the background
LEARN_BIG_AFTER = 16
#: the share of the metadata cache (``--metadata-entries``) a directory learnt whole may take at
#: most: 150,000 names by default (a directory of 100,000 and the files a job adds to it)
LEARN_MOST_SHARE = 0.75
#: entries per backend page when learning a directory in the background: about half a
#: millisecond of the interpreter's time, which a request arriving meanwhile waits for; after
#: each page the learner rests as long as the page took, so it takes at most half of the
#: interpreter from the requests of the moment (creating 2,000 files in a directory of
#: 100,000 took 2.1–2.4 s while the directory was learnt that way, 2.8–3.8 s without rests and
#: pages of 256, against 1.7 s without learning)
LEARN_PAGE = 64
#: listings of directories from their first name on a tree follows at once (see ``list_dir``)
LISTINGS_FOLLOWED = 64
#: the most names a directory known whole may hold to be listed from memory
MEMORY_LISTING_NAMES = 2048
#: paths a tree's metadata cache keeps, and entries of listing pages (least recently listed
#: directories go first), unless the mount says otherwise (``--metadata-entries``)
METADATA_ENTRIES = 200_000
#: directories whose last change through this mount a tree remembers (see ``touch_dirs``)
DIR_CHANGES_KEPT = 100_000
#: directories of a branch whose listing the kernel may keep (see ``kernel_keeps``)
KERNEL_LISTINGS_VOUCHED = 100_000
CONTROL_DIR_NAME = ".lakefuse"


class PathStat(NamedTuple):
    """A path of a tree: a file (``entry`` is its object; None while a new file is not
    uploaded yet) or a directory (``entry`` is its marker object, None if implied by keys or
    not known from a listing).  A tuple: one is made per listed entry, and a tuple is the
    cheapest immutable record Python has."""

    is_dir: bool
    entry: Entry | None


ROOT_STAT = PathStat(True, None)
#: ``Tree.stat``: the path had nothing waiting for the stager
_NOT_PENDING = object()
#: a directory seen only through the keys under it (no marker object known)
IMPLIED_DIR_STAT = ROOT_STAT
#: names no directory entry may have, whatever their length
_UNLISTABLE = frozenset(("", ".", ".."))


def check_name(name: str) -> str:
    """A single path component a tree may hold (the kernel never passes '/', '.' or '..')."""
    if len(name.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
        raise NameTooLong(f"name longer than {MAX_NAME_BYTES} bytes: {name[:40]}...")
    if not name or "/" in name or "\0" in name or name in (".", ".."):
        raise InvalidName(f"invalid file name {name!r}")
    return name


def join(path: str, name: str) -> str:
    return f"{path}/{name}" if path else name


def dir_prefix(path: str) -> str:
    """The key prefix of the objects inside directory ``path`` ('' for the tree root)."""
    return f"{path}/" if path else ""


def displayable(name: str) -> bool:
    """Whether a name taken from a key can be shown as a directory entry."""
    return bool(name) and name not in (".", "..") and len(name.encode("utf-8", "surrogateescape")) <= MAX_NAME_BYTES


def decode_name(name: bytes | str) -> str:
    """A name from the kernel as text (names are UTF-8 in the core): EILSEQ if it is not."""
    if isinstance(name, str):
        return name
    try:
        return name.decode("utf-8")
    except UnicodeDecodeError:
        raise OSError(errno.EILSEQ, "file names must be valid UTF-8") from None


def tree_key(repo: str, ref: MountRef) -> tuple:
    """What tells trees apart: a branch by name (its head moves), anything else by commit."""
    return (repo, ref.kind.value, ref.name, None if ref.is_branch else ref.commit_id)


def ancestors(paths) -> set[str]:
    """Every directory above any of ``paths`` (not the tree root '')."""
    out = set()
    for path in paths:
        parent = path.rpartition("/")[0]
        while parent and parent not in out:
            out.add(parent)
            parent = parent.rpartition("/")[0]
    return out


def _listed_child(key: str, entry: Entry | None, start: int) -> tuple[str, str, PathStat]:
    """``(path, name, stat)`` of one item of a listing of a directory whose key prefix is
    ``start`` characters long: a subdirectory (with its marker, or implied by the keys under
    it: ``entry`` None), else a file, whose key is its path (one string for the page, the cache
    and its node)."""
    if entry is None:
        child = key[:-1]
        return child, child[start:], IMPLIED_DIR_STAT
    if key[-1] == "/":  # a subdirectory, with its marker (its mode, owner and times)
        child = key[:-1]
        return child, child[start:], PathStat(True, entry)
    return key, key[start:], PathStat(False, entry)


def _hidden(name: str, hide_control: bool) -> bool:
    """Whether a listed name is not shown: not a possible directory entry ('' is the directory's
    own marker), or the control directory's name at a branch's root (``hide_control``)."""
    if (len(name) > MAX_NAME_BYTES // 4 or name in _UNLISTABLE) and not displayable(name):
        return True
    return "/" in name or (hide_control and name == CONTROL_DIR_NAME)


def _entries_in(pages: dict) -> int:
    """How many entries the kept pages of one directory hold (at least 1: an empty directory's
    page costs something too)."""
    return max(1, sum(len(result[0]) for result, _expires in pages.values()))


class _Children:
    """Every name directly in one directory, as a tree knows it until ``expires``: a name not
    in ``names`` is not there (one in it may be: a lookup asks)."""

    __slots__ = ("names", "expires")

    def __init__(self, names, expires: float):
        self.names = set(names)
        self.expires = expires


def _children_size(children: _Children) -> int:
    return len(children.names) + 1


class _Listing:
    """A listing of one directory from its first name on, page by page, that may end with
    every child known (see ``Tree.list_dir``)."""

    __slots__ = ("next_after", "names", "changes", "expires")

    def __init__(self, changes: int, expires: float):
        self.next_after = ""
        self.names: list[str] = []
        self.changes = changes
        self.expires = expires


class _Learning:
    """A directory being learnt whole in the background (``Tree.learn_directory``): the names
    in it that changed through this mount or another writer since it began (each may be there:
    its listed stat, maybe older, is not kept), or whether the directory itself changed."""

    __slots__ = ("touched", "aborted")

    def __init__(self):
        self.touched: set[str] = set()
        self.aborted = False


class _BigDirectory:
    """A directory too big to be learnt in one page: until when that is known, and the point
    reads lookups made in it since (-1: its learning is asked for, or it is too big to learn)."""

    __slots__ = ("expires", "point_reads")

    def __init__(self, expires: float):
        self.expires = expires
        self.point_reads = 0


class Tree:
    """The tree of one ref of one repository; thread-safe."""

    def __init__(self, backend: LakeBackend, repo: str, ref: MountRef, *, writable: bool,
                 ttl: float | None, metadata_entries: int = METADATA_ENTRIES, change_feed=None,
                 learn_in_background: Callable[[Tree, str], None] | None = None):
        self.backend = backend
        self._get_entry_or_child = getattr(backend, "get_entry_or_child", None)  # optional (LakeBackend)
        #: the same, answered at once or WouldBlock (optional: see ``stat(quick=True)``)
        self._get_entry_or_child_quick = getattr(backend, "get_entry_or_child_quick", None)
        self.repo = repo
        self.ref = ref
        self.writable = writable
        self.ttl = ttl  # None: immutable, cached until evicted
        self.key = tree_key(repo, ref)
        self._cache = LRUDict(metadata_entries)  # path -> (PathStat or None, expires)
        #: directory path -> {(after, limit): (list_dir result, expires)}
        self._pages: cachetools.LRUCache = cachetools.LRUCache(maxsize=metadata_entries, getsizeof=_entries_in)
        self._changes = 0  # counts remember/forget: a page listed across one is not kept
        self._lock = threading.Lock()
        #: directory path -> _Children: directories whose every child is known
        self._complete: cachetools.LRUCache = cachetools.LRUCache(maxsize=metadata_entries, getsizeof=_children_size)
        self._listings: dict[str, _Listing] = {}  # directory path -> its listing from the start, under way
        #: directory path -> until when the kernel may keep the listing it was served whole (a
        #: branch's: see ``kernel_keeps``), and the listings being served to it (path -> token)
        self._kernel_listed: cachetools.LRUCache = cachetools.LRUCache(maxsize=KERNEL_LISTINGS_VOUCHED)
        self._kernel_listing: dict[str, tuple[object, float]] = {}
        #: path -> the stat of a file whose entry waits for the stager (see ``remember``)
        self._pending: dict[str, PathStat | None] = {}
        #: directory path -> _BigDirectory: too big to be learnt in one page (see _learn_small_directory)
        self._big_dirs: cachetools.LRUCache = cachetools.LRUCache(maxsize=10_000)
        #: asks for ``learn_directory(path)`` on another thread (``lakefuse.fs.learner``); only
        #: where what is learnt stays true long enough to pay: on a tag or commit, and on a
        #: branch whose change feed is watched (else its ``ttl`` is a second or so)
        self._learn_in_background = learn_in_background if ttl is None or change_feed is not None else None
        self._learning: dict[str, _Learning] = {}  # directory path -> its learning under way
        self._last_asked_dir: str | None = None
        # ascending lookups (see _found): the last name found, the end of the last page fetched
        # after one, the size of the next page, how many ascending finds in a row it takes
        # and there are, and the answers memory gave (all, and when the last page came)
        self._last_found: str | None = None
        self._prefetched_to: str | None = None
        self._prefetch_size = PREFETCH_FIRST
        self._prefetch_run = 1
        self._ascending = 0
        self._memory_answers = 0
        self._memory_answers_at_prefetch = 0
        #: ``LakeBackend.branch_changes`` of a watched branch, and where the last poll left off
        self.change_feed = change_feed
        self.change_cursor: object | None = None
        self._last_changed: set[str] | None = set()  # what the last poll reported (see poll_changes)
        #: the last result of each writable control file (``lakefuse.fs.control``): name ->
        #: ("ok", text) or ("error", text)
        self.control_results: dict[str, tuple[str, str]] = {}
        #: directory path -> ns of the last entry made or removed in it through this mount: its
        #: mtime and ctime until an explicit change of the directory stores them (memory only)
        self._dir_changes = LRUDict(DIR_CHANGES_KEPT)
        #: what chmod, chown and utime set on the ref's root directory, as marker metadata would
        #: hold it (memory only: a ref's root has no marker object)
        self.root_metadata: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"Tree({self.repo}/{self.ref.name})"

    @property
    def branch(self) -> str:
        return self.ref.name

    @property
    def is_branch(self) -> bool:
        return self.ref.is_branch

    # ------------------------------------------------------------------ metadata cache

    def _expiry(self) -> float:
        return float("inf") if self.ttl is None else time.monotonic() + self.ttl

    def cached(self, path: str) -> tuple[PathStat | None, float] | None:
        """``(stat_or_None, expires)`` if known and fresh, else None."""
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(path)
            if hit is not None and hit[1] > now:
                self._memory_answers += 1
                return hit
            parent, _, name = path.rpartition("/")
            children = self._complete.get(parent)
        if children is not None and children.expires > now and name not in children.names:
            return None, children.expires  # the directory is known whole, and lacks it
        return None

    def remember(self, path: str, stat: PathStat | None, pending: bool = False) -> float:
        """``path`` is now ``stat`` (this mount changed it).  ``pending``: a file's entry that
        waits for the stager; until ``staged``, what the backend says of ``path`` is older, and
        neither listings nor lookups let it replace this."""
        expires = self._expiry()
        parent, _, name = path.rpartition("/")
        with self._lock:
            self._cache[path] = (stat, expires)
            if pending:
                self._pending[path] = stat
            else:
                self._pending.pop(path, None)
            self._pages.pop(parent, None)
            self._pages.pop(path, None)
            self._kernel_changed(parent, path)
            self._learnt_change(parent, name)
            if stat is None or not stat.is_dir:
                # a directory's own change (a marker stored, a mode or time set) leaves what
                # is in it as it was: rsync sets each directory's mode before filling it
                self._complete.pop(path, None)
                self._stop_learning(path)
            children = self._complete.get(parent)
            if children is not None:
                if stat is None:
                    children.names.discard(name)
                else:
                    children.names.add(name)
                self._complete[parent] = children  # counted again
            self._changes += 1
        return expires

    def staged(self, path: str, entry: Entry | None) -> None:
        """The file ``path``, which this mount answered for from memory since its close (see
        ``lakefuse.fs.stager``), is now ``entry`` in the backend: listings of its directory kept
        meanwhile lack it, and so may a listing that made the directory known whole meanwhile."""
        parent, _, name = path.rpartition("/")
        with self._lock:
            if path in self._pending:
                pending = self._pending[path]
                if (pending.entry if pending is not None else None) is entry:
                    del self._pending[path]
            self._pages.pop(parent, None)
            self._kernel_changed(parent)
            self._learnt_change(parent, name)
            children = self._complete.get(parent)
            if children is not None and name not in children.names:
                children.names.add(name)
                self._complete[parent] = children
            self._changes += 1

    def is_current(self, path: str, stat: PathStat | None) -> bool:
        """Whether ``stat``, read from the backend or a listing, is not older than what this
        tree knows of ``path`` now: False when the tree remembers another state of it (this
        mount changed it, e.g. a file stored at its RELEASE, after that answer was read)."""
        now = time.monotonic()
        with self._lock:
            known = self._cache.peek(path)
        return known is None or known[0] is stat or known[1] <= now

    def known_names(self, path: str, most: int) -> list[str] | None:
        """Every name in directory ``path``, sorted, if the tree knows them all (from memory,
        still fresh) and they are at most ``most``, else None; never asks the backend
        (``lakefuse.fs.siblings``)."""
        known = self.known_whole(path, most)
        if known is None:
            return None
        names = list(known[0])
        names.sort()
        return names

    def known_whole(self, path: str, most: int) -> tuple[set[str], float] | None:
        """``(names, expires)``: every name in directory ``path`` (a copy) and until when the
        tree trusts that a name not among them is not there, if the tree knows them all (from
        memory, still fresh) and they are at most ``most``; else None.  Never asks the backend."""
        with self._lock:
            children = self._complete.get(path)
            if children is None or children.expires <= time.monotonic() or len(children.names) > most:
                return None
            return set(children.names), children.expires

    def known_files(self, path: str, most: int) -> list[tuple[str, Entry, float]] | None:
        """``[(path, entry, expires)]``: the files of directory ``path`` whose object memory
        holds fresh (not waiting for the stager), if the tree knows the directory whole (from
        memory, still fresh) and it holds at most ``most`` names; else None.  Never asks the
        backend, leaves the cache's order and counts as they are."""
        now = time.monotonic()
        prefix = dir_prefix(path)
        files = []
        with self._lock:
            children = self._complete.get(path)
            if children is None or children.expires <= now or len(children.names) > most:
                return None
            known_of, pending = self._cache.peek, self._pending
            for name in children.names:
                child = prefix + name
                known = known_of(child)
                if known is None or known[1] <= now or child in pending:
                    continue
                stat = known[0]
                if stat is not None and not stat.is_dir and stat.entry is not None:
                    files.append((child, stat.entry, known[1]))
        return files

    def cached_entry(self, path: str) -> Entry | None:
        """The entry of the file at ``path`` if memory holds it fresh, else None (a directory,
        absent or unknown); leaves the cache's order and counts as they are."""
        with self._lock:
            known = self._cache.peek(path)
        if known is None or known[1] <= time.monotonic() or known[0] is None or known[0].is_dir:
            return None
        return known[0].entry

    def known_empty(self, path: str) -> bool:
        """Whether directory ``path`` is known, from memory and still fresh, to hold nothing."""
        with self._lock:
            children = self._complete.get(path)
            return children is not None and children.expires > time.monotonic() and not children.names

    def waits_for_stager(self, path: str) -> bool:
        """Whether this mount's newest change of ``path`` waits for the stager (``remember``
        with ``pending``)."""
        with self._lock:
            return path in self._pending

    def remember_empty_dir(self, path: str, stat: PathStat, pending: bool = False) -> float:
        """``remember`` a directory this mount just made, which holds nothing yet (``pending``:
        its marker waits for the stager)."""
        expires = self.remember(path, stat, pending)
        with self._lock:
            self._complete[path] = _Children((), expires)
        return expires

    def forget(self, path: str) -> None:
        """What ``path`` is, and what is in it, must be read again."""
        parent, _, name = path.rpartition("/")
        with self._lock:
            self._cache.pop(path, None)
            self._pages.pop(parent, None)
            self._pages.pop(path, None)
            self._kernel_changed(parent, path)
            self._complete.pop(path, None)
            self._learnt_change(parent, name)
            self._stop_learning(path)
            children = self._complete.get(parent)
            if children is not None:  # a name the parent may have: a lookup asks the backend
                children.names.add(name)
                self._complete[parent] = children
            self._changes += 1
            self._last_found = None  # lookups in order are interrupted: no page on the next

    def forget_all(self) -> None:
        with self._lock:
            self._cache.clear()
            self._pages.clear()
            self._kernel_listed.clear()
            self._kernel_listing.clear()
            self._complete.clear()
            for path in list(self._learning):
                self._stop_learning(path)
            self._changes += 1
            expires = self._expiry()
            for path, stat in self._pending.items():  # still this mount's, still newer
                self._cache[path] = (stat, expires)

    def touch_dirs(self, paths, now_ns: int) -> None:
        """Entries were made or removed in the directories ``paths`` at ``now_ns``: their mtime
        and ctime, in this mount.  Not stored: a marker changed with every file added would make
        two branches adding files to one directory conflict when merged."""
        with self._lock:
            for path in paths:
                self._dir_changes[path] = now_ns

    def dir_changed_at(self, path: str) -> int | None:
        """When an entry of directory ``path`` last changed through this mount (see ``touch_dirs``)."""
        with self._lock:
            return self._dir_changes.peek(path)

    def forget_dir_change(self, path: str) -> int | None:
        """Drop (and return) ``dir_changed_at(path)``: the directory's times were stored."""
        with self._lock:
            return self._dir_changes.pop(path)

    # ------------------------------------------------------------------ reads

    def stat(self, path: str, fresh: bool = False, quick: bool = False) -> tuple[PathStat | None, float]:
        """What ``path`` is (None: nothing) and until when that answer may be cached: from
        memory, else one point read of the backend (see the module docstring).  ``fresh``:
        from the backend whatever memory holds (what an unlink or rename acts on).  ``quick``:
        on the event loop: a point read only if the backend answers it at once (from memory
        and an embedded database: ``lakefuse.graveler.quick``), never a listing, else
        WouldBlock before anything changed."""
        if path == "":
            return ROOT_STAT, self._expiry()
        hit = None if fresh else self.cached(path)
        if hit is not None:
            return hit
        if quick and (self._get_entry_or_child_quick is None or fresh or self._would_learn(path)
                      or self._prefetch_due(path)
                      or (self.change_feed is not None and self.change_cursor is None)):
            raise WouldBlock
        self._take_cursor()
        if not fresh and not quick:
            hit = self._learn_small_directory(path)
            if hit is not None:
                return hit
        with self._lock:
            changes = self._changes
            pending_before = self._pending.get(path, _NOT_PENDING)
        prefix = dir_prefix(path)
        if quick:
            entry, first = self._get_entry_or_child_quick(self.repo, self.ref, path)
            self._last_asked_dir = path.rpartition("/")[0]  # as _learn_small_directory does
        elif self._get_entry_or_child is not None:  # one read of the backend, not two
            entry, first = self._get_entry_or_child(self.repo, self.ref, path)
        else:
            entry, first = self.backend.get_entry(self.repo, self.ref, path), None
            if entry is None:
                items = self.backend.list_entries(self.repo, self.ref, prefix, limit=1)
                first = items[0] if items else None
        if entry is not None:
            stat = PathStat(False, entry)
        elif first is not None:
            stat = PathStat(True, first.entry if first.key == prefix else None)
        else:
            stat = None
        expires = self._expiry()
        parent, _, name = path.rpartition("/")
        with self._lock:
            if path in self._pending:  # the backend's answer is older than this mount's
                stat = self._pending[path]
            elif pending_before is not _NOT_PENDING:  # staged meanwhile: the answer may predate it
                stat = pending_before
            if changes != self._changes:  # forgotten meanwhile: answer, but do not keep
                return stat, time.monotonic()
            # kept, but not a change of the directory: its pages and known children stay
            self._cache[path] = (stat, expires)
            self._changes += 1
            children = self._complete.get(parent)
            if children is not None and stat is not None and name not in children.names:
                children.names.add(name)  # made by another writer since the listing
                self._complete[parent] = children
        if not fresh:
            self._point_read_in(parent)
            if stat is not None:
                self._found(path, may_list=not quick)
        return stat, expires

    def _would_learn(self, path: str) -> bool:
        """Whether ``_learn_small_directory`` lists the directory of ``path`` now: the lookup
        before asked there too, and it is not known to be too big."""
        parent = path.rpartition("/")[0]
        if self._last_asked_dir != parent:
            return False
        with self._lock:
            too_big = self._big_dirs.get(parent)
        return too_big is None or too_big.expires <= time.monotonic()

    def _learn_small_directory(self, path: str) -> tuple[PathStat | None, float] | None:
        """At the second lookup in a row that memory cannot answer in one directory (``stat``
        of its files, probes for missing siblings, creates), list the directory once, if one
        page of ``SMALL_DIRECTORY`` entries holds it whole: then it is known whole and the
        next lookups there, of present or missing names, are answered from memory.  A bigger
        directory is noted as such (until ``ttl``) and gets point reads (until it is learnt:
        ``_point_read_in``).  What ``path`` is, if the listing told."""
        parent = path.rpartition("/")[0]
        learn = self._would_learn(path)
        self._last_asked_dir = parent
        if not learn:
            return None
        _page, _last, exhausted = self.list_dir(parent, "", SMALL_DIRECTORY)
        if not exhausted:
            with self._lock:
                self._big_dirs[parent] = _BigDirectory(self._expiry())
            return None
        return self.cached(path)

    # ------------------------------------------------------------------ big directories learnt whole

    def _point_read_in(self, parent: str) -> None:
        """A lookup in directory ``parent`` needed a point read: at the ``LEARN_BIG_AFTER``-th
        in a directory known big, ask for it to be learnt whole in the background.  Lookups
        that keep missing memory in one big directory are a walk through it (a job reading its
        files, probes for missing siblings, files created there): learning it costs about
        what a sixth of its names' point reads would."""
        if self._learn_in_background is None:
            return
        with self._lock:
            big = self._big_dirs.get(parent)
            if big is None or big.point_reads < 0:
                return
            big.point_reads += 1
            if big.point_reads < LEARN_BIG_AFTER:
                return
            big.point_reads = -1
        self._learn_in_background(self, parent)

    def _learnt_change(self, parent: str, name: str) -> None:
        """Under ``_lock``: ``name`` in directory ``parent`` changed (a learning of ``parent``
        under way keeps it as a name that may be there, and not its listed stat)."""
        learning = self._learning.get(parent)
        if learning is not None:
            learning.touched.add(name)

    def _stop_learning(self, path: str) -> None:
        """Under ``_lock``: directory ``path`` itself changed: a learning of it under way ends
        unkept (and may be asked for again)."""
        learning = self._learning.pop(path, None)
        if learning is not None:
            learning.aborted = True
            big = self._big_dirs.get(path)
            if big is not None:
                big.point_reads = 0

    def learn_directory(self, path: str, page: int = LEARN_PAGE) -> bool:
        """List directory ``path`` to its end, in pages of ``page`` entries, and keep it known
        whole (``_complete``) with the stat of every name in it: then its lookups, of present or
        missing names, are answered from memory.  Run on a thread of its own
        (``lakefuse.fs.learner``) while lookups and changes go on: a name changed meanwhile
        (``_learnt_change``) is kept as a name that may be there, with the stat its change left
        (never the listing's, maybe older); a stat memory already holds fresh is kept too.  A
        change of the directory itself ends it unkept, and so does a directory of more than
        ``LEARN_MOST_SHARE`` of the metadata cache (``--metadata-entries``: it would push out
        everything else).
        Returns whether the directory is now known whole."""
        learning = _Learning()
        with self._lock:
            known = self._complete.get(path)
            if known is not None and known.expires > time.monotonic():
                return True
            if path in self._learning:
                return False
            self._learning[path] = learning
        try:
            return self._learn(path, page, learning)
        finally:
            with self._lock:
                if self._learning.get(path) is learning:
                    del self._learning[path]

    def _learn(self, path: str, page: int, learning: _Learning) -> bool:
        self._take_cursor()
        expires = self._expiry()
        prefix = dir_prefix(path)
        start = len(prefix)
        hide_control = self.is_branch and path == ""
        most = self._cache.maxsize * LEARN_MOST_SHARE
        names: set[str] = set()
        after = ""
        while True:
            started = time.monotonic()
            items = self.backend.list_entries(self.repo, self.ref, prefix, after=after, limit=page + 1)
            exhausted = len(items) <= page
            del items[page:]
            now = time.monotonic()
            with self._lock:
                if learning.aborted:
                    return False
                cache = self._cache
                known_of = cache.peek
                touched = learning.touched
                pending = self._pending
                for item in items:
                    child, name, stat = _listed_child(item.key, item.entry, start)
                    if _hidden(name, hide_control):
                        continue
                    names.add(name)
                    if name in touched or child in pending:
                        continue
                    known = known_of(child)
                    if known is None or known[1] <= now:
                        cache[child] = (stat, expires)
            if len(names) > most:
                with self._lock:
                    big = self._big_dirs.get(path)
                    if big is not None:
                        big.point_reads = -1  # point reads it is, until it is found big again
                return False
            if exhausted:
                break
            after = items[-1].key
            time.sleep(time.monotonic() - started)  # a rest as long as the page (see LEARN_PAGE)
        with self._lock:
            if learning.aborted:
                return False
            names |= learning.touched
            names.update(key[start:] for key in self._pending if key.startswith(prefix) and "/" not in key[start:])
            known = self._complete.get(path)
            if known is not None:
                names |= known.names
            self._complete[path] = _Children(names, expires)
            big = self._big_dirs.get(path)
            if big is not None:  # should memory lose it (evicted, its marker changed), learnt again
                big.point_reads = 0
        return True

    def _prefetch_due(self, path: str) -> bool:
        """Whether ``_found(path)`` would fetch a page ahead (a listing), were ``path`` found."""
        last = self._last_found
        parent = path.rpartition("/")[0]
        if last is None or last >= path or last.rpartition("/")[0] != parent:
            return False
        reached = self._prefetched_to
        if reached is not None and reached.rpartition("/")[0] == parent and path > reached:
            return self._memory_answers - self._memory_answers_at_prefetch >= self._prefetch_size // 2
        return self._ascending + 1 >= self._prefetch_run

    def _found(self, path: str, may_list: bool = True) -> None:
        """A lookup found ``path`` in the backend: after a name found just before it in the
        same directory, fetch the names that follow (remembered by ``list_dir``), in a page
        twice as big as the last if lookups walked through that one (else the first size).
        Lookups that went past the last page without using it (names asked in random order, in
        a directory too big to be learnt whole) fetch none until ``PREFETCH_RETRY_RUN``
        ascending finds in a row say a walk began: each page cost them a listing for nothing."""
        last, self._last_found = self._last_found, path
        parent = path.rpartition("/")[0]
        if last is None or last >= path or last.rpartition("/")[0] != parent:
            self._ascending = 0
            return
        self._ascending += 1
        reached = self._prefetched_to
        if reached is not None and reached.rpartition("/")[0] == parent and path > reached:
            used = self._memory_answers - self._memory_answers_at_prefetch
            if used < self._prefetch_size // 2:  # jumped over the page: not a walk
                self._prefetched_to = None
                self._prefetch_run = PREFETCH_RETRY_RUN
                self._ascending = 0
                return
            self._prefetch_size = min(self._prefetch_size * 2, PREFETCH_MOST)
            self._prefetch_run = 1
        elif self._ascending < self._prefetch_run:
            return
        else:
            self._prefetch_size = PREFETCH_FIRST
        if not may_list:  # on the event loop (``_prefetch_due`` said no: another thread moved on)
            return
        _page, last_key, _exhausted = self.list_dir(parent, path, self._prefetch_size)
        self._prefetched_to = last_key.rstrip("/")
        self._memory_answers_at_prefetch = self._memory_answers

    def kept_page(self, path: str, after: str, limit: int) -> tuple[list[tuple[str, str, PathStat]], str, bool] | None:
        """``list_dir(path, after, limit)`` if that page is kept in memory and fresh, or the
        directory is known whole with a fresh stat of every name in it (``_page_from_memory``),
        else None (never asks the backend)."""
        with self._lock:
            pages = self._pages.get(path)
            kept = pages.get((after, limit)) if pages is not None else None
            if kept is None or kept[1] <= time.monotonic():
                return self._page_from_memory(path, after, limit)
        return kept[0]

    def _page_from_memory(self, path: str, after: str, limit: int) -> tuple[list[tuple[str, str, PathStat]], str, bool] | None:
        """The rest of directory ``path`` after key ``after`` as one last page, made from what
        the tree knows (under ``_lock``): every name in it (``_complete``) and each one's stat.
        A directory this mount just filled (``tar x``, ``cp -r``) loses its kept pages with
        every file it gains, and was listed from the backend again by the ``grep -r`` or
        ``rm -r`` that followed.  None if any of it is unknown or stale, or it holds more
        than ``MEMORY_LISTING_NAMES`` names (the page is made on the caller's thread), or a
        name's entry waits for the stager."""
        children = self._complete.get(path)
        now = time.monotonic()
        if children is None or children.expires <= now or len(children.names) > min(limit, MEMORY_LISTING_NAMES):
            return None
        prefix = dir_prefix(path)
        hide_control = self.is_branch and path == ""
        known_of = self._cache.peek
        rows = []
        for name in children.names:
            child = prefix + name
            known = known_of(child)
            if known is None or known[1] <= now:
                return None  # a name that may be there: only the backend can tell
            stat = known[0]
            if stat is not None and child in self._pending:
                return None  # waits for the stager: served after the backend's entries, and the
                # kernel may not keep that listing (``lakefuse.fs.readdir``)
            if stat is None or (hide_control and name == CONTROL_DIR_NAME):
                continue
            key = child + "/" if stat.is_dir else child
            if key > after:
                rows.append((name, key, stat))
        rows.sort(key=lambda row: row[1])  # the backend's order: by key
        return rows, rows[-1][1] if rows else after, True

    def list_dir(self, path: str, after: str, limit: int) -> tuple[list[tuple[str, str, PathStat]], str, bool]:
        """A page of directory ``path`` after key ``after``: ``([(name, key, stat)], last_key,
        exhausted)``; ``last_key`` is where the next page starts (``after`` if none).  Names
        that cannot be directory entries are skipped, and so is the control directory's name
        at a branch's root; the stats are remembered, and so is the page.  Pages listed one
        after the other from the first, with nothing remembered or forgotten in between, make
        the directory known whole (``_complete``) once the last one is listed."""
        with self._lock:
            changes = self._changes
        result = self._list_page(path, after, limit)
        self._follow_listing(path, after, limit, result, changes)
        return result

    def _follow_listing(self, path: str, after: str, limit: int, result, changes: int) -> None:
        page, last_key, exhausted = result
        with self._lock:
            listing = _Listing(changes, float("inf")) if after == "" else self._listings.get(path)
            if listing is None or listing.next_after != after:
                return
            pages = self._pages.get(path)
            kept = pages.get((after, limit)) if pages is not None else None
            if kept is None or listing.changes != self._changes:  # not kept, or changed meanwhile
                self._listings.pop(path, None)
                return
            listing.expires = min(listing.expires, kept[1])
            listing.names.extend(name for name, _key, _stat in page)
            listing.next_after = last_key
            if exhausted:
                self._listings.pop(path, None)
                children = _Children(listing.names, listing.expires)
                known = self._complete.get(path)
                if known is not None:  # names the tree learnt meanwhile: they may exist, ask
                    children.names |= known.names
                self._complete[path] = children
                return
            if path not in self._listings and len(self._listings) >= LISTINGS_FOLLOWED:
                self._listings.pop(next(iter(self._listings)))  # the oldest listing under way
            self._listings[path] = listing

    def _list_page(self, path: str, after: str, limit: int) -> tuple[list[tuple[str, str, PathStat]], str, bool]:
        kept = self.kept_page(path, after, limit)
        if kept is not None:
            return kept
        prefix = dir_prefix(path)
        with self._lock:
            changes = self._changes
            # a file staged while the backend is asked may be missing from its answer (or a
            # deletion staged meanwhile still in it): what was pending then is the newer truth
            pending_before = {key: stat for key, stat in self._pending.items() if key.startswith(prefix)}
        self._take_cursor()
        # one item more than the page: whether it is the last one is known without another
        # call (which costs a branch's listing two SQL queries)
        items = self.backend.list_entries(self.repo, self.ref, prefix, after=after, limit=limit + 1)
        exhausted = len(items) <= limit
        if not exhausted:
            del items[limit:]
        out = []
        expires = self._expiry()
        now = time.monotonic()
        hide_control = self.is_branch and path == ""
        with self._lock:
            keep = changes == self._changes  # else forgotten meanwhile: answer, but do not keep
            if not keep:
                expires = now
            # one pass per listed entry, on the path of every cold stat and ls: locals only
            cache = self._cache
            known_of = cache.peek
            pending = {**pending_before, **self._pending} if pending_before else self._pending
            start = len(prefix)
            append = out.append
            for item in items:
                key = item.key
                entry = item.entry
                child, name, stat = _listed_child(key, entry, start)
                if _hidden(name, hide_control):
                    continue
                if pending and child in pending:  # newer than the backend's: written here, waiting
                    stat = pending[child]
                    if stat is not None:
                        append((name, key, stat))
                    continue
                if entry is None:  # a listing cannot tell a directory marker: keep a known one
                    known = known_of(child)
                    if (known is not None and known[1] > now and known[0] is not None and known[0].is_dir
                            and known[0].entry is not None):
                        append((name, key, known[0]))
                        continue
                if keep:
                    cache[child] = (stat, expires)
                append((name, key, stat))
            result = (out, items[-1].key if items else after, exhausted)
            if keep:
                pages = dict(self._pages.get(path) or {})
                pages[(after, limit)] = (result, expires)
                if _entries_in(pages) <= self._pages.maxsize:
                    self._pages[path] = pages  # re-inserted: the cache counts its entries again
        return result

    # ------------------------------------------------------------------ listings the kernel keeps

    def kernel_keeps(self, path: str) -> bool:
        """Whether the kernel may keep the listing of directory ``path`` it was served last
        (answered at each opendir): always on a tag or commit; on a branch, while the tree
        vouches for the last listing served whole (``kernel_listed``), for ``ttl`` since it was
        served, or on a watched branch since it was last kept (the change feed drops it at the
        poll after another writer's change in the directory)."""
        if self.ttl is None:
            return True
        now = time.monotonic()
        with self._lock:
            expires = self._kernel_listed.get(path)
            if expires is None or expires <= now:
                return False
            if self.change_feed is not None:
                self._kernel_listed[path] = now + self.ttl
        return True

    def listing_for_kernel(self, path: str) -> object:
        """A listing of directory ``path`` from its start is being served to the kernel: the
        token that ``kernel_listed`` takes at its end."""
        token = object()
        with self._lock:
            if path not in self._kernel_listing and len(self._kernel_listing) >= LISTINGS_FOLLOWED:
                self._kernel_listing.pop(next(iter(self._kernel_listing)))  # the oldest, left unfinished
            self._kernel_listing[path] = (token, self._expiry())
        return token

    def kernel_listed(self, path: str, token: object) -> None:
        """The listing ``token`` stands for was served to its end: the kernel may keep it, if
        nothing in the directory changed since it started."""
        with self._lock:
            started = self._kernel_listing.get(path)
            if started is None or started[0] is not token:
                return
            del self._kernel_listing[path]
            self._kernel_listed[path] = started[1]

    def kernel_may_not_keep(self, path: str) -> None:
        """The listing of directory ``path`` being served holds what the tree cannot vouch
        for (files not uploaded yet): the kernel may keep neither it nor the one before."""
        with self._lock:
            self._kernel_changed(path)

    def _kernel_changed(self, *paths: str) -> None:
        """The listings of the directories ``paths`` changed (under ``_lock``)."""
        for path in paths:
            self._kernel_listed.pop(path, None)
            self._kernel_listing.pop(path, None)

    # ------------------------------------------------------------------ change feed

    def _take_cursor(self) -> None:
        """Before the first read of a watched branch: where its change feed starts."""
        if self.change_feed is not None and self.change_cursor is None:
            self.change_cursor = self.change_feed(self.repo, self.branch, None)[0]

    def poll_changes(self) -> set[str] | None:
        """Ask the change feed what other writers changed since the last poll and forget the
        cached metadata of those paths and of the directories above them.  Returns the
        changed paths (a directory marker's key as its directory's path), or None when
        everything was forgotten: the head moved, or the branch is gone.

        Each change is reported by two polls in a row: a request that read the old state just
        before the first one may still answer after it, and the second undoes what that left
        in caches.  Raises what the feed raises for anything else (the database is
        unreachable: the next poll tries again)."""
        if self.change_feed is None:
            return set()
        changed: set[str] | None = set()
        if self.change_cursor is not None:  # else nothing was read yet, nothing is cached
            try:
                cursor, keys = self.change_feed(self.repo, self.branch, self.change_cursor)
            except RefNotFound:
                cursor, keys = None, None  # the next read takes a new cursor, if the branch comes back
            self.change_cursor = cursor
            if keys is None:
                changed = None
            else:
                changed = {key[:-1] if key.endswith("/") else key for key in keys}
                changed.discard("")
        repeat, self._last_changed = self._last_changed, changed
        if changed is None or repeat is None:
            self.forget_all()
            return None
        changed = changed | repeat
        if changed:
            with self._lock:
                for path in changed | ancestors(changed):
                    parent, _, name = path.rpartition("/")
                    self._cache.pop(path, None)
                    self._pages.pop(path, None)
                    self._pages.pop(parent, None)
                    self._kernel_changed(parent, path)
                    self._learnt_change(parent, name)
                    if path in changed:  # its own object (a directory's marker: what it is may have changed)
                        self._complete.pop(path, None)
                        self._stop_learning(path)
                    children = self._complete.get(parent)
                    if children is not None:  # a name it may have now: a lookup asks the backend
                        children.names.add(name)
                        self._complete[parent] = children
                self._changes += 1
        return changed

    def has_children(self, path: str, ignore: tuple[str, ...] = ()) -> bool:
        """Whether directory ``path`` holds any object other than its own marker, ``ignore``
        (keys) and deletions waiting for the stager."""
        prefix = dir_prefix(path)
        with self._lock:  # deletions waiting for the stager are gone already
            deleted = [key for key, stat in self._pending.items() if stat is None and key.startswith(prefix)]
        skip = set(ignore) | {prefix} | set(deleted)
        items = self.backend.list_entries(self.repo, self.ref, prefix, limit=len(skip) + 1)
        return any(item.key not in skip for item in items)
