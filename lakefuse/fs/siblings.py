"""``SiblingReadAhead``: the next files of a directory read in ahead of a program that walks it
with cold caches (``grep -r``, ``find | xargs cat``, a job reading a dataset file by file).

With the page cache cold, a program reading a directory's files one after the other waits for
the disk at every file: its first READ finds the bytes uncached and hops to a worker thread,
which waits for the disk.  One file at a time, the disk answers one request at a time.  These
waits are cheap to overlap, because the mount knows which files come next: the order it lists
them in.

So when the first READ of a read-only handle of a local object finds its bytes uncached (a
*miss*, reported by ``lakefuse.fs.files``), a thread of its own opens the next ``AHEAD_FILES``
files of the same directory, in listing order, and asks the kernel to read them in as their
opens would (``read_ahead_bytes``: ``posix_fadvise(WILLNEED)`` queues the reads and returns).
While the program goes on opening the files read in, the stream keeps ``AHEAD_FILES`` ahead of
it.  A miss elsewhere in the directory (or behind the program: another pass) starts the stream
afresh there.

Nothing starts while reads find their bytes cached, nor at a miss of a file under
``SMALLEST_MISS_BYTES``: the read-in each open starts is nearly always in time for the first
READ of a small file (with the caches dropped, 3 of 690 files under 16 KiB missed in a ``grep
-r``, 27 of 8,000 files of a few bytes in a ``find | xargs cat``), and a stream started by such
a fluke reads the whole directory ahead for nothing, at about 75 µs of the mount's CPU per file
(that ``find | xargs cat`` took 0.3–0.7 s more CPU for 4,000 files).  An open costs one
dictionary lookup here.  Only directories the tree knows whole are read ahead (names and
entries from memory, never a backend call), of at most ``MOST_NAMES`` names, and only objects
that are files on this machine (``local_file``); files the kernel reads itself (passthrough)
send no READ, so they never start a stream.  The thread stops after ``IDLE_SECONDS`` without work; ``close`` stops it.
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
from collections import OrderedDict, deque
from typing import Callable, Protocol

from lakefuse.fs.readers import read_ahead_bytes
from lakefuse.fs.tree import MEMORY_LISTING_NAMES
from lakefuse.graveler.model import Entry

log = logging.getLogger(__name__)

#: files a stream keeps read in ahead of the program walking the directory
AHEAD_FILES = 32
#: a miss of a smaller file starts nothing (``missed``)
SMALLEST_MISS_BYTES = 64 * 1024
#: directories with a stream at most (the least recently used one is dropped)
MOST_STREAMS = 64
#: a bigger directory is not read ahead: sorting its names (once per stream, one call that
#: holds the GIL) would stall the event loop, about 150 ms for 100,000 names on a small VM;
#: the same bound as a directory listed from memory (``lakefuse.fs.tree``)
MOST_NAMES = MEMORY_LISTING_NAMES
#: the thread stops after this long without work (the next miss starts another)
IDLE_SECONDS = 30.0
#: a name after every name: the refill point of a stream that read in its directory's end
_PAST_THE_END = "\U0010ffff"


class SiblingTree(Protocol):
    """What a stream needs of a tree (``lakefuse.fs.tree.Tree``)."""

    repo: str

    def known_names(self, path: str, most: int) -> list[str] | None: ...

    def cached_entry(self, path: str) -> Entry | None: ...


class _Stream:
    """Reading ahead in one directory: where the program is, and how far the thread got."""

    __slots__ = ("tree", "directory", "names", "started_at", "reader_at", "planned_to", "next_index", "refill_at",
                 "queued", "generation")

    def __init__(self, tree: SiblingTree, directory: str, name: str):
        self.tree = tree
        self.directory = directory
        self.names: list[str] | None = None  # sorted, once the thread asked the tree
        self.started_at = name  # the miss the stream started at
        self.reader_at = name  # the name the program opened last: the thread skips what it passed
        #: the last name the thread reads in (or read in): opens from ``started_at`` to here are
        #: the stream's, missed or not (a miss overtook the thread, which skips it)
        self.planned_to = name
        self.next_index = 0  # names before this index were read in (or skipped)
        self.refill_at = _PAST_THE_END  # an open at or after this name asks for more
        self.queued = False
        self.generation = 0  # counts restarts: the thread drops a batch begun before one

    def restart(self, name: str) -> None:
        self.started_at = self.reader_at = self.planned_to = name
        self.next_index = 0
        self.generation += 1


class SiblingReadAhead:
    """See the module docstring.  ``opened`` and ``missed`` are called on the event loop (and on
    worker threads); they never block."""

    def __init__(self, local_file: Callable[[str, Entry], str | None], ahead_files: int = AHEAD_FILES):
        self._local_file = local_file
        self._ahead = ahead_files
        self._streams: OrderedDict[tuple[int, str], _Stream] = OrderedDict()
        self._queue: deque[_Stream] = deque()
        self._lock = threading.Lock()
        self._wanted = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None
        self._closed = False
        self._busy = False
        #: files read in ahead so far (logged at unmount)
        self.files_read_ahead = 0

    def opened(self, tree: SiblingTree, path: str) -> None:
        """A read-only open of the local object at ``path`` in ``tree``: a stream there follows
        the program (and reads further in once it is half-way through).  Never starts one."""
        self._note(tree, path, missed=False)

    def missed(self, tree: SiblingTree, path: str, size: int) -> None:
        """The first bytes of the object at ``path`` (``size`` bytes) were not in the page cache
        when the program read them: start reading ahead from there (unless a stream already
        read it in, or is about to).  A file under ``SMALLEST_MISS_BYTES`` starts nothing."""
        if size >= SMALLEST_MISS_BYTES:
            self._note(tree, path, missed=True)

    def _note(self, tree: SiblingTree, path: str, missed: bool) -> None:
        directory, _, name = path.rpartition("/")
        key = (id(tree), directory)
        stream = self._streams.get(key)
        # behind the program: another walk of the directory (a new pass), not this stream's
        covered = (stream is not None and stream.tree is tree and stream.started_at <= name <= stream.planned_to
                   and name >= stream.reader_at)
        if covered:
            stream.reader_at = name
            if name < stream.refill_at:
                return  # read in, or about to be (a miss the thread has not reached yet)
        elif not missed:
            return  # no stream follows this program here: nothing to do
        with self._lock:
            if self._closed:
                return
            stream = self._streams.get(key)
            if stream is None or stream.tree is not tree:
                stream = self._streams[key] = _Stream(tree, directory, name)
                if len(self._streams) > MOST_STREAMS:
                    self._streams.popitem(last=False)
            else:
                self._streams.move_to_end(key)
                if not covered:
                    stream.restart(name)  # a miss elsewhere: read ahead from there
            stream.refill_at = _PAST_THE_END  # asked once, until the thread sets the next point
            if not stream.queued:
                stream.queued = True
                self._queue.append(stream)
                self._wanted.notify_all()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="lakefuse-read-ahead", daemon=True)
                self._thread.start()

    def idle(self, timeout: float = 5.0) -> bool:
        """Wait until nothing is queued or being read in (tests); whether that happened."""
        with self._lock:
            return self._wanted.wait_for(lambda: not self._queue and not self._busy, timeout)

    def close(self) -> None:
        """Stop the thread (streams in progress are dropped)."""
        with self._lock:
            self._closed = True
            self._queue.clear()
            self._streams.clear()
            self._wanted.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    # ------------------------------------------------------------------ the thread

    def _run(self) -> None:
        while True:
            with self._lock:
                self._busy = False
                if not self._queue and not self._closed:
                    self._wanted.notify_all()  # for ``idle``
                    self._wanted.wait(IDLE_SECONDS)
                if self._closed or not self._queue:
                    self._thread = None
                    self._wanted.notify_all()
                    return
                stream = self._queue.popleft()
                stream.queued = False
                self._busy = True
            try:
                self._read_ahead(stream)
            except Exception:  # noqa: BLE001 - a hint only: never let it end the thread
                log.exception("reading ahead in %s failed", stream.directory or "/")

    def _read_ahead(self, stream: _Stream) -> None:
        tree = stream.tree
        if stream.names is None:
            stream.names = tree.known_names(stream.directory, MOST_NAMES)
            if stream.names is None:
                return  # not known whole: no order to read ahead in
        names = stream.names
        position = bisect.bisect_right(names, stream.reader_at)
        start = max(position, stream.next_index)
        end = min(position + self._ahead, len(names))
        prefix = stream.directory + "/" if stream.directory else ""
        generation = stream.generation
        if end > start:
            stream.planned_to = names[end - 1]
        for name in names[start:end]:
            if self._closed or stream.generation != generation:
                return  # restarted elsewhere meanwhile: queued again from there
            if name > stream.reader_at:  # else the program opened it already
                self._read_in(tree, prefix + name)
        if stream.generation != generation:
            return
        stream.next_index = max(end, stream.next_index)
        # ask for more once the program is half-way through what was read in
        refill = position + (self._ahead + 1) // 2
        stream.refill_at = names[refill] if refill < len(names) and end < len(names) else _PAST_THE_END

    def _read_in(self, tree: SiblingTree, path: str) -> None:
        entry = tree.cached_entry(path)
        if entry is None or not entry.size:
            return
        try:
            local = self._local_file(tree.repo, entry)
            if local is None:
                return
            fd = os.open(local, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        except Exception as exc:  # noqa: BLE001 - a hint only (a missing object: the read reports it)
            log.debug("no read-ahead of %s: %s", path, exc)
            return
        try:
            os.posix_fadvise(fd, 0, read_ahead_bytes(entry.size), os.POSIX_FADV_WILLNEED)
            self.files_read_ahead += 1
        except OSError:
            pass
        finally:
            os.close(fd)
