"""Files whose last handle is released while a mapping of their spool can still write into it.

The kernel maps a file in passthrough mode through its backing file, not through the handle the
mmap(2) came through, so a shared mapping of a file the kernel writes into (its spool, see
``lakefuse.fs.passthrough``) outlives the handle: a program may close the file right after
mapping it and write through the mapping later (linkers write their output so), and the file's
RELEASE reaches the mount before the writes do.

At that RELEASE the mount stores a copy of the spool (what the file holds then: another mount
or a commit sees that much) and keeps the spool as the file's (``OpenFile.kernel_may_change_spool``),
and ``MappedSpools`` watches it: every ``POLL_SECONDS`` it asks whether the mapping is gone
(``Spool.held_elsewhere``), and then has the file stored once more if it changed, and dropped.
A new open of the file meanwhile takes the open file over: its own release decides again.
Unmount stores what such files hold then (``Uploader.flush_all``) and drops them.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from lakefuse.fs.handles import OpenFile

log = logging.getLogger(__name__)

#: seconds from a release to the first look: the kernel lets go of the released handle's own
#: backing file just after it sends the RELEASE, so the first look usually finds nothing mapped
FIRST_LOOK_SECONDS = 0.005
#: seconds between two looks at a file still mapped
POLL_SECONDS = 0.2


class MappedSpools:
    """The released files whose spool may still be mapped; ``settle(of)`` stores one (a copy
    while it is mapped) and drops it once it is not, and says whether it is done with."""

    def __init__(self, settle: Callable[[OpenFile], bool]):
        self._settle = settle
        self._lock = threading.Lock()
        self._due: dict[OpenFile, float] = {}  # the next look at each
        self._reported: set[OpenFile] = set()  # logged as still mapped
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None

    def watch(self, of: OpenFile) -> None:
        with self._lock:
            if self._closed:
                return
            self._due[of] = time.monotonic() + FIRST_LOOK_SECONDS
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="lakefuse-mapped", daemon=True)
                self._thread.start()
        self._wake.set()

    def watching(self) -> int:
        with self._lock:
            return len(self._due)

    def _run(self) -> None:
        while True:
            with self._lock:
                if self._closed or not self._due:
                    self._thread = None
                    return
                now = time.monotonic()
                looks = [of for of, due in self._due.items() if due <= now]
                wait = max(0.0, min(self._due.values()) - now) if not looks else 0.0
            if not looks:
                self._wake.wait(wait)
                self._wake.clear()
                continue
            for of in looks:
                try:
                    done = self._settle(of)
                except Exception:  # noqa: BLE001 - logged; the next look tries again
                    log.exception("storing %s after its release failed", of.node.path)
                    done = False
                with self._lock:
                    if done:
                        self._due.pop(of, None)
                        self._reported.discard(of)
                    elif of in self._due:
                        self._due[of] = time.monotonic() + POLL_SECONDS
                        if of not in self._reported:
                            self._reported.add(of)
                            log.info("%s was closed while mapped: stored as it is now, and again once unmapped",
                                     of.node.path)

    def close(self) -> None:
        """Unmount: stop watching (the caller stores and drops the files)."""
        with self._lock:
            self._closed = True
            thread, self._due, self._reported = self._thread, {}, set()
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)
