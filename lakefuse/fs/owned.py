"""Objects this mount stored that nothing else can reference yet: ``OwnedObjects`` decides when
the mount may append to such an object in place, or delete it once a rewrite or an unlink
superseded it, instead of copying it or leaving it to garbage collection.

An object the mount stores (a spool moved into a local storage namespace) gets a fresh address
that only its staged entry names.  It stays the mount's own while no commit can have taken it
and no other writer can have seen its entry: the branch's change feed, read from the cursor the
mount held before it stored the object, reports no change by another writer and no move of the
head or the staging token (commit, merge, revert, reset).  That check is one database read,
made right before acting:

- **Appends in place** (``adoptable``): ``>>`` to a big file the mount wrote and nobody
  committed appends to the object's own file (``Spool.adopt``), and its checksum is extended
  from the hash state kept for it (``checksum_after_appends``): an append costs the bytes
  appended, not the file.  A write below the staged size, or a truncate, copies the file first.
- **Reclaiming** (``superseded``): the object of a file rewritten, unlinked or renamed over
  while no other handle held it is deleted from storage ``RECLAIM_DELAY`` seconds later, once
  the change that superseded it is staged.  A renamed file stays the mount's own (``moved``).

Never touched: objects of a commit (the commit moved the head), objects another writer may have
seen (its changes show in the feed), objects stored before the mount started or by another
process, objects on remote (S3) storage, and a mount without a change feed.  Those stay for
``lakefuse gc``.  An append interrupted by a crash can leave bytes past the entry's size in the
object's file: every reader reads the entry's ``size`` bytes only, and the next adoption cuts
them off.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

from lakefuse.checksums import ContentHasher, content_hasher
from lakefuse.fs.tree import Tree
from lakefuse.graveler.model import Entry

log = logging.getLogger(__name__)

#: seconds between a file's rewrite or unlink and the deletion of its old object
RECLAIM_DELAY = 1.0
#: how many stored objects are remembered (the oldest are forgotten: left to gc)
MAX_OBJECTS = 65_536
#: objects at least this big keep their hash state, so appends extend their checksum
HASH_STATE_MIN_BYTES = 1024 * 1024
#: how many hash states are kept (each about 2 KiB)
MAX_HASH_STATES = 256
#: bytes read at a time when hashing appended bytes
_HASH_CHUNK = 4 * 1024 * 1024


@dataclass(slots=True, eq=False)
class Owned:
    """An object this mount stored: where its entry is staged, the branch's change-feed cursor
    from before, and the size, checksum and (big objects) hash state of its bytes."""

    repo: str
    branch: str
    path: str
    cursor: object
    size: int
    checksum: str
    hasher: ContentHasher | None = None
    stored_at: float = 0.0  # time.monotonic() when recorded: the oldest record has the oldest cursor


class OwnedObjects:
    def __init__(self, backend, stager):
        self._delete_data = getattr(backend, "delete_data", None)  # optional: no reclaiming without
        self._stager = stager
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._objects: OrderedDict[str, Owned] = OrderedDict()  # address -> Owned, oldest first
        self._hash_states = 0
        self._due: list[tuple[float, Tree, Entry]] = []  # superseded objects, in order of time
        self._thread: threading.Thread | None = None
        self._closed = False

    # ------------------------------------------------------------------ recording

    def stored(self, tree: Tree, path: str, entry: Entry, cursor: object,
               hasher: ContentHasher | None = None) -> None:
        """The mount stored ``entry``'s object for ``path``; ``cursor``: the tree's change-feed
        cursor taken before (None: no feed, the object is never the mount's own)."""
        if cursor is None or tree.change_feed is None:
            return
        owned = Owned(tree.repo, tree.branch, path, cursor, entry.size, entry.checksum, stored_at=time.monotonic())
        with self._lock:
            self._keep_hash_state(owned, hasher)
            self._objects[entry.physical_address] = owned
            while len(self._objects) > MAX_OBJECTS:
                _, dropped = self._objects.popitem(last=False)
                self._hash_states -= dropped.hasher is not None

    def _keep_hash_state(self, owned: Owned, hasher: ContentHasher | None) -> None:
        """Keep ``hasher`` (the state after ``owned.size`` bytes) for a big object (under the lock)."""
        self._hash_states -= owned.hasher is not None
        owned.hasher = hasher if hasher is not None and owned.size >= HASH_STATE_MIN_BYTES else None
        self._hash_states += owned.hasher is not None
        if self._hash_states > MAX_HASH_STATES:
            for other in self._objects.values():  # oldest first
                if other.hasher is not None and other is not owned:
                    other.hasher = None
                    self._hash_states -= 1
                    break

    def _own(self, tree: Tree, path: str, entry: Entry) -> Owned | None:
        """The record of ``entry``'s object if it is exactly the one the mount stored at ``path``."""
        with self._lock:
            owned = self._objects.get(entry.physical_address)
        if owned is None or (owned.repo, owned.branch, owned.path) != (tree.repo, tree.branch, path):
            return None
        if (owned.size, owned.checksum) != (entry.size, entry.checksum):
            return None
        return owned

    def _unchanged(self, tree: Tree, owned: Owned) -> bool:
        """Whether nobody else changed the branch since ``owned.cursor`` (a database read)."""
        try:
            cursor, keys = tree.change_feed(tree.repo, tree.branch, owned.cursor)
        except Exception as exc:  # noqa: BLE001 - unknown: treat the object as shared
            log.debug("change feed of %s/%s: %s", tree.repo, tree.branch, exc)
            return False
        if keys is None or keys:
            return False
        owned.cursor = cursor  # still the mount's own up to now
        return True

    def moved(self, tree: Tree, old_path: str, new_path: str, entry: Entry | None) -> None:
        """A rename staged ``entry`` at ``new_path`` instead of ``old_path``."""
        owned = self._own(tree, old_path, entry) if entry is not None else None
        if owned is not None:
            owned.path = new_path

    # ------------------------------------------------------------------ appends in place

    def adoptable(self, tree: Tree, path: str, entry: Entry) -> Owned | None:
        """The record of ``entry``'s object if the mount may append to it in place now."""
        owned = self._own(tree, path, entry)
        if owned is None or not self._unchanged(tree, owned):
            return None
        return owned

    @staticmethod
    def checksum_after_appends(owned: Owned, read, size: int) -> tuple[str, ContentHasher]:
        """The checksum (and hash state) of the object's first ``size`` bytes, ``read(offset,
        length)`` giving them: the kept hash state extended by the bytes after ``owned.size``,
        or every byte hashed when no state was kept."""
        hasher = owned.hasher.copy() if owned.hasher is not None else content_hasher()
        position = owned.size if owned.hasher is not None else 0
        while position < size:
            chunk = read(position, min(_HASH_CHUNK, size - position))
            if not chunk:
                raise OSError(f"the object ended at {position} of {size} bytes")
            hasher.update(chunk)
            position += len(chunk)
        return hasher.hexdigest(), hasher

    def appended(self, owned: Owned, entry: Entry, hasher: ContentHasher) -> None:
        """``entry`` (the same object, grown) is staged now."""
        with self._lock:
            owned.size, owned.checksum = entry.size, entry.checksum
            self._keep_hash_state(owned, hasher)

    # ------------------------------------------------------------------ reclaiming

    def superseded(self, tree: Tree, path: str, entry: Entry | None) -> None:
        """``path`` no longer names ``entry`` (rewritten or unlinked, no handle holding it):
        delete its object soon if it is the mount's own."""
        if entry is None or self._delete_data is None or self._own(tree, path, entry) is None:
            return
        with self._lock:
            if self._closed:
                return
            self._due.append((time.monotonic() + RECLAIM_DELAY, tree, entry))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="lakefuse-reclaim", daemon=True)
                self._thread.start()
            self._wake.notify()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._closed and (not self._due or self._due[0][0] > time.monotonic()):
                    self._wake.wait(None if not self._due else max(0.0, self._due[0][0] - time.monotonic()))
                if self._closed:
                    return
                now = time.monotonic()
                batch = [item for item in self._due if item[0] <= now]
                self._due = [item for item in self._due if item[0] > now]
            self._reclaim([(tree, entry) for _, tree, entry in batch])

    def _reclaim(self, batch: list[tuple[Tree, Entry]]) -> None:
        """Delete the objects of ``batch`` that are still the mount's own: per branch, one
        flush of the stager (the superseding changes staged first) and one change-feed read
        from the oldest of their cursors (nothing since then: nothing since any of them)."""
        by_tree: dict[int, tuple[Tree, list[tuple[Entry, Owned]]]] = {}
        for tree, entry in batch:
            owned = self._own_any_path(entry)
            if owned is not None:
                by_tree.setdefault(id(tree), (tree, []))[1].append((entry, owned))
        for tree, items in by_tree.values():
            try:
                self._stager.flush(tree)
            except Exception as exc:  # noqa: BLE001 - not staged: keep the objects (gc takes them)
                log.debug("reclaiming in %s/%s skipped: %s", tree.repo, tree.branch, exc)
                continue
            if not self._unchanged(tree, min((owned for _, owned in items), key=lambda owned: owned.stored_at)):
                continue
            for entry, owned in items:
                self._delete(tree, entry, owned)

    def _delete(self, tree: Tree, entry: Entry, owned: Owned) -> None:
        try:
            self._delete_data(tree.repo, entry)
        except Exception as exc:  # noqa: BLE001 - left for gc
            log.warning("deleting the superseded object %s of %s/%s: %s", entry.physical_address,
                        tree.repo, tree.branch, exc)
            return
        with self._lock:
            if self._objects.pop(entry.physical_address, None) is not None:
                self._hash_states -= owned.hasher is not None
        log.debug("deleted the superseded object %s (%d bytes)", entry.physical_address, entry.size)

    def _own_any_path(self, entry: Entry) -> Owned | None:
        with self._lock:
            owned = self._objects.get(entry.physical_address)
        return owned if owned is not None and owned.checksum == entry.checksum else None

    def close(self) -> None:
        """Stop reclaiming (unmount): what is still due stays for gc."""
        with self._lock:
            self._closed = True
            self._due.clear()
            self._wake.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=10)
