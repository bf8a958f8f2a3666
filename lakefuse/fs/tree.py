"""One ref seen as a directory tree: object keys split on ``/`` into directories and files.

Owns the mapping path <-> key (a directory ``a/b`` is every key under ``a/b/``, plus the
zero-size marker object ``a/b/`` that ``mkdir`` creates so an empty directory persists), which
names a listing may show, and the metadata cache of the ref: ``stat`` results and the stats
that listings bring along, and the listing pages themselves (a second ``ls -l`` of a big
directory is answered from memory; at most ``LISTED_ENTRIES_KEPT`` entries per ref), kept ``ttl``
seconds on a branch and until evicted on a tag or commit (immutable).  A change made through
this tree (``remember``/``forget``) drops the pages of the directory it is in.

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
from typing import NamedTuple

import cachetools

from lakefuse.errors import InvalidName, NameTooLong, RefNotFound
from lakefuse.fs.backend import LakeBackend, MountRef
from lakefuse.fs.lru import LRUDict
from lakefuse.graveler.model import Entry

MAX_NAME_BYTES = 255
PREFETCH_ENTRIES = 1000
#: entries of listing pages a tree keeps (least recently listed directories go first)
LISTED_ENTRIES_KEPT = 200_000
CONTROL_DIR_NAME = ".lakefuse"


class PathStat(NamedTuple):
    """A path of a tree: a file (``entry`` is its object; None while a new file is not
    uploaded yet) or a directory (``entry`` is its marker object, None if implied by keys or
    not known from a listing).  A tuple: one is made per listed entry, and a tuple is the
    cheapest immutable record Python has."""

    is_dir: bool
    entry: Entry | None


ROOT_STAT = PathStat(True, None)
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


def _entries_in(pages: dict) -> int:
    """How many entries the kept pages of one directory hold (at least 1: an empty directory's
    page costs something too)."""
    return max(1, sum(len(result[0]) for result, _expires in pages.values()))


class Tree:
    """The tree of one ref of one repository; thread-safe."""

    def __init__(self, backend: LakeBackend, repo: str, ref: MountRef, *, writable: bool,
                 ttl: float | None, cache_entries: int = 200_000, change_feed=None):
        self.backend = backend
        self.repo = repo
        self.ref = ref
        self.writable = writable
        self.ttl = ttl  # None: immutable, cached until evicted
        self.key = tree_key(repo, ref)
        self._cache = LRUDict(cache_entries)  # path -> (PathStat or None, expires)
        #: directory path -> {(after, limit): (list_dir result, expires)}
        self._pages: cachetools.LRUCache = cachetools.LRUCache(maxsize=LISTED_ENTRIES_KEPT, getsizeof=_entries_in)
        self._changes = 0  # counts remember/forget: a page listed across one is not kept
        self._lock = threading.Lock()
        self._last_miss_dir: str | None = None  # see stat(): sibling prefetch
        #: ``LakeBackend.branch_changes`` of a watched branch, and where the last poll left off
        self.change_feed = change_feed
        self.change_cursor: object | None = None
        self._last_changed: set[str] | None = set()  # what the last poll reported (see poll_changes)
        #: result of the last commit through the control file: ("ok", commit_id) or ("error", text)
        self.last_commit: tuple[str, str] | None = None

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
        with self._lock:
            hit = self._cache.get(path)
        if hit is not None and hit[1] > time.monotonic():
            return hit
        return None

    def remember(self, path: str, stat: PathStat | None) -> float:
        expires = self._expiry()
        with self._lock:
            self._cache[path] = (stat, expires)
            self._pages.pop(path.rpartition("/")[0], None)
            self._changes += 1
        return expires

    def forget(self, path: str) -> None:
        with self._lock:
            self._cache.pop(path, None)
            self._pages.pop(path.rpartition("/")[0], None)
            self._pages.pop(path, None)
            self._changes += 1

    def forget_all(self) -> None:
        with self._lock:
            self._cache.clear()
            self._pages.clear()
            self._changes += 1

    # ------------------------------------------------------------------ reads

    def stat(self, path: str) -> tuple[PathStat | None, float]:
        """What ``path`` is (None: nothing) and until when that answer may be cached.

        The second cache miss in a row in one directory (``stat`` of many files, ``ls -l``
        after the kernel forgot the entries) fetches a page of the directory from ``path`` on
        instead of the one object, so the next lookups are answered from memory."""
        if path == "":
            return ROOT_STAT, self._expiry()
        hit = self.cached(path)
        if hit is not None:
            return hit
        self._take_cursor()
        parent = path.rpartition("/")[0]
        sequential = self._last_miss_dir == parent
        self._last_miss_dir = parent
        if sequential:
            found = self._prefetch_from(parent, path)
            if found is not None:
                return found
        changes = self._changes
        entry = self.backend.get_entry(self.repo, self.ref, path)
        if entry is not None:
            stat = PathStat(False, entry)
        else:
            prefix = dir_prefix(path)
            items = self.backend.list_entries(self.repo, self.ref, prefix, limit=1)
            if items:
                first = items[0]
                stat = PathStat(True, first.entry if first.key == prefix else None)
            else:
                stat = None
        with self._lock:
            if changes != self._changes:  # forgotten meanwhile: answer, but do not keep
                return stat, time.monotonic()
        return stat, self.remember(path, stat)

    def _prefetch_from(self, parent: str, path: str) -> tuple[PathStat | None, float] | None:
        """List directory ``parent`` from ``path`` on (remembering what it finds); what
        ``path`` is, or None if the page did not reach it."""
        changes = self._changes
        page, last, exhausted = self.list_dir(parent, path[:-1], PREFETCH_ENTRIES)
        if not exhausted and last < path:
            return None
        name = path.rpartition("/")[2]
        for child_name, _key, stat in page:
            if child_name == name:
                found = self.cached(path) or (stat, time.monotonic())
                if found[0] is not None and found[0].is_dir and found[0].entry is None:
                    return None  # a listing cannot tell whether a directory has a marker: look it up
                return found
        with self._lock:
            if changes != self._changes:  # forgotten meanwhile: answer, but do not keep
                return None, time.monotonic()
        return None, self.remember(path, None)

    def kept_page(self, path: str, after: str, limit: int) -> tuple[list[tuple[str, str, PathStat]], str, bool] | None:
        """``list_dir(path, after, limit)`` if that page is kept in memory and fresh, else None
        (never asks the backend)."""
        with self._lock:
            pages = self._pages.get(path)
            kept = pages.get((after, limit)) if pages is not None else None
        if kept is not None and kept[1] > time.monotonic():
            return kept[0]
        return None

    def list_dir(self, path: str, after: str, limit: int) -> tuple[list[tuple[str, str, PathStat]], str, bool]:
        """A page of directory ``path`` after key ``after``: ``([(name, key, stat)], last_key,
        exhausted)``; ``last_key`` is where the next page starts (``after`` if none).  Names
        that cannot be directory entries are skipped, and so is the control directory's name
        at a branch's root; the stats are remembered, and so is the page."""
        kept = self.kept_page(path, after, limit)
        if kept is not None:
            return kept
        with self._lock:
            changes = self._changes
        self._take_cursor()
        prefix = dir_prefix(path)
        items = self.backend.list_entries(self.repo, self.ref, prefix, after=after, limit=limit)
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
            start = len(prefix)
            append = out.append
            for item in items:
                key = item.key
                entry = item.entry
                if entry is None:
                    name, stat = key[start:-1], IMPLIED_DIR_STAT
                else:
                    name, stat = key[start:], PathStat(False, entry)
                if (len(name) > MAX_NAME_BYTES // 4 or name in _UNLISTABLE) and not displayable(name):
                    continue  # also '': this directory's own marker
                if "/" in name or (hide_control and name == CONTROL_DIR_NAME):
                    continue
                child = prefix + name
                if entry is None:  # a listing cannot tell a directory marker: keep a known one
                    known = known_of(child)
                    if (known is not None and known[1] > now and known[0] is not None and known[0].is_dir
                            and known[0].entry is not None):
                        append((name, key, known[0]))
                        continue
                if keep:
                    cache[child] = (stat, expires)
                append((name, key, stat))
            result = (out, items[-1].key if items else after, len(items) < limit)
            if keep:
                pages = dict(self._pages.get(path) or {})
                pages[(after, limit)] = (result, expires)
                if _entries_in(pages) <= LISTED_ENTRIES_KEPT:
                    self._pages[path] = pages  # re-inserted: the cache counts its entries again
        return result

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
                    self._cache.pop(path, None)
                    self._pages.pop(path, None)
                    self._pages.pop(path.rpartition("/")[0], None)
                self._changes += 1
        return changed

    def has_children(self, path: str, ignore: tuple[str, ...] = ()) -> bool:
        """Whether directory ``path`` holds any object other than its own marker and ``ignore``
        (keys)."""
        prefix = dir_prefix(path)
        skip = set(ignore) | {prefix}
        items = self.backend.list_entries(self.repo, self.ref, prefix, limit=len(skip) + 1)
        return any(item.key not in skip for item in items)
