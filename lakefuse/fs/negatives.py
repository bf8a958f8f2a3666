"""Missing names of watched branches that the kernel may remember: ``NegativeEntries``.

A lookup of a name a branch does not have answers a negative entry (inode 0) with the
branch's entry timeout when the branch is watched (``lakefuse.fs.changes``), instead of a
bare ENOENT the kernel asks again at each path walk: repeated probes of missing names (git's
``packed-refs``, a build's or an import's search for files, ``test -e`` loops) cost one
request.  (A create with ``O_EXCL`` and a ``mkdir`` still send theirs: the kernel looks a
negative entry up again before them.)  The kernel drops such an entry itself when a name is
made through the mount (create, mkdir, rename...).  A name made any other way
(another writer, seen by the change-feed poll; a merge or reset through ``.lakefuse/``) must be
invalidated, so this module owns the record of which negative entries were handed out, by the
directory's inode and the name (a directory renamed through the mount keeps its inode, and the
kernel moves its negative entries with it):

- ``handed_out`` records one (False, and the caller answers a bare ENOENT, only when records
  given up early pile up because no poll takes them);
- ``invalidate_names`` and ``invalidate_tree`` give up the records a change touches and name
  them for the kernel to drop;
- records older than the timeout are dropped (the kernel no longer trusts them), and at the
  bound the oldest record is given up early: it is named for the kernel to drop at the next
  poll (``take_evicted``).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict

#: negative entries a mount keeps track of (about 200 bytes each)
NEGATIVE_ENTRIES_MOST = 16_384


class NegativeEntries:
    def __init__(self, most: int = NEGATIVE_ENTRIES_MOST):
        self._most = most
        self._lock = threading.Lock()
        #: (directory inode, name) -> (tree key, when the kernel stops trusting it), oldest first
        self._records: OrderedDict[tuple[int, str], tuple[object, float]] = OrderedDict()
        #: given up before their time, for the kernel to drop at the next poll
        self._evicted: list[tuple[int, str]] = []

    def __len__(self) -> int:
        return len(self._records)

    def handed_out(self, tree_key: object, parent_ino: int, name: str, ttl: float) -> bool:
        """Record that the kernel was told ``name`` is missing in directory ``parent_ino`` of
        tree ``tree_key`` for ``ttl`` seconds; False if it may not be (answer ENOENT)."""
        now = time.monotonic()
        key = (parent_ino, name)
        with self._lock:
            records = self._records
            records.pop(key, None)
            while records:
                oldest_key, (_, expires) = next(iter(records.items()))
                if expires > now:
                    if len(records) < self._most:
                        break
                    if len(self._evicted) >= self._most:
                        return False  # no poll took the last ones: the change watcher is stuck
                    self._evicted.append(oldest_key)
                del records[oldest_key]
            records[key] = (tree_key, now + ttl)
            return True

    def invalidate_names(self, names: list[tuple[int, str]], out: list[tuple[int, bytes]]) -> None:
        """The names ``(directory inode, name)`` may exist now: give up their records and add
        those still trusted by the kernel to ``out`` (entries to invalidate)."""
        now = time.monotonic()
        with self._lock:
            for key in names:
                record = self._records.pop(key, None)
                if record is not None and record[1] > now:
                    out.append((key[0], key[1].encode("utf-8")))

    def invalidate_tree(self, tree_key: object, out: list[tuple[int, bytes]]) -> None:
        """Everything in tree ``tree_key`` may have changed: give up all its records."""
        now = time.monotonic()
        with self._lock:
            for key, (record_tree, expires) in list(self._records.items()):
                if record_tree == tree_key:
                    del self._records[key]
                    if expires > now:
                        out.append((key[0], key[1].encode("utf-8")))

    def take_evicted(self, out: list[tuple[int, bytes]]) -> None:
        """Add the records given up early at the bound to ``out``, once."""
        with self._lock:
            evicted, self._evicted = self._evicted, []
        out.extend((ino, name.encode("utf-8")) for ino, name in evicted)
