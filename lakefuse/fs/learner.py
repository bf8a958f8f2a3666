"""``DirectoryLearner``: the mount's thread that learns big directories whole in the background.

A tree asks for it (``Tree._point_read_in``) when lookups keep needing point reads in a
directory too big to be listed in one page; the thread runs ``Tree.learn_directory``, which
lists the directory page by page while requests go on and keeps it known whole.  One thread for
the mount, one directory at a time, in the order asked; a directory asked for again while it
waits is queued once, and at most ``QUEUED_MOST`` wait (the oldest is dropped: a lookup asks
again).  ``idle()`` returns once nothing waits or runs (tests, unmount).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

from lakefuse.errors import RefNotFound

if TYPE_CHECKING:
    from lakefuse.fs.tree import Tree

log = logging.getLogger(__name__)

#: directories waiting to be learnt, at most
QUEUED_MOST = 64


class DirectoryLearner:
    """See the module docstring.  Thread-safe."""

    def __init__(self):
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._queue: OrderedDict[tuple, tuple[Tree, str]] = OrderedDict()  # (tree key, path) -> job
        self._busy = False
        self._thread: threading.Thread | None = None
        self._closed = False

    def learn(self, tree: Tree, path: str) -> None:
        """Learn directory ``path`` of ``tree`` whole soon (never waits)."""
        with self._lock:
            if self._closed:
                return
            self._queue[(tree.key, path)] = (tree, path)
            if len(self._queue) > QUEUED_MOST:
                self._queue.popitem(last=False)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="lakefuse-learner", daemon=True)
                self._thread.start()
            self._changed.notify_all()

    def idle(self, timeout: float | None = None) -> bool:
        """Wait until nothing waits or is being learnt; whether that happened within ``timeout``."""
        with self._lock:
            return self._changed.wait_for(lambda: not self._queue and not self._busy, timeout)

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._closed:
                    self._changed.wait()
                if self._closed:
                    return
                _key, (tree, path) = self._queue.popitem(last=False)
                self._busy = True
            try:
                learnt = tree.learn_directory(path)
                log.debug("%s: %s %s whole", tree, "learnt" if learnt else "did not learn", path or "/")
            except RefNotFound as exc:  # the branch was deleted meanwhile: nothing to learn
                log.debug("%s: %s not learnt: %s", tree, path or "/", exc)
            except Exception as exc:  # noqa: BLE001 - lookups go on with point reads
                log.warning("%s: learning the directory %s failed: %s", tree, path or "/", exc)
            finally:
                with self._lock:
                    self._busy = False
                    self._changed.notify_all()

    def close(self) -> None:
        """Stop (unmount): what waits is dropped; a directory being learnt is waited for (at
        most 10 s: a directory of 100,000 names takes about 2 s)."""
        with self._lock:
            self._closed = True
            self._queue.clear()
            self._changed.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=10)
