"""Staging behind the writer: ``Stager`` stages the entries of new files in batches.

A file created through the mount is, once closed, an object in storage and an entry this
mount knows (``Unstaged`` keeps answering lookups and listings with it); its staging row is
written shortly after, together with those of the other files closed meanwhile, in one
transaction per branch (``LakeBackend.stage_entries``): a ``tar x`` or ``cp -r`` pays one
database transaction per batch instead of one per file.  An unlink waits the same way (``rm
-r``); until its batch is written the tree answers for the path from memory (``Tree.remember``
with ``pending``), and a file created and deleted within one batch is never staged at all.
A directory made by ``mkdir`` waits the same way: its marker object is stored at once, and
staged (key ``path/``) with the batch.

The rules that keep this invisible:

- Batches are written by one background thread once no entry came for ``BATCH_QUIET`` s
  (the writer paused), at least ``BATCH_WINDOW`` s after their first entry, and at most
  ``BATCH_LATEST`` s after it while entries keep coming (or at once when ``BATCH_MOST``
  wait): other processes and mounts see a closed file that much later (less than the
  change-poll interval).  Writing a batch is some 35 µs of Python per entry, which holds
  the interpreter lock the event loop waits for, up to a switch interval (5 ms) at a time:
  a burst of creates shorter than ``BATCH_LATEST`` runs without it.
- Everything else this mount stages on a branch goes through ``stage_now``, which writes the
  branch's waiting entries first, or waits in the same batch as them (``put``: unlinks, renames
  of files memory knows, chmod and utime): a change never races an older entry of the same
  file.  ``flush`` writes them before a commit, an fsync(2) of a file or directory,
  and at unmount; fsync(2) is where a closed file's entry becomes durable.
- A batch that fails stays waiting and is tried again (every ``RETRY_SECONDS``); the failure
  is logged, and raised by the next ``flush`` or ``stage_now`` of that branch (fsync, commit,
  unlink... answer EIO), as a kernel reports a failed writeback at the next fsync.
- ``kill -9`` of the daemon loses the entries not written yet (never an fsynced one); their
  objects stay in storage, unreferenced, for garbage collection.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Sequence

from lakefuse.fs.backend import LakeBackend
from lakefuse.fs.tree import Tree
from lakefuse.graveler.model import Entry

log = logging.getLogger(__name__)

#: how long the first entry of a batch waits for others, at least ...
BATCH_WINDOW = 0.05
#: ... then until none came for this long ...
BATCH_QUIET = 0.01
#: ... or until the first one waited this long
BATCH_LATEST = 0.25
#: a batch this big is written at once
BATCH_MOST = 2000
#: how long a failed batch waits before the next try
RETRY_SECONDS = 1.0


class _Waiting:
    """The entries of one branch (tree) waiting to be staged, and since when."""

    __slots__ = ("tree", "entries", "since", "last")

    def __init__(self, tree: Tree):
        self.tree = tree
        self.entries: dict[str, Entry | None] = {}  # path -> its newest entry (None: deleted)
        self.since = self.last = time.monotonic()  # when the first and the newest entry came

    def due_at(self) -> float:
        """When the batch is to be written (see the module docstring)."""
        return max(self.since + BATCH_WINDOW,
                   min(self.last + BATCH_QUIET, self.since + max(BATCH_LATEST, BATCH_WINDOW)))


class Stager:
    """See the module docstring.  ``staged(tree, path, entry)`` is called once an entry is
    written (the mount stops answering for it from memory)."""

    def __init__(self, backend: LakeBackend, staged: Callable[[Tree, str, Entry], None]):
        self._backend = backend
        self._staged = staged
        self._lock = threading.Lock()  # guards _waiting
        self._wake = threading.Condition(self._lock)
        self._write_lock = threading.Lock()  # one batch written at a time
        self._waiting: dict[object, _Waiting] = {}  # tree key -> its waiting entries
        self._thread: threading.Thread | None = None
        self._closed = False

    def put(self, tree: Tree, path: str, entry: Entry | None) -> None:
        """Stage ``entry`` at ``path`` soon (replacing one still waiting for that path); None
        deletes (a path that existed when the mount said so: staged unchecked)."""
        self.put_many(tree, ((path, entry),))

    def put_many(self, tree: Tree, items: Sequence[tuple[str, Entry | None]]) -> None:
        """``put`` each item, all in the same batch (one transaction: a rename's two halves)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the stager is closed")
            idle = not self._waiting
            waiting = self._waiting.get(tree.key)
            if waiting is None:
                waiting = self._waiting[tree.key] = _Waiting(tree)
            else:
                waiting.last = time.monotonic()
            for path, entry in items:
                waiting.entries[path] = entry
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="lakefuse-stager", daemon=True)
                self._thread.start()
            # the thread sleeps until the oldest batch is due: wake it only when there was none,
            # or when this batch is full (waking it for every file closed costs each close a
            # thread switch)
            if idle or len(waiting.entries) >= BATCH_MOST:
                self._wake.notify()

    def waiting(self, tree: Tree) -> int:
        with self._lock:
            waiting = self._waiting.get(tree.key)
            return len(waiting.entries) if waiting is not None else 0

    def flush(self, tree: Tree) -> None:
        """Write the waiting entries of ``tree`` now; raises what failed (they stay waiting)."""
        with self._write_lock:
            self._write(tree.key)

    def flush_all(self) -> list[tuple[Tree, Exception]]:
        """Write every waiting entry now; the branches that failed."""
        failures = []
        with self._lock:
            trees = [waiting.tree for waiting in self._waiting.values()]
        for tree in trees:
            try:
                self.flush(tree)
            except Exception as exc:  # noqa: BLE001 - reported to the caller
                failures.append((tree, exc))
        return failures

    def stage_now(self, tree: Tree, items: Sequence[tuple[str, Entry | None]], deleted_exist: bool = False) -> None:
        """``LakeBackend.stage_entries`` after the waiting entries of the branch."""
        with self._write_lock:
            self._write(tree.key)
            self._backend.stage_entries(tree.repo, tree.branch, items, deleted_exist=deleted_exist)

    def close(self) -> list[tuple[Tree, Exception]]:
        """Write what waits and stop the thread; the branches that failed."""
        failures = self.flush_all()
        with self._lock:
            self._closed = True
            self._wake.notify()
            thread = self._thread
        if thread is not None:
            thread.join(10)
        return failures

    # ------------------------------------------------------------------ writing

    def _write(self, key) -> None:
        """Stage what waits for tree ``key`` (under ``_write_lock``)."""
        with self._lock:
            waiting = self._waiting.pop(key, None)
        if waiting is None or not waiting.entries:
            return
        tree = waiting.tree
        items = list(waiting.entries.items())
        try:
            self._backend.stage_entries(tree.repo, tree.branch, items, deleted_exist=True)
        except Exception:
            with self._lock:  # back in line, behind anything newer for the same paths
                again = self._waiting.get(key)
                if again is not None:
                    waiting.entries.update(again.entries)
                waiting.since = waiting.last = time.monotonic() + RETRY_SECONDS - BATCH_WINDOW
                self._waiting[key] = waiting
            raise
        for path, entry in items:
            self._staged(tree, path, entry)

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._closed and not self._waiting:
                    self._wake.wait()
                if self._closed:
                    return
                now = time.monotonic()
                due = [key for key, waiting in self._waiting.items()
                       if now >= waiting.due_at() or len(waiting.entries) >= BATCH_MOST]
                if not due:
                    first = min(waiting.due_at() for waiting in self._waiting.values())
                    self._wake.wait(max(0.001, first - now))
                    continue
            for key in due:
                with self._write_lock:
                    try:
                        self._write(key)
                    except Exception as exc:  # noqa: BLE001 - kept waiting, raised by the next flush
                        log.warning("staging a batch of closed files failed (tried again in %.0f s): %s",
                                    RETRY_SECONDS, exc)
